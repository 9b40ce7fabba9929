"""The server's header encoding (server/hpack/headers.py), without sockets: the indexed encoder writes hpack's bytes,
the carried report decodes as the block's last field, and only fields h2 would pass unchanged are carried."""

from __future__ import annotations

import inspect
import random

import hpack
import pytest
from h2.config import H2Configuration
from hpack.table import HeaderTable

from secure_orca.server.hpack.headers import IndexedEncoder, IndexedHeaderTable, passes_unchanged

REPORT = b"endpoint-load-metrics"
NAMES = [REPORT, b"audit-id", b"date", b"content-type", b"x-a", b"x-b", b":status", b"server", b"cache-control"]
CONFIG = H2Configuration(client_side=False, header_encoding=None)


def random_block(rng: random.Random) -> list[tuple[bytes, bytes]]:
    block: list[tuple[bytes, bytes]] = []
    for _ in range(rng.randint(1, 9)):
        name = rng.choice(NAMES)
        values = [b"200", b"v%d" % rng.randint(0, 40), b"x" * rng.randint(0, 300), b"TEXT c=0.%d" % rng.randint(0, 5)]
        value = rng.choice(values)
        block.append(hpack.NeverIndexedHeaderTuple(name, value) if rng.random() < 0.05 else (name, value))
    return block


@pytest.mark.parametrize("seed", range(40))
def test_the_indexed_encoder_writes_hpacks_bytes(seed: int) -> None:
    """Random blocks (indexed, name-only and new fields, never-indexed ones, entries larger than the table,
    table size changes) give the same bytes and the same table as hpack's own encoder."""
    rng = random.Random(seed)
    ours, theirs = IndexedEncoder(), hpack.Encoder()
    for _ in range(150):
        if rng.random() < 0.03:
            size = rng.choice([0, 60, 256, 1000, 4096])
            ours.header_table_size = theirs.header_table_size = size
        block = random_block(rng)
        assert ours.encode(block) == theirs.encode(block)
        table = ours.header_table
        assert list(table.dynamic_entries) == list(theirs.header_table.dynamic_entries)
        assert isinstance(table, IndexedHeaderTable)
        assert len(table._field_at) <= len(table.dynamic_entries)  # evicted entries leave the indexes
        assert len(table._name_at) <= len(table.dynamic_entries)


@pytest.mark.parametrize("table_size", [4096, 200, 0])
def test_a_carried_report_decodes_as_the_last_field(table_size: int) -> None:
    """Responses with a fresh audit-id each (the table churns) and the report carried on most of them, its
    value changing every 40 responses: a real decoder reads every block as the list plus the report, last."""
    rng = random.Random(table_size)
    encoder, decoder = IndexedEncoder(), hpack.Decoder()
    encoder.header_table_size = table_size
    value = b""
    for response in range(400):
        if response % 40 == 0:
            value = b"TEXT cpu_utilization=0.%d, mem_utilization=0.5, rps_fractional=%d" % (response, response)
        headers = [(b":status", b"200"), (b"audit-id", b"%032x" % rng.getrandbits(128)), (b"server", b"h")]
        carried = response % 7 != 3
        encoder.carried = value if carried else None
        block = encoder.encode(headers)
        assert encoder.carried is None  # used once
        expected = [*headers, (REPORT, value)] if carried else headers
        assert decoder.decode(block, raw=True) == expected
        if carried and table_size == 4096 and response % 40 > 1:  # indexed: one byte while the table has it
            position = list(encoder.header_table.dynamic_entries).index((REPORT, value))
            assert block[-1:] == bytes([0x80 | (62 + position)])


def test_a_repeated_report_costs_one_byte() -> None:
    encoder = IndexedEncoder()
    value = b"TEXT cpu_utilization=0.25, mem_utilization=0.5"
    first = encoder.report(value)
    assert len(first) > len(value) // 2  # a literal (Huffman-coded)
    assert encoder.report(value) == bytes([0x80 | 62])  # the newest dynamic entry
    encoder.header_table.add(b"audit-id", b"1")
    assert encoder.report(value) == bytes([0x80 | 63])
    assert hpack.Decoder().decode(first + bytes([0x80 | 62]), raw=True) == [(REPORT, value)] * 2


@pytest.mark.parametrize(
    ("field", "carried"),
    [
        ((REPORT, b"TEXT cpu_utilization=0.1, mem_utilization=0.2"), True),
        ((REPORT, b" TEXT cpu_utilization=0.1"), False),  # h2 would strip the whitespace
        ((REPORT, b"TEXT cpu_utilization=0.1 "), False),
        ((b"Endpoint-Load-Metrics", b"TEXT"), False),  # h2 would lower-case the name
        ((b"connection", b"close"), False),  # h2 refuses connection-specific fields
        ((b"authorization", b"Bearer x"), False),  # h2 makes it never-indexed
        ((b":path", b"/"), False),  # a pseudo-header after :status... refused
        (hpack.NeverIndexedHeaderTuple(REPORT, b"TEXT"), False),
        ((REPORT, "TEXT"), False),  # not bytes: h2 would encode it first
    ],
)
def test_only_fields_h2_passes_unchanged_are_carried(field: tuple[bytes, bytes], carried: bool) -> None:
    assert passes_unchanged(field, CONFIG) is carried


def test_with_h2s_checks_off_any_field_passes() -> None:
    config = H2Configuration(
        client_side=False, header_encoding=None, validate_outbound_headers=False, normalize_outbound_headers=False
    )
    assert passes_unchanged((REPORT, b" padded "), config)


def test_the_hpack_names_relied_on_exist() -> None:
    """hpack 4.x internals the module relies on (its docstring lists them)."""
    encoder = hpack.Encoder()
    for name in ("header_table", "huffman_coder", "add", "_encode_indexed", "table_size_changes"):
        assert hasattr(encoder, name), name
    table = HeaderTable()
    for name in ("dynamic_entries", "_current_size", "_maxsize", "add", "_shrink", "resized"):
        assert hasattr(table, name), name
    assert isinstance(HeaderTable.STATIC_TABLE_MAPPING, dict)
    assert HeaderTable.STATIC_TABLE_LENGTH == 61
    assert isinstance(inspect.getattr_static(HeaderTable, "maxsize"), property)
    assert list(inspect.signature(hpack.hpack.encode_integer).parameters) == ["integer", "prefix_bits"]


def size_update(size: int) -> bytes:
    """A dynamic table size update (RFC 7541 section 6.3)."""
    encoded = hpack.hpack.encode_integer(size, 5)
    encoded[0] |= 0x20
    return bytes(encoded)


def test_a_size_announced_twice_is_still_signalled() -> None:
    """hpack 4.2 sets ``resized`` from the last change only, so the same size announced twice
    before the next header block dropped the update the first one required (RFC 7541 section 4.2)."""
    encoder = IndexedEncoder()
    encoder.header_table_size = 1000
    encoder.header_table_size = 1000
    assert encoder.encode([(b"x-a", b"1")]).startswith(size_update(1000))
    assert not encoder.encode([(b"x-a", b"1")]).startswith(size_update(1000))  # once


def test_a_peer_decoder_follows_whatever_sizes_are_announced() -> None:
    """The sequence that broke a client's decoder ("Invalid table index"): 8192 announced twice. The encoder
    uses at most MAX_TABLE_SIZE and signals every size it uses, so a real decoder reads every block."""
    encoder, decoder = IndexedEncoder(), hpack.Decoder()
    decoder.max_allowed_table_size = 8192
    for size in (8192, 8192):
        encoder.header_table_size = size
    for i in range(200):
        headers = [(b":status", b"200"), (b"audit-id", b"%0100x" % i), (b"x-b", b"%d" % (i % 7))]
        assert decoder.decode(encoder.encode(headers), raw=True) == headers


@pytest.mark.parametrize("announced", [2**32 - 1, 65536, 4097])
def test_the_table_is_bounded_whatever_the_client_announces(announced: int) -> None:
    """A client announcing 2^32-1 grew one connection by 13.7 MB. RFC 7541 section 4.2 lets the
    encoder choose any size up to the announced maximum: it keeps 4096, and needs no update to say so."""
    encoder = IndexedEncoder()
    encoder.header_table_size = announced
    assert encoder.header_table.maxsize == 4096
    for i in range(500):
        assert not encoder.encode([(b"audit-id", b"%0200x" % i)]).startswith(size_update(announced))
    assert encoder.header_table._current_size <= 4096
