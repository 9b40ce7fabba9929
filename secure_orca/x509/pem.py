"""CA bundles as client-go's ``cert.ParseCertsPEM`` reads them, over Go's ``encoding/pem`` ``Decode`` (pure).

``decode`` follows Go's ``src/encoding/pem/pem.go`` (golang/go commit 08b16d7081426968583175c7375a2123671ee6c5,
checked against Go 1.26.0 by tests/x509/test_x509_differential.py): a block starts at ``-----BEGIN `` at the start of
the input or after a newline, its type line ends with ``-----``, lines holding a colon right after it are headers,
and it ends at ``-----END `` preceded by a newline (or, with no headers, right at the body's start) followed by the
same type, ``-----`` and nothing but spaces or tabs on that line. A candidate that fails any of these rules, or
whose base64 does not decode, is skipped and the search goes on after its type line (or its headers); a header
block that runs to the end of the input ends the search.
"""

from __future__ import annotations

import binascii
import re
from collections.abc import Iterator
from dataclasses import dataclass

from secure_orca.x509.der import Malformed
from secure_orca.x509.parse import parse_certificate

_BEGIN = b"\n-----BEGIN "
_END = b"\n-----END "
_DASHES = b"-----"
# Go's base64.StdEncoding (padded, not strict) after "\r" and "\n" are dropped: whole quanta, padding at the end.
_BASE64 = re.compile(rb"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?")


@dataclass(frozen=True)
class Block:
    kind: str
    has_headers: bool
    data: bytes


def _line(data: bytes, start: int) -> tuple[bytes, int]:
    """Go's getLine: the line at ``start`` without its "\\n" or "\\r\\n" and trailing spaces or tabs, and where the
    next line starts."""
    end = data.find(b"\n", start)
    if end < 0:
        end = after = len(data)
    else:
        after = end + 1
        if end > start and data[end - 1] == 0x0D:
            end -= 1
    return data[start:end].rstrip(b" \t"), after


def _base64(text: bytes) -> bytes | None:
    body = text.replace(b" ", b"").replace(b"\t", b"").replace(b"\r", b"").replace(b"\n", b"")
    if not _BASE64.fullmatch(body):
        return None
    try:
        return binascii.a2b_base64(body)
    except binascii.Error:
        return None


def decode(data: bytes, pos: int = 0) -> tuple[Block | None, int]:
    """Go's ``pem.Decode(data[pos:])``: the next block and where the rest starts, or None (nothing more)."""
    rest = pos
    while True:
        if data.startswith(_BEGIN[1:], rest):
            rest += len(_BEGIN) - 1
        else:
            found = data.find(_BEGIN, rest)
            if found < 0:
                return None, len(data)
            rest = found + len(_BEGIN)
        type_line, rest = _line(data, rest)
        if not type_line.endswith(_DASHES):
            continue
        kind = type_line[: -len(_DASHES)]
        headers = False
        while True:
            if rest >= len(data):
                return None, len(data)
            line, after = _line(data, rest)
            if b":" not in line:
                break
            headers, rest = True, after
        if not headers and data.startswith(_END[1:], rest):
            end, trailer = rest, rest + len(_END) - 1
        else:
            end = data.find(_END, rest)
            trailer = end + len(_END)
        if end < 0:
            continue
        closing = data[trailer : trailer + len(kind) + len(_DASHES)]
        if len(closing) < len(kind) + len(_DASHES) or not closing.startswith(kind) or not closing.endswith(_DASHES):
            continue
        if _line(data, trailer + len(closing))[0]:
            continue
        decoded = _base64(data[rest:end])
        if decoded is None:
            continue
        return Block(kind.decode("latin-1"), headers, decoded), _line(data, end + len(_END) - 1)[1]


def pem_blocks(data: bytes) -> Iterator[Block]:
    """Every block, as a loop over Go's ``pem.Decode`` reads them (client-go's ``ParseCertsPEM`` loop)."""
    pos = 0
    while pos < len(data):
        block, pos = decode(data, pos)
        if block is None:
            return
        yield block


def ca_bundle(data: bytes) -> list[bytes]:
    """The DER of every "CERTIFICATE" block without headers (others are skipped, as client-go does);
    :class:`Malformed` when one of them does not parse or there is none."""
    certificates = [b.data for b in pem_blocks(data) if b.kind == "CERTIFICATE" and not b.has_headers]
    for block in certificates:
        parse_certificate(block)
    if not certificates:
        raise Malformed("no certificate")
    return certificates
