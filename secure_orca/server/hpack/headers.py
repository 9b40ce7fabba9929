"""The server's HPACK encoder: hpack's, with its dynamic table indexed and the load report's coding cached.

No I/O, but built on h2's and hpack's internals (listed below), so not pure (docs/architecture.md).

hpack 4.2 finds a field in its dynamic table by scanning it from the newest entry, for every field without a
full static match. A response's ``audit-id`` is new every time (as kube-apiserver's), so the 4096-byte table
stays full (about 50 entries) and every response pays for several full scans; the report's entry sinks one
place per response until it is evicted and Huffman-coded again. ``IndexedHeaderTable`` keeps, beside hpack's
own deque, the number of the newest insertion of each field and of each name, so a search is dict lookups and
returns exactly the index hpack's scan returns: the bytes on the wire are hpack's, byte for byte
(``tests/server/hpack/test_headers.py`` encodes random header sequences with both and compares).

``IndexedEncoder`` appends the carried report (``http.connection.GatewayH2Connection`` takes it out of h2's way once
``passes_unchanged`` says h2 would pass it unchanged): one indexed byte while the table holds it, else a literal whose
Huffman coding is kept per value for the whole process (every connection sends the same value until the next
sample; only report values are kept, so a per-response value such as ``audit-id`` never fills the cache).

The table is bounded (``MAX_TABLE_SIZE``, whatever a client announces) and every size change is signalled, also
when hpack 4.2 would drop one (``IndexedEncoder.header_table_size``).

Inbound, every header block is bounded before it is decoded (issue 36): ``HeaderBlockBuffer`` refuses a block
whose fragments (HEADERS or PUSH_PROMISE, then CONTINUATION) pass ``max_encoded_block`` as they arrive, and
``TableDecoder`` refuses a block that starts with more than two dynamic table size updates. The refusals are
connection errors (h2 sends GOAWAY), counted in ``REFUSED_BLOCKS``.

Relies on hpack 4.x's ``Encoder`` (``header_table``, ``huffman_coder``, ``add``, ``_encode_indexed``,
``table_size_changes``, ``encode`` emitting the changes while ``header_table.resized``) and
``HeaderTable`` (``dynamic_entries``, ``_current_size``, ``_maxsize``, ``add``, ``_shrink``, ``maxsize``,
``STATIC_TABLE_MAPPING``, ``STATIC_TABLE_LENGTH``), checked in ``tests/server/hpack/test_headers.py``; on
hpack's ``Decoder._update_encoding_context`` (one call per size update) and h2 4.x's ``FrameBuffer``
(``_update_header_buffer`` sees every frame, ``_headers_buffer`` holds the open block's frames), checked in
``tests/hostile/test_header_block_bounds.py``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any, ClassVar, TypeVar

from h2.config import H2Configuration
from h2.errors import ErrorCodes
from h2.exceptions import DenialOfServiceError, ProtocolError
from h2.frame_buffer import FrameBuffer
from h2.utilities import HeaderValidationFlags, normalize_outbound_headers, validate_outbound_headers
from hpack import Decoder, Encoder, HPACKDecodingError
from hpack.hpack import decode_integer, encode_integer
from hpack.struct import HeaderTuple, NeverIndexedHeaderTuple
from hpack.table import HeaderTable, table_entry_size
from hyperframe.frame import ContinuationFrame, Frame, HeadersFrame, PushPromiseFrame

from secure_orca.orca.headers import REPORT
from secure_orca.server.hpack import nghttp2
from secure_orca.server.hpack.huffman import decode_huffman

REPORT_FIELD_NAME = REPORT.encode()
_STATUS = (b":status", b"200")
_DYNAMIC_BASE = HeaderTable.STATIC_TABLE_LENGTH + 1  # the HPACK index of the newest dynamic entry
_INCREMENTAL = 0x40  # literal with incremental indexing (RFC 7541 section 6.2.1)
_HUFFMAN = 0x80
_INDEXED = [bytes((0x80 | index,)) for index in range(127)]  # indexed field representations of one byte
MAX_TABLE_SIZE = 4096  # bytes of dynamic table per connection, whatever a client announces (RFC 7541 4.2)
KEPT = 4  # report values whose Huffman coding, and report fields whose h2 check, are kept (one per sample)
ENCODED_PER_LISTED = 2  # encoded block bytes per byte of header-list limit (Go's x/net/http2 since CVE-2023-45288)
MAX_SIZE_UPDATES = 2  # at the start of a block (RFC 7541 section 4.2); hpack's loop allowed any number
TOO_LARGE = "encoded_block_too_large"
TOO_MANY_SIZE_UPDATES = "too_many_size_updates"
# header blocks refused in this process, by reason (read by ``metrics`` at scrape time)
REFUSED_BLOCKS: Counter[str] = Counter(dict.fromkeys((TOO_LARGE, TOO_MANY_SIZE_UPDATES), 0))

V = TypeVar("V")


def remember(cache: dict[Any, V], key: Any, value: V) -> V:
    """``cache[key] = value``, the cache first emptied when it holds ``KEPT`` entries (bounded whatever values
    arrive); returns ``value``. Callers look up with ``cache.get`` first, so a hit costs one dict lookup."""
    if len(cache) >= KEPT:
        cache.clear()
    cache[key] = value
    return value


class IndexedHeaderTable(HeaderTable):
    """hpack's dynamic table plus two indexes: the number of the newest insertion of each (name, value) and of
    each name. Entries are numbered in insertion order; entry ``i`` of ``dynamic_entries`` (0 = newest) is
    number ``added - 1 - i``. Evicted numbers leave the indexes as they leave the deque."""

    def __init__(self) -> None:
        super().__init__()
        self.added = 0
        self._field_at: dict[tuple[bytes, bytes], int] = {}
        self._name_at: dict[bytes, int] = {}

    def _forget_all(self) -> None:
        self._field_at.clear()
        self._name_at.clear()

    def add(self, name: bytes, value: bytes) -> None:
        if table_entry_size(name, value) > self._maxsize:  # hpack empties the table and adds nothing
            self._forget_all()
        else:
            self._field_at[(name, value)] = self.added
            self._name_at[name] = self.added
            self.added += 1
        super().add(name, value)

    def _shrink(self) -> None:
        entries = self.dynamic_entries
        size = self._current_size
        while size > self._maxsize:
            oldest = self.added - len(entries)
            name, value = entries.pop()
            size -= table_entry_size(name, value)
            if self._field_at.get((name, value)) == oldest:
                del self._field_at[(name, value)]
            if self._name_at.get(name) == oldest:
                del self._name_at[name]
        self._current_size = size

    @property
    def maxsize(self) -> int:
        return self._maxsize

    @maxsize.setter
    def maxsize(self, newmax: int) -> None:
        HeaderTable.maxsize.fset(self, newmax)  # type: ignore[attr-defined]
        if not self.dynamic_entries:
            self._forget_all()

    def search(self, name: bytes, value: bytes) -> tuple[int, bytes, bytes | None] | None:
        """hpack's answer, without the scan: a full static match, else the newest full dynamic match, else the
        static name, else the newest dynamic entry with the name, else None."""
        static = self.STATIC_TABLE_MAPPING.get(name)
        if static is not None:
            index = static[1].get(value)
            if index is not None:
                return index, name, value
        newest = self.added - 1 + _DYNAMIC_BASE
        number = self._field_at.get((name, value))
        if number is not None:
            return newest - number, name, value
        if static is not None:
            return static[0], name, None
        number = self._name_at.get(name)
        return None if number is None else (newest - number, name, None)


class IndexedEncoder(Encoder):
    """hpack's encoder on an ``IndexedHeaderTable``, plus the carried report: a field that
    ``http.connection.GatewayH2Connection.send_headers`` took out of a header list after checking that h2 would
    pass it unchanged, appended to that list's block as the last field (indexed when the table has it; else a
    literal with its Huffman coding cached per value)."""

    _coded: ClassVar[dict[bytes, bytes]] = {}  # report value -> length and Huffman code (process-wide)
    _coded_name: ClassVar[bytes] = b""

    def __init__(self) -> None:
        super().__init__()
        self.header_table: IndexedHeaderTable = IndexedHeaderTable()
        self.carried: bytes | None = None  # the report value to append to the next block, once
        self._last_value: bytes | None = None  # the report value last sent; its entry's index is
        self._last_offset = 0  # header_table.added + _last_offset while the entry is in the table
        if not IndexedEncoder._coded_name:
            IndexedEncoder._coded_name = self._string(REPORT_FIELD_NAME)

    @property
    def header_table_size(self) -> int:
        return self.header_table.maxsize

    @header_table_size.setter
    def header_table_size(self, value: int) -> None:
        """The peer's SETTINGS_HEADER_TABLE_SIZE: the table uses at most ``MAX_TABLE_SIZE`` of it (RFC 7541 section
        4.2 lets the encoder choose any size up to the announced maximum), and every size it changes to is
        signalled at the start of the next block. hpack 4.2's setter sets ``resized`` from the last change alone,
        so an announcement that changed nothing dropped an update still pending; this setter keeps it."""
        size = min(int(value), MAX_TABLE_SIZE)
        table = self.header_table
        pending = table.resized
        table.maxsize = size
        if table.resized:
            self.table_size_changes.append(size)
        table.resized = table.resized or pending

    def _string(self, data: bytes) -> bytes:
        """A Huffman-coded string literal (RFC 7541 section 5.2)."""
        code = self.huffman_coder.encode(data)
        length = encode_integer(len(code), 7)
        length[0] |= _HUFFMAN
        return bytes(length) + code

    def encode(self, headers: Any, huffman: bool = True) -> bytes:
        block = super().encode(headers, huffman)
        value, self.carried = self.carried, None
        return block if value is None else block + self.report(value)

    def report(self, value: bytes) -> bytes:
        """The representation of ``endpoint-load-metrics: value`` (RFC 7541 sections 6.1 and 6.2.1), as hpack's
        ``add`` would choose it, the table updated as it would be."""
        table = self.header_table
        if value is self._last_value:  # still in the table? Then it is indexed: one byte while index < 127
            index = table.added + self._last_offset
            if index < _DYNAMIC_BASE + len(table.dynamic_entries):
                return _INDEXED[index] if index < len(_INDEXED) else self._encode_indexed(index)
        match = table.search(REPORT_FIELD_NAME, value)
        if match is not None and match[2] is not None:
            if match[0] >= _DYNAMIC_BASE:
                self._last_value, self._last_offset = value, match[0] - table.added
            return self._encode_indexed(match[0])
        coded = self._coded.get(value) or remember(self._coded, value, self._string(value))
        if match is None:
            prefix = bytes((_INCREMENTAL,)) + self._coded_name
        else:
            name_index = encode_integer(match[0], 6)
            name_index[0] |= _INCREMENTAL
            prefix = bytes(name_index)
        table.add(REPORT_FIELD_NAME, value)
        if table.dynamic_entries:  # (an entry larger than the whole table empties it instead)
            self._last_value, self._last_offset = value, _DYNAMIC_BASE - table.added
        return prefix + coded


def max_encoded_block(max_header_list_size: int) -> int:
    """The largest encoded header block (HEADERS and CONTINUATION fragments together) the server decodes: twice
    its header-list limit. Every representation but a size update adds at least 32 bytes to the header list
    (RFC 7541 section 4.1) in one to a few octets, so a conforming encoder needs more than twice the limit only for
    strings whose Huffman code is longer than the string, which no encoder that picks the shorter coding sends."""
    return ENCODED_PER_LISTED * max_header_list_size


class EncodedBlockTooLarge(DenialOfServiceError):
    """A header block's fragments passed ``max_encoded_block``: a connection error, ENHANCE_YOUR_CALM."""


class TooManySizeUpdates(ProtocolError):
    """More than ``MAX_SIZE_UPDATES`` size updates start a header block: a connection error, COMPRESSION_ERROR
    (RFC 9113 section 4.3)."""

    error_code = ErrorCodes.COMPRESSION_ERROR


class HeaderBlockBuffer(FrameBuffer):
    """h2's frame buffer of a server connection, refusing a header block once its fragments pass
    ``max_encoded_block(header_list_limit())``, frame by frame as they arrive, before any of it is decoded or
    joined (Go refuses a fragment larger than twice the header-list budget left, golang/net ba872109,
    ``Framer.readMetaFrame``; here the bound is on the whole block, since h2 decodes it whole). A lone HEADERS
    frame is bounded too."""

    def __init__(self, header_list_limit: Callable[[], int]) -> None:
        super().__init__(server=True)
        self._header_list_limit = header_list_limit
        self._held = 0  # fragment bytes of the open block

    def _update_header_buffer(self, f: Frame | None) -> Frame | None:
        if isinstance(f, (HeadersFrame, PushPromiseFrame, ContinuationFrame)):
            held = len(f.data) + (self._held if self._headers_buffer else 0)
            bound = max_encoded_block(self._header_list_limit())
            if held > bound:
                REFUSED_BLOCKS[TOO_LARGE] += 1
                raise EncodedBlockTooLarge(f"header block fragments past {bound} bytes")
            self._held = held
        return super()._update_header_buffer(f)


class TableDecoder(Decoder):
    """hpack's decoder with ``huffman.decode_huffman`` (a byte-wise table, C-level passes) for its per-nibble
    Python loop (nghttp2's decoder, ``nghttp2.huffman``, for strings of ``nghttp2.LONG`` coded bytes or more),
    and without its copy of the rest of the block per literal field (hpack 4.2's ``_decode_literal`` turns the
    ``memoryview`` it is given into bytes: O(fields x block)). Everything else is hpack's: ``decode`` (the
    header-list size limit, the table-size checks), the indexed fields, the table.

    ``_decode_literal`` is the one seam: hpack calls its module's ``decode_huffman`` from it. It reads a literal
    field as hpack's does (RFC 7541 section 6.2): the name indexed (a 6-bit prefix if the field is indexed, else
    4) or a string literal, then the value's string literal; the same errors (``decode_integer``'s, "Truncated
    header block", the table's for a bad index, the Huffman decoder's), the same tuple types, the same table
    update. hpack's debug log line per field is not written.

    ``_update_encoding_context`` (hpack's, per size update) refuses a third size update in a block
    (``TooManySizeUpdates``); hpack refuses one after a field. A block then holds at most two representations
    that add nothing to the header list, whose limit bounds the rest: the work per block is linear in the limit.
    Go's hpack takes any number at the start of a block, each in a few nanoseconds; hpack's loop takes about a
    microsecond each."""

    _size_updates = 0  # in the block being decoded

    def decode(self, data: bytes, raw: bool = False) -> Iterable[HeaderTuple]:
        self._size_updates = 0
        return super().decode(data, raw)

    def _update_encoding_context(self, data: bytes | memoryview) -> int:
        self._size_updates += 1
        if self._size_updates > MAX_SIZE_UPDATES:
            REFUSED_BLOCKS[TOO_MANY_SIZE_UPDATES] += 1
            raise TooManySizeUpdates(f"more than {MAX_SIZE_UPDATES} dynamic table size updates in a header block")
        return super()._update_encoding_context(data)

    def _decode_literal(self, data: bytes | memoryview, should_index: bool) -> tuple[HeaderTuple, int]:
        first = data[0]
        if should_index:
            name_index, prefix, never = first & 0x3F, 6, False
        else:
            name_index, prefix, never = first & 0x0F, 4, bool(first & 0x10)
        name: bytes
        if name_index:
            index, consumed = decode_integer(data, prefix)
            name = self.header_table.get_by_index(index)[0]
            used = consumed
            data = data[consumed:]
        else:
            data = data[1:]
            name, consumed = _string(data)
            used = consumed + 1
            data = data[consumed:]
        value, consumed = _string(data)
        used += consumed
        header = NeverIndexedHeaderTuple(name, value) if never else HeaderTuple(name, value)
        if should_index:
            self.header_table.add(name, value)
        return header, used


def _string(data: bytes | memoryview) -> tuple[bytes, int]:
    """A string literal at the start of ``data`` (RFC 7541 section 5.2), as hpack reads it, and its octets."""
    length, consumed = decode_integer(data, 7)
    coded = data[consumed : consumed + length]
    if len(coded) != length:
        raise HPACKDecodingError("Truncated header block")
    if not data[0] & 0x80:
        return bytes(coded), consumed + length
    if length >= nghttp2.LONG:  # C speed for a client's long strings; a refusal is decoded again for hpack's verdict
        decoded = nghttp2.huffman(coded)
        if decoded is not None:
            return decoded, consumed + length
    return decode_huffman(coded), consumed + length


def table_decoder(decoder: Decoder) -> Decoder:
    """A ``TableDecoder`` with the limits of h2's fresh ``decoder`` (its header-list size, its table sizes), before
    any block; ``decoder`` itself once it has decoded one (its table is the peer's) or is not hpack's."""
    if type(decoder) is not Decoder or decoder.header_table.dynamic_entries:
        return decoder
    table = TableDecoder(decoder.max_header_list_size)
    table.header_table_size = decoder.header_table_size
    table.max_allowed_table_size = decoder.max_allowed_table_size
    return table


def indexed_encoder(encoder: Encoder) -> Encoder:
    """An ``IndexedEncoder`` in the state of h2's fresh ``encoder`` (its table size and any size change still
    pending); ``encoder`` itself once it has encoded a block or is not hpack's, for the peer's decoder mirrors the
    table from the first block and a swapped encoder would desynchronise it."""
    if type(encoder) is not Encoder or encoder.header_table.dynamic_entries:
        return encoder
    indexed = IndexedEncoder()
    indexed.header_table_size = encoder.header_table_size
    indexed.header_table.resized = encoder.header_table.resized
    indexed.table_size_changes = list(encoder.table_size_changes)
    return indexed


def passes_unchanged(field: tuple[bytes, bytes], config: H2Configuration) -> bool:
    """Whether h2's outbound normalisation and validation, as ``config`` enables them, leave ``field`` exactly as
    it is after ``:status`` in a response header block: the same functions h2's ``_build_headers_frames`` runs
    on every block, on a block of the two."""
    flags = HeaderValidationFlags(is_client=False, is_trailer=False, is_response_header=True, is_push_promise=False)
    block = [_STATUS, field]
    headers: Iterable[Any] = block
    try:
        if config.normalize_outbound_headers:
            headers = normalize_outbound_headers(headers, flags, config.split_outbound_cookies)
        if config.validate_outbound_headers:
            headers = validate_outbound_headers(headers, flags)
        result = list(headers)
    except ProtocolError:
        return False
    return result == block and all(type(h) is tuple and type(h[1]) is bytes for h in result)
