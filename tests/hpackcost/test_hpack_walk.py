"""The HPACK walker against hand-built blocks (RFC 7541 section 6 and Appendix C) and against hpack.Encoder."""

from __future__ import annotations

import hpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from secure_orca.hpackcost.walk import (
    STATIC_TABLE,
    FieldRecord,
    HpackWalker,
    HpackWalkError,
    Representation,
    SizeUpdate,
    attribute_connection,
    replay,
    walk_blocks,
)

INDEXED, INCREMENTAL = Representation.INDEXED, Representation.INCREMENTAL
WITHOUT, NEVER = Representation.WITHOUT_INDEXING, Representation.NEVER_INDEXED


def h(text: str) -> bytes:
    return bytes.fromhex(text.replace(" ", ""))


def table(walker: HpackWalker) -> list[tuple[str, str]]:
    return list(walker.table.entries)


def test_static_table_is_rfc_appendix_a() -> None:
    """Spot checks against RFC 7541 Appendix A, typed in from the RFC (the table itself comes from hpack)."""
    assert len(STATIC_TABLE) == 61
    rfc = {
        1: (":authority", ""),
        2: (":method", "GET"),
        8: (":status", "200"),
        16: ("accept-encoding", "gzip, deflate"),
        32: ("cookie", ""),
        55: ("set-cookie", ""),
        56: ("strict-transport-security", ""),
        61: ("www-authenticate", ""),
    }
    assert {i: STATIC_TABLE[i - 1] for i in rfc} == rfc


# --- RFC 7541 Appendix C.2: one representation each ---------------------------------------------------


def test_c21_literal_with_indexing() -> None:
    walker = HpackWalker()
    walk = walker.walk(h("400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572"))
    (f,) = walk.fields
    assert (f.name, f.value, f.kind, f.wire_bytes, f.index) == ("custom-key", "custom-header", INCREMENTAL, 26, None)
    assert (f.name_huffman, f.value_huffman, f.added, f.entry_size) == (False, False, True, 55)
    assert table(walker) == [("custom-key", "custom-header")] and walker.table.size == 55
    assert [(e.action, e.name, e.size) for e in walk.events] == [("insert", "custom-key", 55)]


def test_c22_literal_without_indexing() -> None:
    walker = HpackWalker()
    (f,) = walker.walk(h("040c 2f73 616d 706c 652f 7061 7468")).fields
    assert (f.name, f.value, f.kind, f.wire_bytes, f.index, f.name_huffman) == (
        ":path",
        "/sample/path",
        WITHOUT,
        14,
        4,
        None,
    )
    assert not f.added and table(walker) == []


def test_c23_literal_never_indexed() -> None:
    walker = HpackWalker()
    (f,) = walker.walk(h("1008 7061 7373 776f 7264 0673 6563 7265 74")).fields
    assert (f.name, f.value, f.kind, f.wire_bytes, f.index) == ("password", "secret", NEVER, 17, None)
    assert not f.added and table(walker) == []


def test_c24_indexed() -> None:
    (f,) = HpackWalker().walk(h("82")).fields
    assert (f.name, f.value, f.kind, f.wire_bytes, f.index, f.literal) == (":method", "GET", INDEXED, 1, 2, False)


# --- C.3 / C.4: requests sharing one table, raw and Huffman ----------------------------------------------

REQUESTS = [
    [(":method", "GET"), (":scheme", "http"), (":path", "/"), (":authority", "www.example.com")],
    [
        (":method", "GET"),
        (":scheme", "http"),
        (":path", "/"),
        (":authority", "www.example.com"),
        ("cache-control", "no-cache"),
    ],
    [
        (":method", "GET"),
        (":scheme", "https"),
        (":path", "/index.html"),
        (":authority", "www.example.com"),
        ("custom-key", "custom-value"),
    ],
]
REQUEST_TABLES = [
    ([(":authority", "www.example.com")], 57),
    ([("cache-control", "no-cache"), (":authority", "www.example.com")], 110),
    ([("custom-key", "custom-value"), ("cache-control", "no-cache"), (":authority", "www.example.com")], 164),
]
C3 = [
    "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
    "8286 84be 5808 6e6f 2d63 6163 6865",
    "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65",
]
C4 = [
    "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff",
    "8286 84be 5886 a8eb 1064 9cbf",
    "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf",
]


@pytest.mark.parametrize(("blocks", "huffman"), [(C3, False), (C4, True)], ids=["C.3", "C.4"])
def test_c3_c4_requests(blocks: list[str], huffman: bool) -> None:
    walker = HpackWalker()
    for block, headers, (entries, size) in zip(blocks, REQUESTS, REQUEST_TABLES, strict=True):
        walk = walker.walk(h(block))
        assert walk.headers() == headers
        assert sum(f.wire_bytes for f in walk.fields) == walk.length == len(h(block))
        assert (table(walker), walker.table.size, walk.table_size) == (entries, size, size)
        assert all(f.value_huffman is huffman for f in walk.fields if f.literal)
    # C.3.2: ":authority" comes from the dynamic table (index 62) in one byte.
    second = walk_blocks([h(b) for b in blocks])[1]
    assert [(f.kind, f.index, f.wire_bytes) for f in second.fields[3:]] == [
        (INDEXED, 62, 1),
        (INCREMENTAL, 24, 2 + (6 if huffman else 8)),
    ]


# --- C.5 / C.6: responses with a 256-byte table, evictions ----------------------------------------------

DATE1, DATE2 = "Mon, 21 Oct 2013 20:13:21 GMT", "Mon, 21 Oct 2013 20:13:22 GMT"
LOCATION = ("location", "https://www.example.com")
COOKIE = ("set-cookie", "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1")
RESPONSES = [
    [(":status", "302"), ("cache-control", "private"), ("date", DATE1), LOCATION],
    [(":status", "307"), ("cache-control", "private"), ("date", DATE1), LOCATION],
    [
        (":status", "200"),
        ("cache-control", "private"),
        ("date", DATE2),
        LOCATION,
        ("content-encoding", "gzip"),
        COOKIE,
    ],
]
RESPONSE_TABLES = [
    ([LOCATION, ("date", DATE1), ("cache-control", "private"), (":status", "302")], 222),
    ([(":status", "307"), LOCATION, ("date", DATE1), ("cache-control", "private")], 222),
    ([COOKIE, ("content-encoding", "gzip"), ("date", DATE2)], 215),
]
RESPONSE_EVICTIONS = [[], [":status"], ["cache-control", "date", "location", ":status"]]
C5 = [
    "4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 "
    "3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
    "4803 3330 37c1 c0bf",
    "88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 474d 54c0 5a04 677a 6970 "
    "7738 666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 454f 5049 5541 5851 5745 4f49 553b 206d 6178 2d61 "
    "6765 3d33 3630 303b 2076 6572 7369 6f6e 3d31",
]
C6 = [
    "4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6 2d1b ff6e 919d 29ad "
    "1718 63c7 8f0b 97c8 e9ae 82ae 43d3",
    "4883 640e ffc1 c0bf",
    "88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab 77ad 94e7 821d d7f2 "
    "e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f 9587 3160 65c0 03ed 4ee5 b106 3d50 07",
]


@pytest.mark.parametrize(("blocks", "huffman"), [(C5, False), (C6, True)], ids=["C.5", "C.6"])
def test_c5_c6_responses_with_evictions(blocks: list[str], huffman: bool) -> None:
    walker = HpackWalker()
    walker.table.resize(256)  # the examples assume SETTINGS_HEADER_TABLE_SIZE = 256
    for block, headers, (entries, size), evicted in zip(
        blocks, RESPONSES, RESPONSE_TABLES, RESPONSE_EVICTIONS, strict=True
    ):
        walk = walker.walk(h(block))
        assert walk.headers() == headers
        assert sum(f.wire_bytes for f in walk.fields) == len(h(block))
        assert (table(walker), walker.table.size) == (entries, size)
        assert [e.name for e in walk.evictions()] == evicted
        assert all(f.value_huffman is huffman for f in walk.fields if f.literal)
    # C.5.3: the set-cookie insertion is what evicts location and :status 307.
    cookie = walk.fields[-1]
    assert {e.name for e in walk.events if e.action == "evict" and e.cause == cookie.offset} == {
        "location",
        ":status",
    }


# --- other hand-built representations and errors ---------------------------------------------------------


def test_size_updates_multi_byte_integers_and_evictions() -> None:
    walker = HpackWalker()
    walker.walk(h("400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572"))
    # 0x20: size 0 (evicts everything), then 0x3fe11f: 31 + 0x61 + (0x1f << 7) = 4096.
    walk = walker.walk(h("20 3fe11f 82"))
    assert [(u.offset, u.wire_bytes, u.new_size) for u in walk.size_updates] == [(0, 1, 0), (1, 3, 4096)]
    assert [e.name for e in walk.evictions()] == ["custom-key"]
    assert walk.length == 5 == sum(u.wire_bytes for u in walk.size_updates) + walk.fields[0].wire_bytes
    assert walk.table_max == 4096 and table(walker) == []


def test_literal_names_huffman_and_raw_mixed() -> None:
    # Never-indexed, literal Huffman name "custom-key" (88 25a8 49e9 5ba9 7d7f), raw value "x".
    walk = HpackWalker().walk(h("10 8825a849e95ba97d7f 0178"))
    (f,) = walk.fields
    assert (f.name, f.value, f.kind, f.name_huffman, f.value_huffman, f.wire_bytes) == (
        "custom-key",
        "x",
        NEVER,
        True,
        False,
        12,  # 0x10, length 0x88, 8 Huffman bytes, length 0x01, "x"
    )
    # Without indexing, name index 15 needs a 4-bit prefix continuation: 0x0f 0x00; value raw "gzip".
    (g,) = HpackWalker().walk(h("0f00 04677a6970")).fields
    assert (g.name, g.value, g.kind, g.index, g.wire_bytes) == ("accept-charset", "gzip", WITHOUT, 15, 7)


def test_index_past_the_prefix_needs_a_continuation_byte() -> None:
    walker = HpackWalker()
    walker.walk(b"".join(h("40 01") + bytes([c]) + h("0178") for c in b"abc"))  # c=62, b=63, a=64
    # Name index 63 does not fit a 6-bit prefix: 0x7f 0x00. Then index 64 (0xc0) is (b, x): the new entry
    # (b, y) took index 62 and pushed the others down.
    walk = walker.walk(h("7f00 0179 c0"))
    assert [(f.name, f.value, f.kind, f.index, f.wire_bytes) for f in walk.fields] == [
        ("b", "y", INCREMENTAL, 63, 4),
        ("b", "x", INDEXED, 64, 1),
    ]


def test_too_large_entry_empties_the_table() -> None:
    walker = HpackWalker(settings_max=4096)
    walker.walk(h("20 82"))  # size 0
    walk = walker.walk(h("4001 61 0178"))
    assert walk.fields[0].kind is INCREMENTAL and not walk.fields[0].added and table(walker) == []


@pytest.mark.parametrize(
    ("block", "message"),
    [
        ("80", "index 0"),
        ("be", "index 62 is not in the table"),
        ("41", "block ends"),
        ("4005 6162", "runs past the end"),
        ("ff", "block ends"),
        ("82 20", "size update after a header field"),
        ("3fe21f", "exceeds 4096"),
        ("4081ff 00", "invalid Huffman"),
        ("7fffffffffff7f", "integer too large"),
    ],
)
def test_malformed_blocks_are_rejected(block: str, message: str) -> None:
    with pytest.raises(HpackWalkError, match=message):
        HpackWalker().walk(h(block))


# --- against hpack.Encoder ------------------------------------------------------------------------------


def decode(blocks: list[bytes], size: int = 4096) -> tuple[list[list[tuple[str, str]]], hpack.Decoder]:
    decoder = hpack.Decoder(max_header_list_size=1 << 20)
    decoder.max_allowed_table_size = size
    lists = [[(n.decode("latin-1"), v.decode("latin-1")) for n, v in decoder.decode(b, raw=True)] for b in blocks]
    return lists, decoder


def test_encoder_blocks_with_never_indexed_fields() -> None:
    encoder = hpack.Encoder()
    lists: list[list[tuple[str, str] | tuple[str, str, bool]]] = [
        [(":status", "200"), ("authorization", "secret", True), ("server", "x")],
        [(":status", "200"), ("authorization", "secret", True), ("server", "x")],
    ]
    blocks = [encoder.encode(headers) for headers in lists]
    walks = walk_blocks(blocks)
    assert [w.headers() for w in walks] == decode(blocks)[0]
    assert [f.kind for f in walks[1].fields] == [INDEXED, NEVER, INDEXED]


names = st.sampled_from([":status", "audit-id", "content-length", "date", "endpoint-load-metrics", "x-é"])
values = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=255), max_size=40)
fields = st.tuples(names, values | st.sampled_from(["200", "0.5", ""]), st.booleans())
steps = st.tuples(st.lists(fields, max_size=8), st.none() | st.integers(0, 4096), st.booleans())


@settings(max_examples=150, deadline=None)
@given(st.lists(steps, min_size=1, max_size=12))
def test_walk_matches_decoder_and_bytes_add_up(
    script: list[tuple[list[tuple[str, str, bool]], int | None, bool]],
) -> None:
    encoder = hpack.Encoder()
    blocks = []
    for headers, resize, huffman in script:
        if resize is not None:
            encoder.header_table_size = resize
        encoded = [(n.encode("latin-1"), v.encode("latin-1"), s) for n, v, s in headers]
        blocks.append(encoder.encode(encoded, huffman=huffman))
    walker = HpackWalker()
    walks = [walker.walk(b) for b in blocks]
    lists, decoder = decode(blocks)
    assert [w.headers() for w in walks] == lists
    for walk, block in zip(walks, blocks, strict=True):
        parts: list[FieldRecord | SizeUpdate] = [*walk.fields, *walk.size_updates]
        assert sum(p.wire_bytes for p in parts) == walk.length == len(block)
        ends = [0] + [p.offset + p.wire_bytes for p in sorted(parts, key=lambda p: p.offset)]
        assert [p.offset for p in sorted(parts, key=lambda p: p.offset)] == ends[:-1]
    expected = [(n.decode("latin-1"), v.decode("latin-1")) for n, v in decoder.header_table.dynamic_entries]
    assert table(walker) == expected
    assert walker.table.size == sum(len(n) + len(v) + 32 for n, v in expected)
    # The reference replay reproduces hpack.Encoder's own (Huffman) blocks exactly.
    if all(huffman for _, _, huffman in script):
        sizes = [[u.new_size for u in w.size_updates] for w in walks]
        never = {f.name for w in walks for f in w.fields if f.kind is NEVER}
        if not never & {f.name for w in walks for f in w.fields if f.kind is not NEVER}:
            assert replay(lists, never, sizes) == blocks


# --- attribution over a connection ----------------------------------------------------------------------


def test_attribution_eviction_cost_by_hand() -> None:
    """A 200-byte table: x-a (3+80+32 = 115) then the report (21+40+32 = 93) overflow it, so the report
    evicts x-a, and the third block must send x-a again as a literal instead of one indexed byte."""
    encoder = hpack.Encoder()
    encoder.header_table_size = 200
    report = ("endpoint-load-metrics", "TEXT cpu_utilization=0.5, eps=0.00000001")
    assert len(report[1]) == 40
    lists = [[("x-a", "a" * 80)], [report], [("x-a", "a" * 80)]]
    blocks = [encoder.encode(headers) for headers in lists]
    result = attribute_connection(blocks)
    assert result.replay_exact
    first, second, third = result.per_block
    assert second.evictions_by_orca == 1 and result.by_name["x-a"].evicted_by_orca == 1
    assert second.orca_bytes == second.marginal == len(blocks[1])
    assert third.orca_bytes == 0 and third.replay_without == 1  # indexed x-a: 0xbe
    assert third.eviction_cost == third.marginal == len(blocks[2]) - 1
    assert first.marginal == 0 and blocks[0][:3] == h("3fa901")  # the size update 200 is in both replays
    assert first.evictions == 0 and third.evictions == 1  # the new x-a evicts the report
    total = result.total
    assert total.marginal == total.replay_orca_bytes + total.eviction_cost
    assert result.orca_first_send == len(blocks[1])


def test_new_report_values_are_counted_apart_from_literals() -> None:
    """A new value is one literal; the same value again is one indexed byte; a value that comes back while the
    table holds it is a new value but not a literal; a block without a report changes nothing."""
    a, b = (("endpoint-load-metrics", f"TEXT cpu_utilization={v}") for v in ("0.1", "0.2"))
    lists = [[(":status", "200"), r] for r in (a, a, b)] + [[(":status", "200")], [(":status", "200"), b]]
    lists += [[(":status", "200"), a]]
    encoder = hpack.Encoder()
    result = attribute_connection([encoder.encode(headers) for headers in lists])
    assert [c.orca_values for c in result.per_block] == [1, 0, 1, 0, 0, 1]
    assert [c.orca_literals for c in result.per_block] == [1, 0, 1, 0, 0, 0]
    rates = result.total.rates(6, 2.0)
    assert (rates["values_per_s"], rates["literals_per_s"]) == (1.5, 1.0)


def test_attribution_flags_a_replay_that_differs() -> None:
    # Literal without indexing is never produced by hpack.Encoder: the replay differs and says so.
    blocks = [h("040c 2f73 616d 706c 652f 7061 7468"), h("82")]
    result = attribute_connection(blocks)
    assert not result.replay_exact
    assert result.total.length == sum(len(b) for b in blocks)
    assert result.total.marginal == 0 and result.orca_first_send is None
