"""Slow clients: uploads whose bodies never arrive must not starve proxied routes, and
slow headers, slow bodies and clients that never read must not stop the server answering others."""

from __future__ import annotations

import ssl
from collections.abc import Iterator

import h2.connection
import httpx
import pytest

from secure_orca import pki
from secure_orca.lab import replicas as launch
from tests.replicas import assert_no_traceback, run_replicas

from ..conftest import fp_flags
from .backends import Recorded, recording_backend
from .wire import (
    connect,
    get_h2,
    h2_client,
    read_stream,
    read_streams,
    tls_context,
)

STALLED_STREAMS = 60  # per connection; two connections hold more than httpx's pool of 100 upstream connections


@pytest.fixture(scope="module")
def rig(dev_pki: pki.DevPKI) -> Iterator[tuple[launch.Replica, Recorded]]:
    with recording_backend() as (url, recorded):
        flags = [*fp_flags(dev_pki), "--proxy", f"/apis/x={url}", "--proxy-timeout", "2s"]
        with run_replicas([launch.serve_argv(dev_pki, flags)]) as (replica,):
            yield replica, recorded


def stall_uploads(
    replica: launch.Replica, dev_pki: pki.DevPKI
) -> tuple[ssl.SSLSocket, h2.connection.H2Connection, list[int]]:
    """One connection with STALLED_STREAMS POSTs, each sending one byte of its body and then nothing."""
    sock = connect(replica, tls_context(dev_pki, "h2"), timeout=15)
    conn = h2_client()
    streams = [1 + 2 * i for i in range(STALLED_STREAMS)]
    for stream_id in streams:
        conn.send_headers(stream_id, [(":method", "POST"), (":path", f"/apis/x/upload/{stream_id}"),
                                      (":scheme", "https"), (":authority", "localhost")])  # fmt: skip
        conn.send_data(stream_id, b"x")
    sock.sendall(conn.data_to_send())
    return sock, conn, streams


def test_stalled_uploads_do_not_starve_other_proxied_requests(rig, dev_pki) -> None:
    replica, _ = rig
    held = [stall_uploads(replica, dev_pki) for _ in range(2)]
    try:
        context = ssl.create_default_context(cafile=str(dev_pki.cert("ca")))
        with httpx.Client(verify=context, http2=True, timeout=httpx.Timeout(10.0)) as http:
            for _ in range(3):
                response = http.get(replica.url + "/apis/x/unrelated")
                assert (response.status_code, response.text) == (200, "backend")
        # Each stalled upload was refused: 429 beyond the per-client bound, 408 once its body stalled.
        statuses = []
        for sock, conn, streams in held:
            replies = read_streams(sock, conn, streams)
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
        conn = h2_client()
        conn.update_settings({4: 0})  # SETTINGS_INITIAL_WINDOW_SIZE = 0
        conn.send_headers(1, [(":method", "GET"), (":path", "/version"), (":scheme", "https"),
                              (":authority", "localhost")], end_stream=True)  # fmt: skip
        sock.sendall(conn.data_to_send())
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
        conn = h2_client()
        conn.send_headers(1, [(":method", "POST"), (":path", "/apis/x/slow"), (":scheme", "https"),
                              (":authority", "localhost")])  # fmt: skip
        sock.sendall(conn.data_to_send())
        for _ in range(4):
            conn.send_data(1, b"part")
            sock.sendall(conn.data_to_send())
            time.sleep(0.3)  # well inside the 2s body timeout
        conn.end_stream(1)
        sock.sendall(conn.data_to_send())
        reply = read_stream(sock, conn, 1)
    assert (reply.status, reply.body) == (200, b"backend")
    assert recorded.requests[before:] == [("POST", "/apis/x/slow")]
