"""What stopped a real deployment in front of a model server (issue 39), each over HTTP/2 and HTTP/1.1 against a
backend that generates as a model server does (``backends.streaming_backend``):

- in-flight limits per identity: a load balancer (one address) runs 50 streams with bodies at once (before: 16
  per address, then 429 with no Retry-After), and an anonymous client's quota never limits it;
- a client's reset or close ends the upstream generation at once (before: the backend generated to the end);
- timeouts per route: a first byte may take long while reads are bounded, a timed-out HTTP/2 stream is reset and
  an HTTP/1.1 one closed (before: one global between-read timeout, and a timed-out HTTP/2 stream hung);
- ``/v1=http://host/v1`` keeps the path (before: ``/v1/v1/...``);
- the pool to each backend is a flag.
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from secure_orca import pki
from secure_orca.lab import replicas as launch
from tests import proxied
from tests.replicas import assert_no_traceback, run_replicas

from ..conftest import ClientCert, fp_flags
from .backends import Generation, streaming_backend
from .h2client import H2Client

ANONYMOUS_LIMIT = 4
STREAMS = 50  # from one load balancer: more than the old 16 per address


@dataclass
class Rig:
    replica: launch.Replica
    generations: list[Generation]
    dev_pki: pki.DevPKI
    lb: ClientCert  # the front proxy's certificate: the load balancer, naming its user

    def h2(self, cert: ClientCert | None = None) -> H2Client:
        pair = (cert.cert, cert.key) if cert is not None else None
        return H2Client.connect(self.replica, self.dev_pki.cert("ca"), pair)

    def http1(self, cert: ClientCert | None = None) -> httpx.Client:
        return proxied.client(self.dev_pki.cert("ca"), "http1.1", cert)

    def since(self, count: int, path: str) -> list[Generation]:
        return [g for g in self.generations[count:] if path in g.path]


LB_USER = [("x-remote-user", "envoy-lb")]
BULK = "/bulk/v1/stream"  # the backend's /v1/stream through a route whose reads may be 30 s apart


@pytest.fixture(scope="module")
def rig(dev_pki: pki.DevPKI, client_certs: dict[str, ClientCert]) -> Iterator[Rig]:
    with streaming_backend() as (url, generations):
        flags = [
            *fp_flags(dev_pki),
            "--proxy",
            f"/v1={url}/v1",
            "--proxy",  # the many-streams tests: a loaded machine may hold a 0.2 s gap past the 1 s default
            f"/bulk={url};idle-timeout=30s",
            "--proxy",
            f"/short={url};idle-timeout=1s;first-byte-timeout=1s",
            "--proxy",
            f"/total={url};total-timeout=1s",
            "--proxy-timeout",
            "1s",
            "--proxy-max-in-flight-anonymous",
            str(ANONYMOUS_LIMIT),
        ]
        with run_replicas([launch.serve_argv(dev_pki, flags)]) as (replica,):
            yield Rig(replica, generations, dev_pki, client_certs["front-proxy"])
            assert_no_traceback(replica)


def test_h2_one_identity_runs_many_streams_with_bodies(rig: Rig) -> None:
    """Two connections of 25 streams (an authenticated caller's bodies may wait on every stream of a connection:
    tests/live/test_vllm_proxy.py runs 200 on one)."""
    before = len(rig.generations)
    clients = [rig.h2(rig.lb) for _ in range(2)]
    try:
        streams = [
            (c, c.start("POST", f"{BULK}?n=3&gap=0.2&i={i}", LB_USER)) for i in range(STREAMS // 2) for c in clients
        ]
        for client, stream in streams:
            client.data(stream, b"prompt part one, ", end=False)  # the body comes in parts: an upload in flight
        for client, stream in streams:
            client.data(stream, b"part two")
        for client in clients:
            assert client.pump_until_ended(*(s for c, s in streams if c is client))
        statuses = [c.streams[s].status for c, s in streams]
        assert statuses == [200] * STREAMS, statuses
        assert all(c.streams[s].body == b"data: 0\n\ndata: 1\n\ndata: 2\n\n" for c, s in streams)
    finally:
        for client in clients:
            client.close()
    assert len(rig.since(before, "/v1/stream")) == STREAMS


def test_http1_one_identity_runs_many_streams_with_bodies(rig: Rig) -> None:
    def body() -> Iterator[bytes]:
        yield b"prompt part one, "
        time.sleep(0.1)
        yield b"part two"

    def one(i: int) -> tuple[int, bytes]:
        with rig.http1(rig.lb) as http:
            response = http.post(f"{rig.replica.url}{BULK}?n=3&gap=0.2&h1={i}", content=body(), headers=LB_USER)
            return response.status_code, response.content

    with concurrent.futures.ThreadPoolExecutor(STREAMS) as pool:
        results = list(pool.map(one, range(STREAMS)))
    assert [status for status, _ in results] == [200] * STREAMS, results


def test_an_anonymous_quota_never_limits_the_load_balancer(rig: Rig) -> None:
    anonymous = rig.h2()
    lb = rig.h2(rig.lb)
    try:
        held = [anonymous.start("GET", f"/v1/stream?n=8&gap=0.25&anon={i}", end=True) for i in range(ANONYMOUS_LIMIT)]
        anonymous.pump_until(lambda: all(anonymous.streams[s].status for s in held))
        over = anonymous.start("GET", "/v1/stream?n=1&anon=over", end=True)
        assert anonymous.pump_until_ended(over)
        refused = anonymous.streams[over]
        assert refused.status == 429
        assert refused.fields.get("retry-after") == "1"
        assert b"TooManyRequests" in refused.body
        mine = lb.start("GET", "/v1/stream?n=2&lb=1", LB_USER, end=True)  # the LB, meanwhile: its own quota
        assert lb.pump_until_ended(mine)
        assert lb.streams[mine].status == 200
        assert anonymous.pump_until_ended(*held)
        assert [anonymous.streams[s].status for s in held] == [200] * ANONYMOUS_LIMIT
    finally:
        anonymous.close()
        lb.close()


def wait_for_end(generation: Generation, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not generation.ended_at and time.monotonic() < deadline:
        time.sleep(0.01)


GENERATED = 100  # chunks a generation would write when nobody cancels it, 50 ms apart


def test_h2_reset_ends_the_upstream_generation(rig: Rig) -> None:
    before = len(rig.generations)
    client = rig.h2(rig.lb)
    try:
        stream = client.start("GET", f"/v1/stream?n={GENERATED}&gap=0.05&cancel=h2", LB_USER, end=True)
        assert client.pump_until(lambda: client.streams[stream].body.count(b"data:") >= 5)
        client.reset(stream)
        cancelled_at = time.monotonic()
        (generation,) = rig.since(before, "cancel=h2")
        wait_for_end(generation)
    finally:
        client.close()
    assert generation.cancelled, generation
    assert generation.chunks < GENERATED / 2, generation
    print(f"h2 reset reached the backend after {1000 * (generation.ended_at - cancelled_at):.0f} ms")


def test_http1_close_ends_the_upstream_generation(rig: Rig) -> None:
    before = len(rig.generations)
    with rig.http1(rig.lb) as http:
        with http.stream("GET", f"{rig.replica.url}/v1/stream?n={GENERATED}&gap=0.05&cancel=h1", headers=LB_USER) as r:
            seen = b""
            for chunk in r.iter_raw():
                seen += chunk
                if seen.count(b"data:") >= 5:
                    break
        http.close()  # the client's deadline: it closes the connection
        cancelled_at = time.monotonic()
    (generation,) = rig.since(before, "cancel=h1")
    wait_for_end(generation)
    assert generation.cancelled, generation
    assert generation.chunks < GENERATED / 2, generation
    print(f"HTTP/1.1 close reached the backend after {1000 * (generation.ended_at - cancelled_at):.0f} ms")


def test_a_slow_first_byte_is_allowed_while_reads_stay_bounded(rig: Rig) -> None:
    """``--proxy-timeout 1s`` bounds silence between reads; the first byte has its own bound (5m by default)."""
    with rig.http1(rig.lb) as http:
        response = http.get(f"{rig.replica.url}/v1/stream?first=2&n=1", headers=LB_USER)
    assert (response.status_code, response.content) == (200, b"data: 0\n\n")


def test_a_first_byte_timeout_is_a_504(rig: Rig) -> None:
    with rig.http1(rig.lb) as http:
        response = http.get(f"{rig.replica.url}/short/stream?first=3&n=1", headers=LB_USER)
    assert response.status_code == 504
    assert response.json()["reason"] == "Timeout"


@pytest.mark.parametrize("route", ["/short/stream?n=3&gap=3", "/total/stream?n=20&gap=0.2"])
def test_h2_a_timed_out_stream_is_reset_never_left_hanging(rig: Rig, route: str) -> None:
    client = rig.h2(rig.lb)
    try:
        client.tls.settimeout(10)  # far beyond the route's 1 s: a hanging stream fails the test here
        stream = client.start("GET", route, LB_USER, end=True)
        client.pump_until(lambda: client.streams[stream].ended or client.streams[stream].reset is not None)
        reply = client.streams[stream]
        assert reply.status == 200 and reply.body.startswith(b"data: 0")
        assert reply.reset is not None and not reply.ended, reply
        # the connection stays usable for the next stream
        other = client.start("GET", "/v1/stream?n=1", LB_USER, end=True)
        assert client.pump_until_ended(other)
        assert client.streams[other].status == 200
    finally:
        client.close()


@pytest.mark.parametrize("route", ["/short/stream?n=3&gap=3", "/total/stream?n=20&gap=0.2"])
def test_http1_a_timed_out_response_closes_the_connection(rig: Rig, route: str) -> None:
    # the body ends without its last chunk: never complete
    with rig.http1(rig.lb) as http, pytest.raises(httpx.RemoteProtocolError):
        http.get(f"{rig.replica.url}{route}", headers=LB_USER)


def test_the_route_url_path_is_not_doubled(rig: Rig) -> None:
    before = len(rig.generations)
    with rig.http1(rig.lb) as http:
        assert http.get(f"{rig.replica.url}/v1/stream?path=1", headers=LB_USER).status_code == 200
    assert [g.path for g in rig.generations[before:]] == ["/v1/stream?path=1"]


def test_the_pool_to_a_backend_is_a_flag(rig: Rig) -> None:
    """``--proxy-max-connections 3``: six concurrent streams reach the backend three at a time."""
    with streaming_backend() as (url, generations):
        flags = [*fp_flags(rig.dev_pki), "--proxy", f"/pool={url}", "--proxy-max-connections", "3"]
        with run_replicas([launch.serve_argv(rig.dev_pki, flags)]) as (replica,):
            client = H2Client.connect(replica, rig.dev_pki.cert("ca"), (rig.lb.cert, rig.lb.key))
            try:
                streams = [client.start("GET", f"/pool/stream?n=4&gap=0.1&p={i}", LB_USER, end=True) for i in range(6)]
                assert client.pump_until_ended(*streams)
                assert [client.streams[s].status for s in streams] == [200] * 6
            finally:
                client.close()
    assert len(generations) == 6
    assert max(concurrent_generations(generations)) == 3


def concurrent_generations(generations: list[Generation]) -> list[int]:
    """How many generations were running when each one started."""
    return [sum(1 for o in generations if o.started_at <= g.started_at < o.ended_at) for g in generations]
