"""A strict DER reader, just enough to walk a certificate the way Go's ``cryptobyte`` does (pure).

Every refusal is :class:`Malformed`: indefinite or non-minimal lengths, high tag numbers, non-minimal integers,
booleans other than 00/FF, bit strings with set padding bits, and truncated input.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

SEQUENCE = 0x30
SET = 0x31
INTEGER = 0x02
BOOLEAN = 0x01
BIT_STRING = 0x03
OCTET_STRING = 0x04
OID = 0x06
UTF8_STRING = 0x0C
NUMERIC_STRING = 0x12
PRINTABLE_STRING = 0x13
T61_STRING = 0x14
IA5_STRING = 0x16
BMP_STRING = 0x1E


class Malformed(ValueError):
    """The bytes are not DER that Go's parser would read."""


def context(number: int, constructed: bool = False) -> int:
    """The tag byte of ``[number]`` (context-specific)."""
    return 0x80 | (0x20 if constructed else 0) | number


@dataclass
class Reader:
    """A cursor over DER bytes; ``read`` returns the contents of the next element, ``element`` all of it."""

    data: bytes
    pos: int = 0

    def empty(self) -> bool:
        return self.pos >= len(self.data)

    def peek(self) -> int | None:
        return None if self.empty() else self.data[self.pos]

    def _header(self) -> tuple[int, int, int]:
        """(tag, start of contents, end of element) of the next element."""
        data, pos = self.data, self.pos
        if pos + 2 > len(data):
            raise Malformed("truncated element")
        tag, first = data[pos], data[pos + 1]
        if tag & 0x1F == 0x1F:
            raise Malformed("high tag number")
        pos += 2
        if first < 0x80:
            length = first
        else:
            count = first & 0x7F
            if count == 0 or count > 4 or pos + count > len(data):
                raise Malformed("bad length")
            length = int.from_bytes(data[pos : pos + count], "big")
            if length < 0x80 or data[pos] == 0:
                raise Malformed("non-minimal length")
            pos += count
        if pos + length > len(data):
            raise Malformed("truncated element")
        return tag, pos, pos + length

    def any(self) -> tuple[int, bytes]:
        tag, start, end = self._header()
        self.pos = end
        return tag, self.data[start:end]

    def element(self, tag: int) -> bytes:
        got, _, end = self._header()
        if got != tag:
            raise Malformed(f"expected tag {tag:#x}, got {got:#x}")
        start, self.pos = self.pos, end
        return self.data[start:end]

    def read(self, tag: int) -> bytes:
        got, start, end = self._header()
        if got != tag:
            raise Malformed(f"expected tag {tag:#x}, got {got:#x}")
        self.pos = end
        return self.data[start:end]

    def sub(self, tag: int) -> Reader:
        return Reader(self.read(tag))

    def optional(self, tag: int) -> bytes | None:
        return self.read(tag) if self.peek() == tag else None

    def integer(self, tag: int = INTEGER) -> int:
        return decode_integer(self.read(tag))

    def boolean(self) -> bool:
        value = self.read(BOOLEAN)
        if value not in (b"\x00", b"\xff"):
            raise Malformed("boolean")
        return value == b"\xff"

    def bit_string(self) -> tuple[bytes, int]:
        """(bytes, number of unused bits)."""
        value = self.read(BIT_STRING)
        if (
            not value
            or value[0] > 7
            or (len(value) == 1 and value[0])
            or (len(value) > 1 and value[-1] & ((1 << value[0]) - 1))
        ):
            raise Malformed("bit string")
        return value[1:], value[0]

    def oid(self) -> str:
        """An OBJECT IDENTIFIER as cryptobyte reads one: every arc below 2**31."""
        return decode_oid(self.read(OID), max_arc=1 << 31)

    def any_oid(self) -> str:
        """An OBJECT IDENTIFIER of any arc size (Go's newOIDFromDER, used for certificate policies)."""
        return decode_oid(self.read(OID))

    def done(self) -> None:
        if not self.empty():
            raise Malformed("trailing data")


def decode_integer(value: bytes) -> int:
    if not value or (len(value) > 1 and (value[0], value[1] & 0x80) in ((0, 0), (0xFF, 0x80))):
        raise Malformed("integer")
    return int.from_bytes(value, "big", signed=True)


@functools.lru_cache(maxsize=256)  # a certificate repeats a few OIDs: read each once (pure, immutable result)
def decode_oid(value: bytes, max_arc: int | None = None) -> str:
    """Dotted form of a base-128 OID; with ``max_arc``, any (encoded) arc reaching it is refused."""
    if not value or value[-1] & 0x80:
        raise Malformed("object identifier")
    arcs: list[int] = []
    current = 0
    fresh = True
    for byte in value:
        if fresh and byte == 0x80:
            raise Malformed("object identifier")
        current = (current << 7) | (byte & 0x7F)
        if max_arc is not None and current >= max_arc:
            raise Malformed("object identifier arc too large")
        fresh = not byte & 0x80
        if fresh:
            arcs.append(current)
            current = 0
    first = min(arcs[0] // 40, 2)
    return ".".join(str(a) for a in [first, arcs[0] - 40 * first, *arcs[1:]])
