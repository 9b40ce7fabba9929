"""HTTP/2 floods and header tricks on the opt-in, against a real server.

Each flood must end (or bound) the attacking connection, leave the server answering other clients, keep its
memory bounded and write no traceback. Each header trick must get no report for a client without
credentials.
"""

from __future__ import annotations

import itertools
import socket
import ssl
from collections.abc import Iterator

import hpack
import pytest
from hyperframe.frame import ContinuationFrame, HeadersFrame

from secure_orca import pki
from secure_orca.lab import replicas as launch
from secure_orca.lab.procfs import rss_kib
from tests.replicas import assert_no_traceback, replica_fixture

from ..conftest import fp_flags
from .wire import (
    connect,
    get_h2,
    h1_exchange,
    h2_client,
    h2_loop,
    log_text,
    read_stream,
    tls_context,
)

MAX_RSS_GROWTH_MIB = 64  # the flood sends hundreds of MiB of header data; the server may keep a bounded part
PSEUDO = [(":method", "GET"), (":path", "/version"), (":scheme", "https"), (":authority", "localhost")]
OPT_IN = "endpoint-load-metrics-request"


replica = replica_fixture(fp_flags)


def send_until_refused(sock: ssl.SSLSocket, frames: Iterator[bytes]) -> bool:
    """Send frames until they run out or the server closes; True when the server closed the connection."""
    try:
        for frame in frames:
            sock.sendall(frame)
    except (ConnectionError, ssl.SSLError):
        return True
    sock.settimeout(5)
    try:
        while sock.recv(65536):
            pass
    except (TimeoutError, ConnectionError, ssl.SSLError):
        return False
    return True


def continuation_flood(encoder: hpack.Encoder, frames: int) -> Iterator[bytes]:
    """HEADERS without END_HEADERS, then CONTINUATION frames of valid, never-indexed headers, never ending."""
    first = HeadersFrame(1)
    first.data = encoder.encode(PSEUDO)
    yield first.serialize()
    for i in range(frames):
        frame = ContinuationFrame(1)
        frame.data = encoder.encode([hpack.NeverIndexedHeaderTuple(f"x-pad-{i}", "a" * 4000)] * 3)
        yield frame.serialize()


def hpack_bomb(encoder: hpack.Encoder) -> Iterator[bytes]:
    """A 4000-byte header put in the dynamic table, then one frame referencing it 16,000 times (64 MB)."""
    first = HeadersFrame(1)
    first.data = encoder.encode([*PSEUDO, ("x-big", "v" * 4000)])
    first.flags |= {"END_HEADERS", "END_STREAM"}
    yield first.serialize()
    bomb = HeadersFrame(3)
    bomb.data = encoder.encode(PSEUDO) + bytes([0x80 | 62]) * 16000
    bomb.flags |= {"END_HEADERS", "END_STREAM"}
    yield bomb.serialize()


def rapid_reset(streams: int) -> Iterator[bytes]:
    conn = h2_client()
    for n in range(streams):
        conn.send_headers(1 + 2 * n, PSEUDO)
        conn.reset_stream(1 + 2 * n)
        if n % 500 == 499:
            yield conn.data_to_send()
    yield conn.data_to_send()


@pytest.mark.parametrize("flood", ["continuation", "hpack-bomb", "rapid-reset"])
def test_floods_are_bounded(replica: launch.Replica, dev_pki: pki.DevPKI, flood: str) -> None:
    pid = replica.process.popen.pid
    before, lines = rss_kib(pid) // 1024, len(replica.process.lines)
    sock = connect(replica, tls_context(dev_pki, "h2"))
    preface = h2_client().data_to_send()
    encoder = hpack.Encoder()
    frames = {
        "continuation": lambda: continuation_flood(encoder, 4_000),  # ~48 MB of headers if it were all accepted
        "hpack-bomb": lambda: hpack_bomb(encoder),
        "rapid-reset": lambda: rapid_reset(20_000),
    }[flood]()
    try:
        closed = send_until_refused(sock, itertools.chain([preface], frames))
    finally:
        sock.close()
    assert closed, "the server kept a flooding connection open"
    assert get_h2(replica, dev_pki, "/healthz").status == 200
    assert rss_kib(pid) // 1024 - before < MAX_RSS_GROWTH_MIB
    assert_no_traceback(replica, since=lines)


H2_TRICKS: dict[str, list[tuple[str, str]]] = {
    "plain": [(OPT_IN, "TEXT")],
    "duplicate": [(OPT_IN, "TEXT"), (OPT_IN, "TEXT")],
    "empty-secret": [(OPT_IN, "TEXT; secret=")],
    "list-injection": [(OPT_IN, "TEXT; secret=x, TEXT")],
    "json": [(OPT_IN, "JSON")],
    "underscore": [("endpoint_load_metrics_request", "TEXT")],
    "trailing-space-name": [(OPT_IN + " ", "TEXT")],
    "nul-in-value": [(OPT_IN, "TEXT\x00; secret=x")],
    "uppercase-name": [(OPT_IN.upper(), "TEXT")],
    "connection-nominated": [("connection", OPT_IN), (OPT_IN, "TEXT")],
}


@pytest.mark.parametrize("trick", list(H2_TRICKS))
def test_opt_in_tricks_get_no_report_over_h2(replica: launch.Replica, dev_pki: pki.DevPKI, trick: str) -> None:
    reply = get_h2(replica, dev_pki, "/version", *H2_TRICKS[trick])
    assert not [name for name, _ in reply.headers if name.startswith("endpoint-load-metrics")], reply.headers
    assert reply.status in (200, None) and (reply.status == 200 or reply.refused)


H1_TRICKS = {
    "obs-fold": f"{OPT_IN}: TEXT;\r\n secret=x",
    "duplicate": f"{OPT_IN}: TEXT\r\n{OPT_IN}: TEXT",
    "space-before-colon": f"{OPT_IN} : TEXT",
    "underscore": "endpoint_load_metrics_request: TEXT",
    "mixed-case": "Endpoint-Load-Metrics-Request: TEXT",
}


@pytest.mark.parametrize("trick", list(H1_TRICKS))
def test_opt_in_tricks_get_no_report_over_http1(replica: launch.Replica, dev_pki: pki.DevPKI, trick: str) -> None:
    request = f"GET /version HTTP/1.1\r\nHost: localhost\r\n{H1_TRICKS[trick]}\r\nConnection: close\r\n\r\n"
    response = h1_exchange(replica, dev_pki, request.encode())
    head = response.split(b"\r\n\r\n", 1)[0].lower()
    assert b"\r\nendpoint-load-metrics:" not in head and b"endpoint-load-metrics-bin" not in head


def test_the_server_is_still_whole(replica: launch.Replica, dev_pki: pki.DevPKI) -> None:
    assert get_h2(replica, dev_pki, "/healthz").status == 200
    assert replica.process.popen.poll() is None
    with socket.create_connection((replica.host, replica.port), timeout=5):
        pass


def test_a_priority_flood_is_ignored_without_a_traceback(replica: launch.Replica, dev_pki: pki.DevPKI) -> None:
    """1,001 PRIORITY frames for idle streams overflowed hypercorn's priority tree (1,000
    streams): "Unhandled exception", a traceback per connection, the connection gone. RFC 9113 section 5.3.2
    deprecates the priority signals and lets a server ignore them; the connection goes on serving."""
    with connect(replica, tls_context(dev_pki, "h2")) as sock:
        loop = h2_loop(sock)
        for stream_id in range(1, 2003, 2):  # 1,001 idle streams
            loop.conn.prioritize(stream_id, weight=16, depends_on=0)
        loop.conn.send_headers(2003, PSEUDO, end_stream=True)
        loop.flush()
        reply = read_stream(loop, 2003)
    assert reply.status == 200, reply
    assert_no_traceback(replica)
    assert "Unhandled exception" not in log_text(replica), replica.process.output(30)
