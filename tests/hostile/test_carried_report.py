"""Attacks on the carried report (``server/http/connection.py``, ``GatewayH2Connection.send_headers``): the
report field skips h2's per-field work and is appended by the encoder, so it must land on exactly the response
it was attached to, never on another stream of the connection, and only when h2 would have passed it
unchanged."""

from __future__ import annotations

import ssl
from pathlib import Path

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import hpack
import httpx
import pytest

from secure_orca import pki
from secure_orca.h2client import client_connection
from secure_orca.lab import replicas as launch
from secure_orca.server.hpack.headers import indexed_encoder
from secure_orca.server.http.connection import GatewayH2Connection

REPORT = b"endpoint-load-metrics"
FIELD = (REPORT, b"TEXT cpu_utilization=0.25, mem_utilization=0.5, rps_fractional=10")


def connected() -> tuple[h2.connection.H2Connection, h2.connection.H2Connection]:
    """A server connection with the gateway's header encoding and a real h2 client, joined in memory."""
    server = GatewayH2Connection()
    client = client_connection()
    client.initiate_connection()
    server.initiate_connection()
    server.receive_data(client.data_to_send())
    client.receive_data(server.data_to_send())
    server.receive_data(client.data_to_send())
    return server, client


def request(server: h2.connection.H2Connection, client: h2.connection.H2Connection, stream_id: int) -> None:
    client.send_headers(
        stream_id, [(":method", "GET"), (":path", "/"), (":scheme", "https"), (":authority", "a")], end_stream=True
    )
    server.receive_data(client.data_to_send())


def responses(server: h2.connection.H2Connection, client: h2.connection.H2Connection) -> dict[int, list]:
    events = client.receive_data(server.data_to_send())
    return {
        e.stream_id: list(e.headers)
        for e in events
        if isinstance(e, (h2.events.ResponseReceived, h2.events.TrailersReceived))
    }


def test_a_failed_send_carries_nothing_into_the_next_block() -> None:
    """hypercorn may try to answer a stream the client already closed: h2 raises before encoding. The report
    taken out for that response must not be appended to the next response, which was not granted one."""
    server, client = connected()
    request(server, client, 1)
    server.send_headers(1, [(b":status", b"200")], end_stream=True)
    request(server, client, 3)
    with pytest.raises(h2.exceptions.ProtocolError):  # raised before any header is encoded
        server.send_headers(1, [(b":status", b"200"), FIELD])
    server.send_headers(3, [(b":status", b"200"), (b"server", b"x")], end_stream=True)
    got = responses(server, client)
    assert got[3] == [(b":status", b"200"), (b"server", b"x")]


def test_interleaved_streams_get_the_report_exactly_where_it_was_attached() -> None:
    server, client = connected()
    granted = {}
    for round_ in range(30):
        stream_id = 2 * round_ + 1
        request(server, client, stream_id)
        granted[stream_id] = round_ % 3 != 1
        fields = (
            [(b":status", b"200"), FIELD, (b"audit-id", b"%d" % round_)]
            if granted[stream_id]
            else [(b":status", b"200"), (b"audit-id", b"%d" % round_)]
        )
        server.send_headers(stream_id, fields, end_stream=True)
        got = responses(server, client)[stream_id]
        assert (FIELD in got) is granted[stream_id]
        assert got.count(FIELD) <= 1


@pytest.mark.parametrize(
    "fields",
    [
        [(b":status", b"200"), (REPORT, b"TEXT cpu_utilization=0.25 ")],  # h2 strips the whitespace itself
        [(b":status", b"200"), (b"Endpoint-Load-Metrics", b"TEXT cpu_utilization=0.25")],  # h2 lower-cases it
    ],
)
def test_a_field_h2_would_change_goes_through_h2(fields: list[tuple[bytes, bytes]]) -> None:
    server, client = connected()
    request(server, client, 1)
    server.send_headers(1, list(fields), end_stream=True)
    assert responses(server, client)[1] == [(b":status", b"200"), (REPORT, b"TEXT cpu_utilization=0.25")]


def test_trailers_starting_with_the_report_are_not_carried() -> None:
    """Only a response block (``:status`` first) is carried; trailers go through h2 as they are."""
    server, client = connected()
    request(server, client, 1)
    server.send_headers(1, [(b":status", b"200")])
    server.send_headers(1, [(b"x-first", b"1"), FIELD, (b"x-last", b"2")], end_stream=True)
    assert responses(server, client)[1] == [(b"x-first", b"1"), FIELD, (b"x-last", b"2")]  # carried: FIELD last


def test_an_encoder_that_has_sent_blocks_is_never_replaced() -> None:
    """The peer's decoder mirrors the table from the first block: swapping a used encoder would desynchronise
    it, so the server's encoding is installed only on a fresh one (and a size change still pending goes with
    it)."""
    used = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding=None))
    used.encoder.encode([(b"x-entry", b"1")])
    before = used.encoder
    assert indexed_encoder(used.encoder) is before
    for sizes in ([256], [256, 4096]):  # pending size updates (RFC 7541 6.3), even one back to the default
        fresh = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding=None))
        reference = hpack.Encoder()
        for size in sizes:
            fresh.encoder.header_table_size = reference.header_table_size = size
        encoder = indexed_encoder(fresh.encoder)
        assert type(encoder) is not hpack.Encoder
        assert encoder.encode([(b"x-entry", b"1")]) == reference.encode([(b"x-entry", b"1")])


def test_over_a_real_connection_only_granted_requests_see_the_report(
    secured_replica: launch.Replica, dev_pki: pki.DevPKI
) -> None:
    """One HTTP/2 connection to the real server, requests alternating the right secret, no opt-in and a wrong
    secret: the report is on exactly the granted responses."""
    secret = dev_pki.secret.read_text().strip()
    context = ssl.create_default_context(cafile=str(Path(dev_pki.cert("ca"))))
    kinds = {
        "secret": [("endpoint-load-metrics-request", f"TEXT; secret={secret}")],
        "none": [],
        "wrong": [("endpoint-load-metrics-request", "TEXT; secret=" + "w" * len(secret))],
    }
    with httpx.Client(verify=context, http2=True, timeout=10) as http:
        for number in range(45):
            kind = list(kinds)[number % 3]
            response = http.get(secured_replica.url + "/healthz", headers=kinds[kind])
            assert response.http_version == "HTTP/2"
            assert ("endpoint-load-metrics" in response.headers) is (kind == "secret"), (number, kind)
