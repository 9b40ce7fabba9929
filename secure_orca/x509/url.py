"""The part of Go's ``net/url`` that ``crypto/x509`` uses on URI SANs and URI name constraints (pure).

``url.Parse`` as Go 1.26.0's ``src/net/url/url.go`` runs it, reduced to what decides whether it errors and what
``Host`` it returns.
"""

from __future__ import annotations

import ipaddress
import re

from secure_orca.x509.der import Malformed

_HEX = frozenset("0123456789abcdefABCDEF")
_HOST_CHARS = frozenset("!\"$&'()*+,-.:;<=>[]_~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
_USERINFO_CHARS = frozenset("-._:~!$&'()*+,;=%@0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")


def _unescape(text: str, host: bool = False) -> str:
    """Go's net/url unescape: every %XX well formed; in a host only escapes of bytes >= 0x80 (or %25), and only
    the characters a host may hold."""
    i = 0
    while i < len(text):
        if text[i] == "%":
            if i + 2 >= len(text) or text[i + 1] not in _HEX or text[i + 2] not in _HEX:
                raise Malformed("URL escape")
            if host and int(text[i + 1], 16) < 8 and text[i : i + 3] != "%25":
                raise Malformed("URL escape in host")
            i += 3
            continue
        if host and ord(text[i]) < 0x80 and text[i] not in _HOST_CHARS:
            raise Malformed("character in URL host")
        i += 1
    return re.sub(r"%([0-9a-fA-F]{2})", lambda m: chr(int(m.group(1), 16)), text)


def _port_valid(port: str) -> bool:
    return not port or (port[0] == ":" and all("0" <= c <= "9" for c in port[1:]))


def _url_host(authority: str) -> str:
    """Go's parseHost (strict colons): the host, unescaped, port included."""
    if "[" in authority:
        opening, closing = authority.rfind("["), authority.rfind("]")
        if closing < 0 or not _port_valid(authority[closing + 1 :]):
            raise Malformed("URL host")
        hostname = authority[opening + 1 : closing]
        zone_at = hostname.find("%25")  # an IPv6 zone: fe80::1%25eth0
        if zone_at >= 0:
            address = _unescape(hostname[:zone_at], host=True) + "%" + _unescape(hostname[zone_at + 3 :])
        else:
            address = _unescape(hostname, host=True)
        try:
            parsed = ipaddress.ip_address(address)
        except ValueError:
            raise Malformed("URL IP literal") from None
        if parsed.version == 4:
            raise Malformed("URL IP literal")
        return f"[{hostname}]{authority[closing + 1 :]}"
    if ":" in authority and not _port_valid(authority[authority.index(":") :]):
        raise Malformed("URL port")
    return _unescape(authority, host=True)


def uri_host(uri: str) -> str:
    """The Host of Go's ``url.Parse(uri)`` (port included, "" for none); :class:`Malformed` where it errors."""
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in uri):
        raise Malformed("control character in URL")
    rest, _, fragment = uri.partition("#")
    scheme = ""
    for i, char in enumerate(rest):
        if char.isascii() and char.isalpha():
            continue
        if char.isdigit() or char in "+-.":
            if i == 0:
                break
            continue
        if char == ":":
            if i == 0:
                raise Malformed("missing URL scheme")
            scheme, rest = rest[:i], rest[i + 1 :]
        break
    rest = rest.partition("?")[0]  # the query is kept raw
    host = ""
    if not rest.startswith("/"):
        if scheme:
            _unescape(fragment)
            return ""  # opaque
        if ":" in rest.partition("/")[0]:
            raise Malformed("colon in the first path segment")
    if (scheme or not rest.startswith("///")) and rest.startswith("//"):
        authority, slash, path = rest[2:].partition("/")
        rest = slash + path
        at = authority.rfind("@")
        host = _url_host(authority[at + 1 :])
        if at >= 0:
            userinfo = authority[:at]
            if any(c.isascii() and c not in _USERINFO_CHARS for c in userinfo):
                raise Malformed("URL userinfo")
            for part in userinfo.split(":", 1):
                _unescape(part)
    _unescape(rest)
    _unescape(fragment)
    return host
