"""Malformed HTTP/2 is a stream's problem. A non-ASCII ``:method`` ended every stream of its
connection (500, connection dead); a non-ASCII or upper-case header name, an empty ``:path``, ``host`` naming
another authority than ``:authority``, and pseudo-headers in trailers made h2 end the connection (GOAWAY).
RFC 9113 section 8.1.1: a malformed request is a stream error of type PROTOCOL_ERROR; here the malformed
stream is reset and a request in progress on the same connection completes, with no traceback."""

from __future__ import annotations

import time

import h2.errors
import pytest

from secure_orca import pki
from secure_orca.lab import replicas as launch
from tests.replicas import replica_fixture

from ..conftest import fp_flags
from .wire import connect, h2_loop, read_streams, tls_context

REVIEW = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
BASE = [(":scheme", "https"), (":authority", "localhost")]
MALFORMED = {
    "non-ascii-method": [(":method", "GÉT"), (":path", "/version"), *BASE],
    "method-not-a-token": [(":method", "GET /x"), (":path", "/version"), *BASE],
    "non-ascii-name": [(":method", "GET"), (":path", "/version"), *BASE, ("x-é", "1")],
    "upper-case-name": [(":method", "GET"), (":path", "/version"), *BASE, ("X-Up", "1")],
    "empty-path": [(":method", "GET"), (":path", ""), *BASE],
    "host-differs-from-authority": [(":method", "GET"), (":path", "/version"), *BASE, ("host", "example.com")],
    "connection-header": [(":method", "GET"), (":path", "/version"), *BASE, ("connection", "close")],
}


replica = replica_fixture(fp_flags)


def beside_a_request_in_progress(replica: launch.Replica, dev_pki: pki.DevPKI, send_malformed) -> dict:
    """Stream 1 is a POST whose body is half sent; ``send_malformed`` sends stream 3; then stream 1 finishes."""
    with connect(replica, tls_context(dev_pki, "h2"), timeout=5) as sock:
        loop = h2_loop(sock)
        loop.conn.send_headers(1, [(":method", "POST"), (":path", REVIEW), *BASE, ("content-type", "application/json")])
        loop.conn.send_data(1, b'{"kind":')
        send_malformed(loop.conn)
        loop.flush()
        time.sleep(0.1)  # the malformed stream is handled while stream 1 waits for its body
        loop.conn.send_data(1, b'"SelfSubjectReview"}', end_stream=True)
        loop.flush()
        return read_streams(loop, [1, 3])


@pytest.mark.parametrize("case", MALFORMED)
def test_a_malformed_request_is_a_stream_error(replica, dev_pki, case) -> None:
    replies = beside_a_request_in_progress(
        replica, dev_pki, lambda c: c.send_headers(3, MALFORMED[case], end_stream=True)
    )
    assert (replies[3].status, replies[3].reset) == (None, h2.errors.ErrorCodes.PROTOCOL_ERROR), replies[3]
    assert replies[1].status == 201 and not (replies[1].goaway or replies[1].closed), replies[1]


def test_pseudo_headers_in_trailers_are_a_stream_error(replica, dev_pki) -> None:
    def trailers(conn) -> None:
        conn.send_headers(3, [(":method", "POST"), (":path", REVIEW), *BASE])
        conn.send_data(3, b"{}")
        conn.send_headers(3, [(":path", "/other")], end_stream=True)

    replies = beside_a_request_in_progress(replica, dev_pki, trailers)
    assert replies[3].reset == h2.errors.ErrorCodes.PROTOCOL_ERROR, replies[3]
    assert replies[1].status == 201 and not (replies[1].goaway or replies[1].closed), replies[1]


def test_host_equal_to_authority_is_served(replica, dev_pki) -> None:
    """RFC 9113 section 8.3.1: ``host`` beside ``:authority`` is allowed when they name the same authority."""
    headers = [(":method", "GET"), (":path", "/version"), *BASE, ("host", "localhost")]
    replies = beside_a_request_in_progress(replica, dev_pki, lambda c: c.send_headers(3, headers, end_stream=True))
    assert (replies[1].status, replies[3].status) == (201, 200)
