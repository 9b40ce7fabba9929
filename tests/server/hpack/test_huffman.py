"""server/hpack/huffman.py, server/hpack/nghttp2.py and hpack.headers.TableDecoder against hpack 4.2: the same
output, or the same error, on every input tried (RFC 7541 section 5.2: EOS inside a string, padding longer than 7
bits or not all ones). nghttp2 answers None where hpack refuses, and the table decoder then decodes in Python for
hpack's error."""

from __future__ import annotations

import random

import hpack
import pytest
from hpack.huffman import HuffmanEncoder
from hpack.huffman_constants import REQUEST_CODES, REQUEST_CODES_LENGTH
from hpack.huffman_table import decode_huffman as hpack_decode_huffman
from hypothesis import given, settings
from hypothesis import strategies as st

from secure_orca.server.hpack import nghttp2
from secure_orca.server.hpack.headers import MAX_SIZE_UPDATES, TableDecoder, TooManySizeUpdates, table_decoder
from secure_orca.server.hpack.huffman import EOS, decode_huffman
from secure_orca.server.http.connection import GatewayH2Connection

ENCODER = HuffmanEncoder(REQUEST_CODES, REQUEST_CODES_LENGTH)


def verdict(decode: object, data: bytes) -> tuple[str, object]:
    try:
        return "ok", decode(data)  # type: ignore[operator]
    except hpack.HPACKDecodingError as error:
        return "refused", str(error)


def same(data: bytes) -> None:
    reference = verdict(hpack_decode_huffman, data)
    assert verdict(decode_huffman, data) == reference, data
    expected = reference[1] if reference[0] == "ok" and len(data) <= nghttp2.MAX_CODED else None
    assert nghttp2.huffman(data) == expected, data


def test_nghttp2_is_installed() -> None:
    """CI installs it (with h2load); without it long strings are decoded in Python, correct but slow."""
    assert nghttp2.AVAILABLE


def bits(code: int, length: int) -> str:
    return format(code, f"0{length}b")


def pack(bit_string: str) -> bytes:
    """Bits into octets; a tail shorter than a byte is padded with ones (RFC 7541 section 5.2)."""
    bit_string += "1" * (-len(bit_string) % 8)
    return int(bit_string, 2).to_bytes(len(bit_string) // 8, "big") if bit_string else b""


def test_the_empty_string_and_none() -> None:
    assert decode_huffman(b"") == b"" == hpack_decode_huffman(b"")
    assert decode_huffman(None) == b"" == hpack_decode_huffman(None)


def test_every_string_of_one_and_two_octets() -> None:
    """All 256 byte values, alone and in every pair: every padding, every bad padding, every short code."""
    for first in range(256):
        same(bytes((first,)))
        for second in range(256):
            same(bytes((first, second)))


def test_every_symbol_round_trips_with_every_padding_length() -> None:
    """Each of the 256 symbols, its code followed by 0 to 7 bits of EOS's prefix, and the same padding spoilt by
    one zero bit (refused), and padded by a further whole byte of ones (8 or more bits: refused)."""
    for symbol in range(256):
        code = bits(REQUEST_CODES[symbol], REQUEST_CODES_LENGTH[symbol])
        for padding in range(8):
            stream = code + "1" * padding
            if len(stream) % 8:
                continue
            data = pack(stream)
            assert decode_huffman(data) == bytes((symbol,))
            same(data)
            same(data + b"\xff")
            if padding:
                spoilt = stream[:-padding] + "0" + "1" * (padding - 1)
                same(pack(spoilt))
        for tail in range(8):  # the code, then `tail` bits of a second copy, the rest padding
            same(pack(code + code[:tail]))


def test_eos_inside_a_string_is_refused() -> None:
    """EOS (30 ones) anywhere: alone, after a symbol, before one; also 29 ones (a prefix longer than 7 bits)."""
    eos = bits(REQUEST_CODES[EOS], REQUEST_CODES_LENGTH[EOS])
    assert eos == "1" * 30
    a = bits(REQUEST_CODES[ord("a")], REQUEST_CODES_LENGTH[ord("a")])
    for stream in (eos, a + eos, eos + a, a + eos + a, "1" * 29, a + "1" * 29, "1" * 32, "1" * 64):
        data = pack(stream)
        with pytest.raises(hpack.HPACKDecodingError):
            decode_huffman(data)
        same(data)


def test_the_longest_codes() -> None:
    """The 30-bit codes (symbols 10, 13, 22) and the 28-bit ones, alone, in runs, and cut short."""
    longest = [s for s in range(256) if REQUEST_CODES_LENGTH[s] >= 28]
    assert {10, 13, 22} <= set(longest)
    for symbol in longest:
        code = bits(REQUEST_CODES[symbol], REQUEST_CODES_LENGTH[symbol])
        for count in (1, 2, 3, 5):
            data = pack(code * count)
            assert decode_huffman(data) == bytes((symbol,)) * count
            same(data)
            same(data[:-1])


def test_long_random_text_and_every_byte_value() -> None:
    rng = random.Random(7)
    for length in (1, 7, 100, 5000, 60000):
        raw = bytes(rng.randrange(256) for _ in range(length))
        coded = ENCODER.encode(raw)
        assert decode_huffman(coded) == raw
        assert decode_huffman(memoryview(coded)) == raw
        same(coded)
        same(coded[:-1])
    everything = bytes(range(256)) * 3
    assert decode_huffman(ENCODER.encode(everything)) == everything


@settings(max_examples=600, deadline=None)
@given(st.binary(max_size=64))
def test_any_octets(data: bytes) -> None:
    same(data)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.binary(max_size=3), st.integers(0, 3))
def test_any_coded_text_spoilt_or_not(raw: bytes, tail: bytes, cut: int) -> None:
    coded = ENCODER.encode(raw)
    same(coded)
    same(coded + tail)
    same(coded[: max(0, len(coded) - cut)])


def decoded(decoder: hpack.Decoder, block: bytes) -> tuple[str, object]:
    try:
        return "ok", [(type(h).__name__, h[0], h[1]) for h in decoder.decode(block, raw=True)]
    except (hpack.HPACKError, IndexError, TypeError, UnicodeDecodeError, TooManySizeUpdates) as error:
        return "refused", type(error).__name__


class CountingDecoder(hpack.Decoder):
    """hpack's decoder, counting the size updates it applies (``updates``)."""

    updates = 0

    def _update_encoding_context(self, data: bytes | memoryview) -> int:
        self.updates += 1
        return super()._update_encoding_context(data)


def same_as_hpack(data: bytes) -> None:
    """The table decoder answers as hpack does, but refuses where hpack applied more than ``MAX_SIZE_UPDATES``
    size updates (RFC 7541 section 4.2); hpack applies them all before any later error."""
    reference = CountingDecoder()
    expected = decoded(reference, data)
    if reference.updates > MAX_SIZE_UPDATES:
        expected = ("refused", "TooManySizeUpdates")
    assert decoded(TableDecoder(), data) == expected, data


FIELDS = [
    (b":path", b"/"),
    (b":method", b"GET"),
    (b"authorization", b"Bearer abc def"),
    (b"x-long", b"v" * 300),
    (b"authorization", b"Bearer " + bytes(random.Random(3).choices(b"abcdefXYZ0189 ", k=600))),  # nghttp2's share
    (b"user-agent", b"kubectl/v1.31"),
    (b"x-\xff", b"\x00\xfe"),
]


def block(rng: random.Random, encoder: hpack.Encoder) -> bytes:
    fields = [rng.choice(FIELDS) for _ in range(rng.randint(1, 8))]
    fields = [hpack.NeverIndexedHeaderTuple(*f) if rng.random() < 0.1 else f for f in fields]
    data = encoder.encode(fields, huffman=rng.random() < 0.7)
    if rng.random() < 0.3:  # spoil it: a flipped bit, a cut, or trailing garbage
        spoil = rng.randrange(3)
        if spoil == 0 and data:
            i = rng.randrange(len(data))
            data = data[:i] + bytes((data[i] ^ (1 << rng.randrange(8)),)) + data[i + 1 :]
        elif spoil == 1:
            data = data[: rng.randrange(len(data) + 1)]
        else:
            data += rng.randbytes(rng.randint(1, 4))
    return data


@pytest.mark.parametrize("seed", range(30))
def test_the_table_decoder_decodes_as_hpack(seed: int) -> None:
    """Sequences of blocks (indexed, incremental, never-indexed, Huffman or not, some spoilt): the same header
    tuples, types included, or the same error, and the same dynamic table afterwards."""
    rng = random.Random(seed)
    encoder = hpack.Encoder()
    ours, theirs = TableDecoder(), hpack.Decoder()
    limit = rng.choice([65536, 400])
    ours.max_header_list_size = theirs.max_header_list_size = limit
    for _ in range(40):
        data = block(rng, encoder)
        mine, reference = decoded(ours, data), decoded(theirs, data)
        assert mine == reference, data
        assert list(ours.header_table.dynamic_entries) == list(theirs.header_table.dynamic_entries)
        if mine[0] == "refused":  # the table may be out of step with the encoder's: start both again
            encoder, ours, theirs = hpack.Encoder(), TableDecoder(), hpack.Decoder()
            ours.max_header_list_size = theirs.max_header_list_size = limit


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=80))
def test_any_block(data: bytes) -> None:
    same_as_hpack(data)


@pytest.mark.parametrize("updates", [0, 1, 2, 3, 64])
def test_size_updates_start_a_block_at_most_twice(updates: int) -> None:
    same_as_hpack(b"\x3f\xe1\x1f" * updates + hpack.Encoder().encode([(b":path", b"/")]))  # each to 4096


def test_table_decoder_keeps_h2s_limits() -> None:
    fresh = hpack.Decoder(max_header_list_size=1234)
    fresh.header_table_size = 100
    fresh.max_allowed_table_size = 200
    ours = table_decoder(fresh)
    assert type(ours) is TableDecoder
    assert (ours.max_header_list_size, ours.header_table_size, ours.max_allowed_table_size) == (1234, 100, 200)
    used = hpack.Decoder()
    used.decode(hpack.Encoder().encode([(b"x-a", b"b")]))
    assert table_decoder(used) is used


def test_the_servers_connections_decode_with_the_table() -> None:
    connection = GatewayH2Connection()
    assert type(connection.decoder) is TableDecoder
    assert connection.decoder.max_header_list_size == connection.DEFAULT_MAX_HEADER_LIST_SIZE
