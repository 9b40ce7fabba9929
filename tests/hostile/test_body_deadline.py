"""Every request body has a deadline, on every route, as kube's --request-timeout
gives every non-long-running request one (default 60s). A POST whose body never comes used to wait forever
on the demo's selfsubjectreviews (60 connections x 100 such streams: +100 MiB, still pending after 70 s); now
it is answered 408 once --request-timeout has passed, and at most MAX_PENDING_BODIES requests of one
connection wait for their body at once (the others get 408 at once). Answers are counted, never timed."""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from collections import Counter

import httpx

from secure_orca import pki
from secure_orca.lab import replicas as launch
from secure_orca.server.asgi import MAX_PENDING_BODIES, BodyDeadline, Message, Scope
from tests.replicas import replica_fixture

from ..conftest import ClientCert, fp_flags
from .h2client import H2Client
from .wire import connect, h1_status, tls_context

REVIEW = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
OPT_IN = "endpoint-load-metrics-request"
EXTRA = 8  # streams beyond MAX_PENDING_BODIES on one connection


# 2 s: long enough for all 40 to be waiting at once
replica = replica_fixture(lambda dev: [*fp_flags(dev), "--request-timeout", "2s"])


def reasons(client: H2Client, streams: list[int]) -> Counter[tuple[int | None, str]]:
    found: Counter[tuple[int | None, str]] = Counter()
    for stream in streams:
        reply = client.streams[stream]
        found[(reply.status, json.loads(reply.body or b"{}").get("reason", ""))] += 1
    return found


def test_posts_without_a_body_get_408_and_the_connection_still_serves(replica, dev_pki) -> None:
    client = H2Client.connect(replica, dev_pki.cert("ca"))
    try:
        posts = [client.start("POST", REVIEW) for _ in range(MAX_PENDING_BODIES + EXTRA)]  # headers, no body
        health = client.start("GET", "/healthz", end=True)
        assert client.pump_until_ended(health, *posts), client.streams
    finally:
        client.close()
    assert client.streams[health].status == 200
    assert reasons(client, posts) == {(408, "Timeout"): MAX_PENDING_BODIES, (408, "TooManyPendingBodies"): EXTRA}


def test_an_authenticated_caller_may_wait_on_every_stream_of_its_connection(replica, dev_pki, client_certs) -> None:
    """A load balancer (the front proxy, its user named) uploads on many streams of one connection: none of its
    requests is refused for the number pending (issue 39: 408 beyond 32 on one connection), each still has the
    deadline; an anonymous client on its own connection keeps the cap (the test above)."""
    lb = client_certs["front-proxy"]
    client = H2Client.connect(replica, dev_pki.cert("ca"), (lb.cert, lb.key))
    try:
        user = [("x-remote-user", "envoy-lb")]
        posts = [client.start("POST", REVIEW, user) for _ in range(MAX_PENDING_BODIES + EXTRA)]  # no body yet
        assert client.pump_until_ended(*posts), client.streams
    finally:
        client.close()
    assert reasons(client, posts) == {(408, "Timeout"): MAX_PENDING_BODIES + EXTRA}


def in_flight(replica: launch.Replica, dev_pki: pki.DevPKI, front_proxy: ClientCert) -> int:
    """``named_metrics.in_flight_requests`` of the report, read by the front proxy once every request it
    waits on has ended: reports a sampling interval apart (100 ms: back-to-back requests could all read one
    sample), until one shows 0, at most 50 (a bound on the waiting, not a measurement)."""
    context = ssl.create_default_context(cafile=str(dev_pki.cert("ca")))
    context.load_cert_chain(front_proxy.cert, front_proxy.key)
    value = -1
    with httpx.Client(verify=context, http2=True, timeout=10) as http:
        for _ in range(50):
            report = http.get(replica.url + "/healthz", headers={OPT_IN: "TEXT"}).headers["endpoint-load-metrics"]
            value = int(float(report.split("named_metrics.in_flight_requests=")[1].split(",")[0]))
            if value == 0:
                break
            time.sleep(0.1)
    return value


def test_the_report_counts_no_stalled_request_once_answered(replica, dev_pki, client_certs) -> None:
    """After the stalled POSTs are answered, in_flight_requests is back to 0."""
    client = H2Client.connect(replica, dev_pki.cert("ca"))
    try:
        posts = [client.start("POST", REVIEW) for _ in range(10)]
        assert client.pump_until_ended(*posts)
    finally:
        client.close()
    assert in_flight(replica, dev_pki, client_certs["front-proxy"]) == 0


def test_an_http1_body_that_never_comes_gets_408(replica, dev_pki) -> None:
    with connect(replica, tls_context(dev_pki, "http/1.1")) as sock:
        sock.sendall(f"POST {REVIEW} HTTP/1.1\r\nHost: localhost\r\nContent-Length: 10\r\n\r\n".encode())
        response = b""
        while b"\r\n\r\n" not in response and (chunk := sock.recv(65536)):
            response += chunk
    assert h1_status(response) == 408


def test_a_body_that_arrives_is_served(replica, dev_pki) -> None:
    client = H2Client.connect(replica, dev_pki.cert("ca"))
    try:
        stream = client.start("POST", REVIEW)
        client.data(stream, b"{}", end=True)
        assert client.pump_until_ended(stream)
    finally:
        client.close()
    assert client.streams[stream].status == 201


def run(app_reads: bool, messages: list[Message]) -> list[Message]:
    """BodyDeadline in process around an app that reads the body (or not), with a client that sends
    ``messages`` and then nothing."""
    sent: list[Message] = []

    async def main() -> None:
        queue: asyncio.Queue[Message] = asyncio.Queue()
        for message in messages:
            queue.put_nowait(message)

        async def app(scope: Scope, receive, send) -> None:
            while app_reads:
                message = await receive()
                if message["type"] != "http.request" or not message.get("more_body"):
                    break
            await send({"type": "http.response.start", "status": 201, "headers": []})
            await send({"type": "http.response.body", "body": b"app"})

        async def send(message: Message) -> None:
            sent.append(message)

        await BodyDeadline(app, 0.01)({"type": "http", "client": ("c", 1)}, queue.get, send)

    asyncio.run(main())
    return sent


def test_the_bound_follows_the_callers_identity() -> None:
    """In process: with no body coming, an anonymous request beyond ``max_pending`` is refused at once; an
    authenticated one waits for its body (its deadline answers it)."""

    async def waiting(authenticated: bool) -> list[str]:
        loop = asyncio.get_running_loop()
        sent: list[str] = []

        def never() -> asyncio.Future[Message]:  # one per read: a timeout cancels what its own task awaits
            return loop.create_future()

        async def app(scope: Scope, receive, send) -> None:
            await receive()

        async def send(message: Message) -> None:
            if message["type"] == "http.response.start":
                sent.append("408")
            else:
                sent[-1] += json.loads(message["body"])["reason"]

        guard = BodyDeadline(app, 0.05, max_pending=2, authenticated=lambda scope: authenticated, streams=4)
        scope = {"type": "http", "client": ("c", 1), "path": "/"}
        await asyncio.gather(*(guard(dict(scope), never, send) for _ in range(4)))
        return sorted(sent)

    assert asyncio.run(waiting(False)) == ["408Timeout"] * 2 + ["408TooManyPendingBodies"] * 2
    assert asyncio.run(waiting(True)) == ["408Timeout"] * 4


def test_a_stalled_body_is_answered_408_and_the_app_answer_goes_nowhere() -> None:
    sent = run(True, [{"type": "http.request", "body": b"part", "more_body": True}])
    assert [m.get("status") for m in sent if m["type"] == "http.response.start"] == [408]
    assert all(m.get("body") != b"app" for m in sent)


def test_a_complete_body_or_none_read_is_not_bounded() -> None:
    whole = run(True, [{"type": "http.request", "body": b"{}", "more_body": False}])
    unread = run(False, [])
    for sent in (whole, unread):
        assert [m.get("status") for m in sent if m["type"] == "http.response.start"] == [201]
