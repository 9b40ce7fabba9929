"""A flood-sized header block costs the server work in proportion to its fields, not to its bytes (issue 26 row 1).

The flood of ``benchmarks.audit_flood``: a 24 KB path and ``Authorization: Bearer`` with 4,800 random 6-character
parts, about 58 KB of headers, Huffman-coded as h2load sends them; the control has the same path and one part.
hpack 4.2 decoded every Huffman string in a Python loop per nibble (about 18 ms per hostile block) and h2 checked
every character of every field in a Python loop: another client's p99 grew threefold under the hostile flood.

The work is counted, never timed: Python lines executed and C functions called (``sys.settrace``,
``sys.setprofile``) while the server's decoder decodes the block, and while the server's inbound validation
(``protocol.malformed``) judges the decoded list.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

import hpack

from benchmarks.audit_flood import PATH_BYTES, flood_headers
from secure_orca.server.http.connection import GatewayH2Connection
from secure_orca.server.http.protocol import malformed

PER_BYTE = 1 / 64  # at most one Python line or C call per 64 bytes of block, whatever the strings hold


def request(hostile: bool) -> list[tuple[bytes, bytes]]:
    return [
        (b":method", b"GET"),
        (b":scheme", b"https"),
        (b":authority", b"127.0.0.1:8443"),
        (b":path", b"/" + b"p" * (PATH_BYTES - 1)),
        (b"user-agent", b"h2load nghttp2/1.59.0"),
        (b"authorization", flood_headers(hostile, 0).encode()),
    ]


def block(hostile: bool) -> bytes:
    return hpack.Encoder().encode(request(hostile), huffman=True)


def work(call: Callable[[], Any]) -> int:
    """Python lines executed plus C functions called while ``call()`` runs."""
    units = 0

    def line(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal units
        if event == "line":
            units += 1
        return line

    def calls(frame: FrameType, event: str, arg: Any) -> None:
        nonlocal units
        if event == "c_call":
            units += 1

    before_trace, before_profile = sys.gettrace(), sys.getprofile()
    sys.settrace(line)
    sys.setprofile(calls)
    try:
        call()
    finally:
        sys.setprofile(before_profile)
        sys.settrace(before_trace)
    return units


def decoding_work(hostile: bool) -> tuple[int, int]:
    """The work of the server's decoder (a fresh connection's) on one flood block, and the block's size."""
    data = block(hostile)
    assert GatewayH2Connection().decoder.decode(data, raw=True) == request(hostile)
    decoder = GatewayH2Connection().decoder
    return work(lambda: decoder.decode(data, raw=True)), len(data)


def test_decoding_a_flood_block_costs_per_field_not_per_byte() -> None:
    """hpack's decoder: about 20 units per byte of block, so the hostile block cost 2.4 times the control's;
    now a few hundred units for either, at most one per 64 bytes (a string that nghttp2 decodes costs some 70
    units more than one the table decodes, whatever its length: the hostile Authorization goes to nghttp2, the
    control's does not)."""
    hostile, size = decoding_work(True)
    control, control_size = decoding_work(False)
    assert size > 40_000 and size > 2 * control_size
    assert hostile <= size * PER_BYTE, (hostile, size)
    assert hostile <= control + 100, (hostile, control)


def test_validating_a_flood_block_costs_per_field_not_per_byte() -> None:
    """h2's character checks ran a Python loop over every byte of every name and value (about 2 units per byte);
    the verdict is now reached in C, with h2's other checks per field."""
    hostile_list, control_list = request(True), request(False)
    assert not malformed(hostile_list) and not malformed(control_list)
    size = sum(len(name) + len(value) for name, value in hostile_list)
    hostile = work(lambda: malformed(hostile_list))
    control = work(lambda: malformed(control_list))
    assert hostile <= size * PER_BYTE, (hostile, size)
    assert hostile <= control + 50, (hostile, control)
