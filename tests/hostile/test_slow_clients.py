"""Slow clients: uploads whose bodies never arrive must not starve proxied routes, and
slow headers, slow bodies and clients that never read must not stop the server answering others."""

from __future__ import annotations

import ssl
from collections.abc import Iterator

import httpx
import pytest

from secure_orca import pki
from secure_orca.h2client import H2Loop
from secure_orca.lab import replicas as launch
from tests.replicas import assert_no_traceback, run_replicas

from ..conftest import fp_flags
from .backends import Recorded, recording_backend
from .wire import connect, get_h2, h2_loop, read_stream, read_streams, tls_context

STALLED_STREAMS = 60  # per connection; two connections hold more than httpx's pool of 100 upstream connections


@pytest.fixture(scope="module")
def rig(dev_pki: pki.DevPKI) -> Iterator[tuple[launch.Replica, Recorded]]:
    with recording_backend() as (url, recorded):
        flags = [*fp_flags(dev_pki), "--proxy", f"/apis/x={url}", "--proxy-timeout", "2s"]
        with run_replicas([launch.serve_argv(dev_pki, flags)]) as (replica,):
            yield replica, recorded


def stall_uploads(replica: launch.Replica, dev_pki: pki.DevPKI) -> tuple[ssl.SSLSocket, H2Loop, list[int]]:
    """One connection with STALLED_STREAMS POSTs, each sending one byte of its body and then nothing."""
    sock = connect(replica, tls_context(dev_pki, "h2"), timeout=15)
    loop = h2_loop(sock)
    streams = [1 + 2 * i for i in range(STALLED_STREAMS)]
    for stream_id in streams:
        loop.conn.send_headers(
            stream_id,
            [
                (":method", "POST"),
                (":path", f"/apis/x/upload/{stream_id}"),
                (":scheme", "https"),
                (":authority", "localhost"),
            ],
        )
        loop.conn.send_data(stream_id, b"x")
    loop.flush()
    return sock, loop, streams


def test_stalled_uploads_do_not_starve_other_proxied_requests(rig, dev_pki, client_certs) -> None:
    """Another identity (here a front proxy's user) is never limited by the stalling anonymous address."""
    replica, _ = rig
    held = [stall_uploads(replica, dev_pki) for _ in range(2)]
    try:
        context = ssl.create_default_context(cafile=str(dev_pki.cert("ca")))
        context.load_cert_chain(client_certs["front-proxy"].cert, client_certs["front-proxy"].key)
        with httpx.Client(verify=context, http2=True, timeout=httpx.Timeout(10.0)) as http:
            for _ in range(3):
                response = http.get(replica.url + "/apis/x/unrelated", headers={"x-remote-user": "lb"})
                assert (response.status_code, response.text) == (200, "backend")
        # Each stalled upload was refused: 429 beyond the anonymous address's in-flight bound, 408 once its body
        # stalled.
        statuses = []
        for _, loop, streams in held:
            replies = read_streams(loop, streams)
            statuses += [reply.status for reply in replies.values()]
        assert set(statuses) <= {408, 429}, statuses
        assert 429 in statuses and 408 in statuses
    finally:
        for sock, _, _ in held:
            sock.close()
    assert_no_traceback(replica)


def test_slow_header_and_never_reading_clients_do_not_stop_others(rig, dev_pki) -> None:
    replica, _ = rig
    slow_headers = []
    for _ in range(10):  # HTTP/1.1 request lines that never finish
        sock = connect(replica, tls_context(dev_pki, "http/1.1"))
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Slow: ")
        slow_headers.append(sock)
    never_read = []
    for _ in range(10):  # HTTP/2 clients that ask for a response and never open their window
        sock = connect(replica, tls_context(dev_pki, "h2"))
        loop = h2_loop(sock)
        loop.conn.update_settings({4: 0})  # SETTINGS_INITIAL_WINDOW_SIZE = 0
        loop.request([(":method", "GET"), (":path", "/version"), (":scheme", "https"), (":authority", "localhost")])
        never_read.append(sock)
    try:
        for _ in range(3):
            assert get_h2(replica, dev_pki, "/healthz").status == 200
    finally:
        for sock in slow_headers + never_read:
            sock.close()
    assert get_h2(replica, dev_pki, "/healthz").status == 200


def test_a_slow_body_within_the_timeout_is_forwarded_whole(rig, dev_pki) -> None:
    """The body timeout bounds silence, not the whole upload: a body that keeps coming gets through."""
    import time

    replica, recorded = rig
    before = len(recorded.requests)
    with connect(replica, tls_context(dev_pki, "h2")) as sock:
        loop = h2_loop(sock)
        stream = loop.request(
            [(":method", "POST"), (":path", "/apis/x/slow"), (":scheme", "https"), (":authority", "localhost")],
            end=False,
        )
        for _ in range(4):
            loop.conn.send_data(stream, b"part")
            loop.flush()
            time.sleep(0.3)  # well inside the 2s body timeout
        loop.conn.end_stream(stream)
        loop.flush()
        reply = read_stream(loop, stream)
    assert (reply.status, reply.body) == (200, b"backend")
    assert recorded.requests[before:] == [("POST", "/apis/x/slow")]
