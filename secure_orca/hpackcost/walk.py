"""Walk HPACK header blocks (RFC 7541) representation by representation, attributing every byte to a field.

Pure and sans-I/O: a :class:`HpackWalker` keeps its own dynamic table (one per connection and direction, as a
decoder would) and turns each header block into :class:`FieldRecord` s (name, value, representation, bytes on
the wire, Huffman flags, whether it was added to the table), :class:`SizeUpdate` s and :class:`TableEvent` s
(insertions and evictions). The bytes of the records of a block always sum to the block's length.

:func:`attribute_connection` walks the blocks of one connection and adds what a single walk cannot see: how
many bytes the *other* fields cost extra because the ORCA entries took room in the table. It replays the
decoded header lists through an ``hpack.Encoder`` twice, with and without the ORCA fields (see its docstring).
Strings are returned as ``str`` decoded as Latin-1, so ``len()`` is the length in octets.
"""

from __future__ import annotations

import enum
from collections import Counter, deque
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TypedDict

import hpack
from hpack.huffman_table import decode_huffman  # no public Huffman decoder in hpack 4
from hpack.table import HeaderTable  # its STATIC_TABLE: a class attribute, not re-exported by hpack 4

from secure_orca.errors import SecureOrcaError
from secure_orca.orca.headers import ORCA_HEADERS as ORCA_FIELDS

ENTRY_OVERHEAD = 32  # RFC 7541 section 4.1
DEFAULT_TABLE_SIZE = 4096  # SETTINGS_HEADER_TABLE_SIZE initial value (RFC 9113 section 6.5.2)
_MAX_INTEGER = 1 << 32  # larger integers are rejected rather than decoded

# RFC 7541 Appendix A, as the hpack package (the encoder of h2 and hypercorn) holds it.
STATIC_TABLE: tuple[tuple[str, str], ...] = tuple(
    (name.decode("ascii"), value.decode("ascii")) for name, value in HeaderTable.STATIC_TABLE
)


class HpackWalkError(SecureOrcaError, ValueError):
    """A block that a conforming decoder must reject (RFC 7541 COMPRESSION_ERROR); says where and why."""

    def __init__(self, offset: int, message: str) -> None:
        super().__init__(f"at byte {offset}: {message}")
        self.offset = offset


class Representation(enum.StrEnum):
    """The four header field representations of RFC 7541 section 6."""

    INDEXED = "indexed"  # 6.1
    INCREMENTAL = "incremental"  # 6.2.1 literal with incremental indexing
    WITHOUT_INDEXING = "without-indexing"  # 6.2.2
    NEVER_INDEXED = "never-indexed"  # 6.2.3


@dataclass(frozen=True, slots=True)
class FieldRecord:
    """One header field representation in a block, and what it cost."""

    name: str
    value: str
    kind: Representation
    offset: int  # first byte within the block
    wire_bytes: int
    index: int | None  # table index of the field (INDEXED) or of its name; None for a literal name
    name_huffman: bool | None  # None when the name came from the table
    value_huffman: bool | None  # None for INDEXED
    added: bool  # inserted into the dynamic table

    @property
    def literal(self) -> bool:
        """The value was sent as a string (not a table reference)."""
        return self.kind is not Representation.INDEXED

    @property
    def entry_size(self) -> int:
        """RFC 7541 entry size: name + value octets + 32."""
        return len(self.name) + len(self.value) + ENTRY_OVERHEAD


@dataclass(frozen=True, slots=True)
class SizeUpdate:
    """A dynamic table size update (RFC 7541 section 6.3)."""

    offset: int
    wire_bytes: int
    new_size: int


@dataclass(frozen=True, slots=True)
class TableEvent:
    """An insertion into or eviction from the dynamic table; ``cause`` is the offset of the representation."""

    action: str  # "insert" or "evict"
    name: str
    value: str
    size: int
    cause: int


@dataclass(frozen=True, slots=True)
class BlockWalk:
    """A walked header block."""

    length: int
    fields: tuple[FieldRecord, ...]
    size_updates: tuple[SizeUpdate, ...]
    events: tuple[TableEvent, ...]
    table_size: int  # dynamic table size after the block
    table_max: int  # dynamic table maximum after the block

    def headers(self) -> list[tuple[str, str]]:
        """The decoded header list."""
        return [(f.name, f.value) for f in self.fields]

    def bytes_by_name(self) -> Counter[str]:
        """Wire bytes per field name (size updates are not a field: see ``size_updates``)."""
        out: Counter[str] = Counter()
        for f in self.fields:
            out[f.name] += f.wire_bytes
        return out

    def evictions(self) -> list[TableEvent]:
        """The eviction events of the block."""
        return [e for e in self.events if e.action == "evict"]


def entry_size(name: str, value: str) -> int:
    """RFC 7541 entry size of a (Latin-1) name and value."""
    return len(name) + len(value) + ENTRY_OVERHEAD


class DynamicTable:
    """The RFC 7541 dynamic table: FIFO, newest first; the oldest entries go to stay within ``max_size``."""

    def __init__(self, max_size: int = DEFAULT_TABLE_SIZE) -> None:
        self.max_size = max_size
        self.size = 0
        self.entries: deque[tuple[str, str]] = deque()

    def get(self, index: int) -> tuple[str, str]:
        """Entry by combined index (1..61 static, then dynamic, newest first); KeyError if out of range."""
        if 1 <= index <= len(STATIC_TABLE):
            return STATIC_TABLE[index - 1]
        position = index - len(STATIC_TABLE) - 1
        if 0 <= position < len(self.entries):
            return self.entries[position]
        raise KeyError(index)

    def add(self, name: str, value: str) -> tuple[bool, list[tuple[str, str]]]:
        """Insert an entry (section 4.4); return whether it was added and the entries evicted oldest first."""
        size = entry_size(name, value)
        evicted = self._evict_to(self.max_size - size)
        if size > self.max_size:
            return False, evicted
        self.entries.appendleft((name, value))
        self.size += size
        return True, evicted

    def resize(self, max_size: int) -> list[tuple[str, str]]:
        """Change the maximum size (section 4.3); return the entries evicted."""
        self.max_size = max_size
        return self._evict_to(max_size)

    def _evict_to(self, limit: int) -> list[tuple[str, str]]:
        evicted = []
        while self.entries and self.size > max(limit, 0):
            name, value = self.entries.pop()
            self.size -= entry_size(name, value)
            evicted.append((name, value))
        return evicted


class _Reader:
    """A cursor over one block that raises HpackWalkError on truncation."""

    def __init__(self, block: bytes) -> None:
        self.data = block
        self.pos = 0

    def byte(self) -> int:
        if self.pos >= len(self.data):
            raise HpackWalkError(self.pos, "block ends inside a representation")
        value = self.data[self.pos]
        self.pos += 1
        return value

    def integer(self, prefix_bits: int) -> int:
        """RFC 7541 section 5.1 integer whose prefix is in the low ``prefix_bits`` of the current byte."""
        start = self.pos
        limit = (1 << prefix_bits) - 1
        value = self.byte() & limit
        if value < limit:
            return value
        shift = 0
        while True:
            octet = self.byte()
            value += (octet & 0x7F) << shift
            shift += 7
            if value >= _MAX_INTEGER:
                raise HpackWalkError(start, "integer too large")
            if not octet & 0x80:
                return value

    def string(self) -> tuple[str, bool]:
        """RFC 7541 section 5.2 string literal: (text, was_huffman)."""
        start = self.pos
        huffman = bool(self.data[self.pos] & 0x80) if self.pos < len(self.data) else False
        length = self.integer(7)
        if self.pos + length > len(self.data):
            raise HpackWalkError(start, f"string of {length} bytes runs past the end of the block")
        raw = self.data[self.pos : self.pos + length]
        self.pos += length
        if huffman:
            try:
                raw = decode_huffman(raw)
            except hpack.HPACKDecodingError as error:
                raise HpackWalkError(start, f"invalid Huffman string ({error})") from None
        return raw.decode("latin-1"), huffman


# First-byte patterns: (mask, pattern, kind, prefix bits of the index).
_LITERALS = (
    (0xC0, 0x40, Representation.INCREMENTAL, 6),
    (0xF0, 0x10, Representation.NEVER_INDEXED, 4),
    (0xF0, 0x00, Representation.WITHOUT_INDEXING, 4),
)


class HpackWalker:
    """Decoder-side walker for one direction of one HTTP/2 connection.

    ``settings_max`` is the SETTINGS_HEADER_TABLE_SIZE the decoder advertised: the ceiling for size updates.
    """

    def __init__(self, settings_max: int = DEFAULT_TABLE_SIZE) -> None:
        self.settings_max = settings_max
        self.table = DynamicTable(settings_max)

    def walk(self, block: bytes) -> BlockWalk:
        """Walk one complete header block (HEADERS plus any CONTINUATION payloads, concatenated)."""
        reader = _Reader(bytes(block))
        fields: list[FieldRecord] = []
        updates: list[SizeUpdate] = []
        events: list[TableEvent] = []
        while reader.pos < len(reader.data):
            start = reader.pos
            first = reader.data[start]
            if first & 0xE0 == 0x20:
                if fields:
                    raise HpackWalkError(start, "dynamic table size update after a header field")
                new_size = reader.integer(5)
                if new_size > self.settings_max:
                    raise HpackWalkError(start, f"table size {new_size} exceeds {self.settings_max}")
                evicted = self.table.resize(new_size)
                events += _evictions(evicted, start)
                updates.append(SizeUpdate(start, reader.pos - start, new_size))
            else:
                fields.append(self._field(reader, events))
        return BlockWalk(
            len(reader.data),
            tuple(fields),
            tuple(updates),
            tuple(events),
            self.table.size,
            self.table.max_size,
        )

    def _lookup(self, index: int, at: int) -> tuple[str, str]:
        if index == 0:
            raise HpackWalkError(at, "index 0")
        try:
            return self.table.get(index)
        except KeyError:
            raise HpackWalkError(at, f"index {index} is not in the table") from None

    def _field(self, reader: _Reader, events: list[TableEvent]) -> FieldRecord:
        start = reader.pos
        first = reader.data[start]
        if first & 0x80:
            index = reader.integer(7)
            name, value = self._lookup(index, start)
            return FieldRecord(name, value, Representation.INDEXED, start, reader.pos - start, index, None, None, False)
        kind, prefix = next((k, p) for mask, pattern, k, p in _LITERALS if first & mask == pattern)
        index = reader.integer(prefix)
        name_huffman: bool | None = None
        if index:
            name = self._lookup(index, start)[0]
        else:
            name, name_huffman = reader.string()
        value, value_huffman = reader.string()
        added = False
        if kind is Representation.INCREMENTAL:
            added, evicted = self.table.add(name, value)
            events += _evictions(evicted, start)
            if added:
                events.append(TableEvent("insert", name, value, entry_size(name, value), start))
        return FieldRecord(
            name, value, kind, start, reader.pos - start, index or None, name_huffman, value_huffman, added
        )


def _evictions(evicted: Iterable[tuple[str, str]], cause: int) -> list[TableEvent]:
    return [TableEvent("evict", n, v, entry_size(n, v), cause) for n, v in evicted]


def walk_blocks(blocks: Iterable[bytes], settings_max: int = DEFAULT_TABLE_SIZE) -> list[BlockWalk]:
    """Walk the header blocks of one connection direction in order."""
    walker = HpackWalker(settings_max)
    return [walker.walk(block) for block in blocks]


# --- attribution over a connection ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BlockCost:
    """What the ORCA fields cost in one block (or, summed with ``+``, in a run of blocks).

    ``replay_with`` / ``replay_without`` are the block's length when the reference encoder replays the header
    list with and without the ORCA fields; ``marginal`` is their difference and ``eviction_cost`` the part of
    it not spent on the ORCA representations themselves.
    """

    blocks: int = 0
    length: int = 0  # wire bytes
    orca_bytes: int = 0  # wire bytes of the ORCA representations
    orca_fields: int = 0
    orca_literals: int = 0  # ORCA representations sent as literals
    orca_values: int = 0  # blocks whose ORCA fields differ from the last block that had them (a new report)
    evictions: int = 0
    evictions_by_orca: int = 0  # evictions caused by inserting an ORCA entry
    replay_with: int = 0
    replay_without: int = 0
    replay_orca_bytes: int = 0  # ORCA bytes in the replay (= orca_bytes when the replay is exact)

    def __add__(self, other: BlockCost) -> BlockCost:
        return BlockCost(*(getattr(self, f) + getattr(other, f) for f in BlockCost.__slots__))

    @property
    def marginal(self) -> int:
        """Extra header bytes due to the ORCA fields: replay with minus replay without."""
        return self.replay_with - self.replay_without

    @property
    def eviction_cost(self) -> int:
        """Extra bytes of other fields because ORCA entries took room in the table (may be < 0 per block)."""
        return self.marginal - self.replay_orca_bytes

    def rates(self, responses: int, seconds: float) -> Rates:
        """Per-response and per-second figures of these blocks (the names the model and wire results share)."""
        return {
            "marginal": self.marginal / responses,
            "orca_bytes": self.replay_orca_bytes / responses,
            "eviction_cost": self.eviction_cost / responses,
            "literals_per_s": self.orca_literals / seconds,
            "values_per_s": self.orca_values / seconds,
            "evictions_per_s": self.evictions / seconds,
            "orca_evictions_per_s": self.evictions_by_orca / seconds,
            "bytes_per_s": self.marginal / seconds,
        }


class Rates(TypedDict):
    """The per-response and per-second names CellResult and WireResult share."""

    marginal: float
    orca_bytes: float
    eviction_cost: float
    literals_per_s: float
    values_per_s: float
    evictions_per_s: float
    orca_evictions_per_s: float
    bytes_per_s: float


@dataclass(frozen=True)
class FieldStats:
    """Totals for one field name over a connection."""

    count: int = 0
    literals: int = 0
    wire_bytes: int = 0
    inserted: int = 0
    evicted: int = 0
    evicted_by_orca: int = 0


@dataclass(frozen=True)
class ConnectionAttribution:
    """Byte attribution for the header blocks of one connection direction; ``total`` sums ``per_block``."""

    per_block: list[BlockCost]
    by_name: dict[str, FieldStats]
    orca_first_send: int | None  # wire bytes of the first ORCA representation
    replay_exact: bool  # the replay with ORCA reproduced the wire bytes exactly
    walks: list[BlockWalk] = field(repr=False)

    @property
    def total(self) -> BlockCost:
        """The sum over all blocks."""
        return sum(self.per_block, BlockCost())


def replay(
    header_lists: Iterable[Sequence[tuple[str, str]]],
    never_indexed: Collection[str] = (),
    table_sizes: Sequence[Sequence[int]] | None = None,
) -> list[bytes]:
    """Encode header lists in order with one ``hpack.Encoder`` (the encoder of h2 and hypercorn), Huffman on.

    Fields named in ``never_indexed`` use the never-indexed representation; ``table_sizes[i]`` lists the size
    updates to signal at the start of block ``i``.
    """
    encoder = hpack.Encoder()
    out = []
    for i, headers in enumerate(header_lists):
        for size in table_sizes[i] if table_sizes else ():
            encoder.header_table_size = size
        triples = [(n.encode("latin-1"), v.encode("latin-1"), n in never_indexed) for n, v in headers]
        out.append(encoder.encode(triples))
    return out


def attribute_connection(
    blocks: Sequence[bytes],
    orca_names: Collection[str] = ORCA_FIELDS,
    settings_max: int = DEFAULT_TABLE_SIZE,
) -> ConnectionAttribution:
    """Walk the blocks of one connection direction and attribute their bytes, eviction cost included.

    How the eviction cost is computed: the walked header lists are re-encoded with a fresh ``hpack.Encoder``
    (the policy of h2/hypercorn: every field indexed except those the wire sent never-indexed, Huffman always,
    the wire's table size updates replayed), once as they are and once without the ORCA fields. Per block,
    ``marginal = with - without`` and ``eviction_cost = marginal - ORCA bytes in the replay``.
    ``replay_exact`` says whether the replay reproduced the wire; when it does not (another encoder policy,
    e.g. Go's or nghttp2's), the split is that of the reference policy applied to the same header lists.
    """
    walks = walk_blocks(blocks, settings_max)
    never = {f.name for w in walks for f in w.fields if f.kind is Representation.NEVER_INDEXED}
    sizes = [[u.new_size for u in w.size_updates] for w in walks]
    with_blocks = replay([w.headers() for w in walks], never, sizes)
    without_blocks = replay([[h for h in w.headers() if h[0] not in orca_names] for w in walks], never, sizes)
    exact = with_blocks == [bytes(b) for b in blocks]
    replay_walks = walks if exact else walk_blocks(with_blocks, settings_max)
    per_block = []
    stats: dict[str, Counter[str]] = {}
    last_report: list[tuple[str, str]] = []
    for walk, replayed, with_block, without_block in zip(walks, replay_walks, with_blocks, without_blocks, strict=True):
        causes = {f.offset for f in walk.fields if f.name in orca_names}
        orca = [f for f in walk.fields if f.name in orca_names]
        by_orca = [e for e in walk.evictions() if e.cause in causes]
        report = [(f.name, f.value) for f in orca]
        new_value = bool(report) and report != last_report
        last_report = report or last_report
        per_block.append(
            BlockCost(
                blocks=1,
                length=walk.length,
                orca_bytes=sum(f.wire_bytes for f in orca),
                orca_fields=len(orca),
                orca_literals=sum(f.literal for f in orca),
                orca_values=int(new_value),
                evictions=len(walk.evictions()),
                evictions_by_orca=len(by_orca),
                replay_with=len(with_block),
                replay_without=len(without_block),
                replay_orca_bytes=sum(f.wire_bytes for f in replayed.fields if f.name in orca_names),
            )
        )
        for f in walk.fields:
            stats.setdefault(f.name, Counter()).update(count=1, literals=f.literal, wire_bytes=f.wire_bytes)
        for e in walk.events:
            stats.setdefault(e.name, Counter())["inserted" if e.action == "insert" else "evicted"] += 1
        for e in by_orca:
            stats[e.name]["evicted_by_orca"] += 1
    first = next((f.wire_bytes for w in walks for f in w.fields if f.name in orca_names), None)
    by_name = {name: FieldStats(**counts) for name, counts in stats.items()}
    return ConnectionAttribution(per_block, by_name, first, exact, walks)
