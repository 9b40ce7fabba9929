"""No client can write a traceback into the log. Each odd request gets a clean 4xx (or a
stream reset) and adds at most one log line; the server keeps answering."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import h2.events
import pytest

from secure_orca import pki
from secure_orca.lab import replicas as launch
from tests.replicas import assert_no_traceback, run_replicas

from ..conftest import fp_flags
from .backends import Recorded, recording_backend
from .wire import (
    H2Reply,
    connect,
    get_h2,
    h1_exchange,
    h1_status,
    h2_loop,
    h2_request,
    read_stream,
    tls_context,
)

Rig = tuple[launch.Replica, Recorded]


@pytest.fixture(scope="module")
def rig(dev_pki: pki.DevPKI) -> Iterator[Rig]:
    with recording_backend() as (url, recorded):
        flags = [*fp_flags(dev_pki), "--proxy", f"/apis/x={url}", "--proxy-timeout", "2s"]
        with run_replicas([launch.serve_argv(dev_pki, flags)]) as (replica,):
            yield replica, recorded


def websocket_h1(replica: launch.Replica, dev_pki: pki.DevPKI) -> int | None:
    request = (
        b"GET /version HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    return h1_status(h1_exchange(replica, dev_pki, request))


def h2_connect_without_path(replica: launch.Replica, dev_pki: pki.DevPKI) -> int | None:
    reply = h2_request(replica, dev_pki, [(":method", "CONNECT"), (":authority", "127.0.0.1:1")])
    return reply.status if reply.status is not None else _reset(reply)


def h2_extended_connect_websocket(replica: launch.Replica, dev_pki: pki.DevPKI) -> int | None:
    headers = [
        (":method", "CONNECT"),
        (":protocol", "websocket"),
        (":scheme", "https"),
        (":path", "/version"),
        (":authority", "localhost"),
        ("sec-websocket-version", "13"),
    ]
    reply = h2_request(replica, dev_pki, headers)
    return reply.status if reply.status is not None else _reset(reply)


def te_and_cl_through_proxy(replica: launch.Replica, dev_pki: pki.DevPKI) -> int | None:
    request = (
        b"POST /apis/x/y HTTP/1.1\r\nHost: localhost\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5\r\nhello\r\n0\r\n\r\n"
    )
    return h1_status(h1_exchange(replica, dev_pki, request))


def content_length_lies_through_proxy(replica: launch.Replica, dev_pki: pki.DevPKI) -> int | None:
    headers = [
        (":method", "POST"),
        (":path", "/apis/x/y"),
        (":scheme", "https"),
        (":authority", "localhost"),
        ("content-length", "100"),
    ]
    reply = h2_request(replica, dev_pki, headers, body=b"short")
    return reply.status if reply.status is not None else _reset(reply)


def invalid_upstream_url(replica: launch.Replica, dev_pki: pki.DevPKI) -> int | None:
    reply = get_h2(replica, dev_pki, "/apis/x/\u00e9 \x7f")
    return reply.status if reply.status is not None else _reset(reply)


def trailers_after_early_response(replica: launch.Replica, dev_pki: pki.DevPKI) -> int | None:
    """A request body with trailers to an endpoint that answers without reading the body."""
    with connect(replica, tls_context(dev_pki, "h2")) as sock:
        loop = h2_loop(sock)
        stream = loop.request(
            [
                (":method", "POST"),
                (":path", "/healthz"),
                (":scheme", "https"),
                (":authority", "localhost"),
                ("te", "trailers"),
            ],
            end=False,
        )
        reply = read_stream(loop, stream)  # the response arrives before the body is sent
        loop.conn.send_data(stream, b"late body")
        loop.conn.send_headers(stream, [("x-trailer", "late")], end_stream=True)
        loop.flush()
        time.sleep(0.3)
        loop.conn.ping(b"12345678")
        loop.flush()
        pongs: list[h2.events.Event] = []
        loop.on_event = lambda e: pongs.append(e) if isinstance(e, h2.events.PingAckReceived) else None
        pong = loop.read_until(lambda: bool(pongs))
        assert pong, "the connection died after trailers on an answered stream"
        return reply.status


def _reset(reply: H2Reply) -> int | None:
    return -1 if reply.refused else None


ATTACKS: dict[str, Callable[[launch.Replica, pki.DevPKI], int | None]] = {
    "websocket-upgrade-h1": websocket_h1,
    "h2-connect-without-path": h2_connect_without_path,
    "h2-extended-connect-websocket": h2_extended_connect_websocket,
    "te-and-cl-through-proxy": te_and_cl_through_proxy,
    "content-length-lies-through-proxy": content_length_lies_through_proxy,
    "invalid-upstream-url": invalid_upstream_url,
    "trailers-after-early-response": trailers_after_early_response,
}


@pytest.mark.parametrize(
    "attack",
    list(ATTACKS),
)
def test_odd_requests_get_a_clean_refusal_and_at_most_one_log_line(rig: Rig, dev_pki: pki.DevPKI, attack: str) -> None:
    replica, _ = rig
    lines = len(replica.process.lines)
    status = ATTACKS[attack](replica, dev_pki)
    time.sleep(0.3)  # let any log line the request causes arrive
    assert status is not None and (status == -1 or 200 <= status < 500), status
    new = replica.process.lines[lines:]
    assert_no_traceback(replica, since=lines)
    assert len(new) <= 1, "".join(new)
    assert get_h2(replica, dev_pki, "/healthz").status == 200


def test_smuggled_second_request_never_reaches_the_backend(rig: Rig, dev_pki: pki.DevPKI) -> None:
    """CL.TE: a body that, read by Content-Length, would leave a second request on the upstream connection."""
    replica, recorded = rig
    before, lines = len(recorded.requests), len(replica.process.lines)
    smuggled = b"GET /apis/x/smuggled HTTP/1.1\r\nHost: localhost\r\n\r\n"
    body = b"0\r\n\r\n" + smuggled
    request = (
        b"POST /apis/x/front HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\nContent-Length: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
        + body
    )
    assert h1_status(h1_exchange(replica, dev_pki, request)) == 400
    time.sleep(0.3)
    assert all("smuggled" not in path for path in recorded.paths[before:])
    assert_no_traceback(replica, since=lines)
