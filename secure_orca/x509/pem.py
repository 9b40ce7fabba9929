"""CA bundles as client-go's ``cert.ParseCertsPEM`` reads them, over Go's ``encoding/pem`` ``Decode`` (pure)."""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterator

from secure_orca.x509.der import Malformed
from secure_orca.x509.parse import parse_certificate

_PEM_BLOCK = re.compile(rb"(?:^|\n)-----BEGIN ([^\r\n]*?)-----[ \t]*\r?\n(.*?)-----END \1-----[ \t]*(?=\r?\n|$)", re.S)


def pem_blocks(data: bytes) -> Iterator[tuple[str, bool, bytes]]:
    """(type, has headers, bytes) of each PEM block Go's pem.Decode finds; undecodable blocks are skipped."""
    for match in _PEM_BLOCK.finditer(data):
        lines = match.group(2).split(b"\n")
        headers = 0
        while headers < len(lines) and b":" in lines[headers]:
            headers += 1
        body = re.sub(rb"[ \t\r\n]", b"", b"".join(lines[headers:]))
        try:
            decoded = base64.b64decode(body, validate=True)
        except (binascii.Error, ValueError):
            continue
        yield match.group(1).decode("latin-1"), headers > 0, decoded


def ca_bundle(data: bytes) -> list[bytes]:
    """The DER of every "CERTIFICATE" block without headers (others are skipped, as client-go does);
    :class:`Malformed` when one of them does not parse or there is none."""
    certificates = [block for kind, headers, block in pem_blocks(data) if kind == "CERTIFICATE" and not headers]
    for block in certificates:
        parse_certificate(block)
    if not certificates:
        raise Malformed("no certificate")
    return certificates
