"""Every header block is bounded before it is decoded (issue 36 row 1).

The audit's block: 1 MiB of HPACK dynamic table size updates (``0x20``) and a literal ``GET /healthz``, as
HEADERS and 63 CONTINUATION frames. hpack's loop took any number of size updates at the start of a block and
counted only fields against the 64 KiB header-list limit, and nothing bounded the encoded block: about 0.7 s of
the loop per request. Now the encoded block is refused once its fragments pass twice the header-list limit, as
they arrive (ENHANCE_YOUR_CALM), and a block may start with at most two size updates (RFC 7541 section 4.2;
COMPRESSION_ERROR). Both are connection errors with GOAWAY, counted in
``secure_orca_h2_header_blocks_refused_total``. Behaviour and counters only, never time.
"""

from __future__ import annotations

import re

import h2.errors
import h2.events
import h2.exceptions
import pytest

from benchmarks.header_block_flood import (
    FLOOD_FRAMES,
    FRAME,
    answer,
    frames,
    legal_block,
    request_block,
    size_update_flood,
)
from secure_orca import pki
from secure_orca.h2client import client_connection
from secure_orca.lab import replicas as launch
from secure_orca.server.hpack.headers import REFUSED_BLOCKS, TOO_LARGE, TOO_MANY_SIZE_UPDATES, max_encoded_block
from secure_orca.server.http.connection import GatewayH2Connection
from tests import plainhttp
from tests.replicas import assert_no_traceback, replica_fixture

from .wire import connect, get_h2, tls_context

HEADER_LIST_LIMIT = 65_536  # hypercorn's h2_max_header_list_size, the server's SETTINGS_MAX_HEADER_LIST_SIZE


def opened() -> GatewayH2Connection:
    """A server connection that has read a client's preface."""
    server = GatewayH2Connection()
    server.initiate_connection()
    client = client_connection()
    client.initiate_connection()
    server.receive_data(client.data_to_send())
    server.data_to_send()
    return server


def refusal(server: GatewayH2Connection, wire: list[bytes]) -> tuple[int, int | None, list[h2.events.Event]]:
    """Feed ``wire`` frame by frame: the index of the frame the server refused (len(wire) if none), the error code
    of its GOAWAY, and the events of the frames before."""
    events: list[h2.events.Event] = []
    for index, raw in enumerate(wire):
        try:
            events += server.receive_data(raw)
        except h2.exceptions.ProtocolError:
            client = client_connection()
            client.initiate_connection()
            ended = [
                e.error_code
                for e in client.receive_data(server.data_to_send())
                if isinstance(e, h2.events.ConnectionTerminated)
            ]
            return index, int(ended[0]) if ended and ended[0] is not None else None, events
    return len(wire), None, events


def requests_of(events: list[h2.events.Event]) -> list[list[tuple[bytes, bytes]]]:
    return [list(e.headers) for e in events if isinstance(e, h2.events.RequestReceived)]


def test_the_bound_is_twice_the_header_list_limit() -> None:
    assert opened().decoder.max_header_list_size == HEADER_LIST_LIMIT
    assert max_encoded_block(HEADER_LIST_LIMIT) == 2 * HEADER_LIST_LIMIT


def test_the_size_update_flood_is_refused_before_it_is_decoded() -> None:
    """hpack decoded the whole 1 MiB block and the request was served; now the frame whose fragment passes the
    bound ends the connection (ENHANCE_YOUR_CALM), the 9th of 64, long before END_HEADERS: nothing is decoded."""
    before = REFUSED_BLOCKS[TOO_LARGE]
    wire = frames(size_update_flood())
    assert len(wire) == FLOOD_FRAMES
    index, code, events = refusal(opened(), wire)
    assert requests_of(events) == []
    assert index == 2 * HEADER_LIST_LIMIT // FRAME, index  # the first fragment past 128 KiB in all
    assert code == h2.errors.ErrorCodes.ENHANCE_YOUR_CALM
    assert REFUSED_BLOCKS[TOO_LARGE] == before + 1


@pytest.mark.parametrize("updates", [3, 100])
def test_more_than_two_size_updates_are_refused(updates: int) -> None:
    """RFC 7541 section 4.2: at most two size updates start a block. hpack took any number of them."""
    before = REFUSED_BLOCKS[TOO_MANY_SIZE_UPDATES]
    index, code, events = refusal(opened(), frames(request_block(updates)))
    assert (index, code, requests_of(events)) == (0, h2.errors.ErrorCodes.COMPRESSION_ERROR, [])
    assert REFUSED_BLOCKS[TOO_MANY_SIZE_UPDATES] == before + 1


def test_a_size_update_after_a_field_is_refused() -> None:
    block = request_block()
    index, code, _ = refusal(opened(), frames(block[:1] + b"\x20" + block[1:]))
    assert (index, code) == (0, h2.errors.ErrorCodes.PROTOCOL_ERROR)  # h2's verdict on hpack's decoding error


@pytest.mark.parametrize("updates", [0, 1, 2])
def test_up_to_two_size_updates_are_served(updates: int) -> None:
    index, code, events = refusal(opened(), frames(request_block(updates)))
    assert (index, code) == (1, None)
    assert requests_of(events) == [
        [(b":method", b"GET"), (b":scheme", b"https"), (b":path", b"/healthz"), (b":authority", b"localhost")]
    ]


@pytest.mark.parametrize("huffman", [True, False])
def test_legal_large_blocks_are_served(huffman: bool) -> None:
    """One 60,000-character value (Huffman-coded), or 63,000 literal bytes just under the header-list limit, in
    several frames."""
    block = legal_block() if huffman else request_block(extra=[(b"x-large", b"v" * 63_000)])
    wire = frames(block)
    assert len(wire) > 1
    index, code, events = refusal(opened(), wire)
    assert (index, code) == (len(wire), None)
    (request,) = requests_of(events)
    assert len(request[-1][1]) in (60_000, 63_000)


def metrics(replica: launch.Replica) -> str:
    found = re.search(r"metrics on (http://\S+/metrics)", "".join(replica.process.lines))
    assert found, replica.process.output()
    return plainhttp.get(found.group(1), timeout=5).text


def refused(text: str, reason: str) -> float:
    found = re.search(rf'^secure_orca_h2_header_blocks_refused_total\{{reason="{reason}"\}} (\S+)$', text, re.M)
    assert found, text
    return float(found.group(1))


replica = replica_fixture(lambda dev: ["--metrics-bind-address", "127.0.0.1:0"])


def test_a_server_refuses_the_flood_and_counts_it(replica: launch.Replica, dev_pki: pki.DevPKI) -> None:
    """Against a real server: the flood and a block of three size updates each end their connection with GOAWAY,
    are counted by reason, and leave no traceback; another client is served."""
    lines = len(replica.process.lines)
    before = metrics(replica)
    context = tls_context(dev_pki, "h2")
    for block, code in (
        (size_update_flood(), h2.errors.ErrorCodes.ENHANCE_YOUR_CALM),
        (request_block(3), h2.errors.ErrorCodes.COMPRESSION_ERROR),
    ):
        with connect(replica, context) as sock:  # a reset may overtake the GOAWAY while frames are still sent
            assert answer(sock, frames(block)) in (f"goaway:{int(code)}", "closed")
    after = metrics(replica)
    assert refused(after, "encoded_block_too_large") == refused(before, "encoded_block_too_large") + 1
    assert refused(after, "too_many_size_updates") == refused(before, "too_many_size_updates") + 1
    assert get_h2(replica, dev_pki, "/healthz").status == 200
    assert_no_traceback(replica, since=lines)
