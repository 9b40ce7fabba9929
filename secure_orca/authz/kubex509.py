"""kube-apiserver's client-certificate verification, mirrored from Go's ``crypto/x509`` (pure: time is passed in).

kube-apiserver's front-proxy authenticator (``k8s.io/apiserver/pkg/authentication/request/x509``, commit
24a394e516bfda066d7e2221d7d92c052de27c54, go.mod ``go 1.26.0``) calls ``Certificate.Verify`` with the
requestheader CA bundle as roots, the rest of the presented chain as intermediates and ``ExtKeyUsageClientAuth``,
then compares ``Subject.CommonName`` with the allowed names. This module reads certificates and builds chains the
way Go 1.26.0's ``crypto/x509`` (``parser.go``, ``verify.go``, ``constraints.go``) does, written from reading that
source, not translated from it. ``tests/x509oracle`` runs the real Go code on the same corpus.

Not mirrored (refused instead, listed in docs/x509-differential.md): certificate-policy processing when
certificates below the root carry both certificatePolicies and policy constraints, mappings or inhibitAnyPolicy.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import ipaddress
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa

import secure_orca.authz.der as der
from secure_orca.authz.der import Malformed, Reader

COMMON_NAME = "2.5.4.3"
EKU_ANY = "2.5.29.37.0"
EKU_CLIENT_AUTH = "1.3.6.1.5.5.7.3.2"
KEY_USAGE_CERT_SIGN = 1 << 5
MAX_SIGNATURE_CHECKS = 100  # Go's maxChainSignatureChecks
_AIA = "1.3.6.1.5.5.7.1.1"
_SAN = "2.5.29.17"
_NAME_CONSTRAINTS = "2.5.29.30"
_RSA, _EC, _ED25519, _X25519, _DSA = (
    "1.2.840.113549.1.1.1",
    "1.2.840.10045.2.1",
    "1.3.101.112",
    "1.3.101.110",
    "1.2.840.10040.4.1",
)
_KNOWN_KEYS = frozenset({_RSA, _EC, _ED25519, _X25519, _DSA})
_GO_CURVES = frozenset({"1.3.132.0.33", "1.2.840.10045.3.1.7", "1.3.132.0.34", "1.3.132.0.35"})
_HASHES: dict[str, type[hashes.HashAlgorithm]] = {
    "2.16.840.1.101.3.4.2.1": hashes.SHA256,
    "2.16.840.1.101.3.4.2.2": hashes.SHA384,
    "2.16.840.1.101.3.4.2.3": hashes.SHA512,
}
# signature OID -> (key algorithm, hash); SHA-1 and MD5 are known to Go and refused for certificates.
_SIGNATURES: dict[str, tuple[str, type[hashes.HashAlgorithm] | None]] = {
    "1.2.840.113549.1.1.11": (_RSA, hashes.SHA256),
    "1.2.840.113549.1.1.12": (_RSA, hashes.SHA384),
    "1.2.840.113549.1.1.13": (_RSA, hashes.SHA512),
    "1.2.840.10045.4.3.2": (_EC, hashes.SHA256),
    "1.2.840.10045.4.3.3": (_EC, hashes.SHA384),
    "1.2.840.10045.4.3.4": (_EC, hashes.SHA512),
    "1.3.101.112": (_ED25519, None),
}
_RSA_PSS = "1.2.840.113549.1.1.10"
_PRINTABLE = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789'()+,-./:=? *&")


IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass
class Subtrees:
    """One side (permitted or excluded) of a name constraints extension, the forms Go enforces."""

    dns: list[str] = field(default_factory=list)
    uri: list[str] = field(default_factory=list)
    email: list[str] = field(default_factory=list)
    ip: list[IPNetwork] = field(default_factory=list)


@dataclass(frozen=True)
class NameConstraints:
    permitted: Subtrees
    excluded: Subtrees


@dataclass
class Extensions:
    """What Go's processExtensions records."""

    basic_constraints_valid: bool = False
    is_ca: bool = False
    max_path_len: int = -1
    key_usage: int = 0
    ext_key_usages: tuple[str, ...] = ()
    subject_key_id: bytes = b""
    authority_key_id: bytes = b""
    san: bytes | None = None
    dns_names: tuple[str, ...] = ()
    emails: tuple[str, ...] = ()
    ips: tuple[bytes, ...] = ()
    uris: tuple[str, ...] = ()
    name_constraints: NameConstraints | None = None
    unhandled_critical: bool = False
    policy_processing: bool = False  # carries policy constraints, policy mappings or inhibitAnyPolicy
    has_policies: bool = False  # carries certificatePolicies
    require_explicit_policy: int | None = None


@dataclass(frozen=True)
class GoCertificate:
    """The fields of Go's ``x509.Certificate`` that verification reads."""

    raw: bytes
    tbs: bytes
    signature: bytes
    signature_oid: str
    signature_params: bytes
    version: int
    raw_issuer: bytes
    raw_subject: bytes
    raw_spki: bytes
    key_oid: str
    common_name: str
    not_before: dt.datetime
    not_after: dt.datetime
    ext: Extensions


# --- parsing (Go's ParseCertificate) -------------------------------------------------------------------------


def _string(tag: int, value: bytes) -> str:
    """An attribute value as Go's parseASN1String reads it; other string types make the certificate malformed."""
    if tag == der.T61_STRING:
        return value.decode("latin-1")
    if tag == der.PRINTABLE_STRING and all(b in _PRINTABLE for b in value):
        return value.decode("ascii")
    if tag == der.UTF8_STRING:
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            raise Malformed("UTF8String") from None
    if tag == der.BMP_STRING and len(value) % 2 == 0:
        if value.endswith(b"\x00\x00"):
            value = value[:-2]
        units = [int.from_bytes(value[i : i + 2], "big") for i in range(0, len(value), 2)]
        if any(u in (0xFFFE, 0xFFFF) or 0xFDD0 <= u <= 0xFDEF or 0xD800 <= u <= 0xDFFF for u in units):
            raise Malformed("BMPString")
        return "".join(map(chr, units))
    if tag == der.IA5_STRING and all(b < 0x80 for b in value):
        return value.decode("ascii")
    if tag == der.NUMERIC_STRING and all(b in b"0123456789 " for b in value):
        return value.decode("ascii")
    raise Malformed(f"attribute string type {tag:#x}")


def parse_name(raw: bytes) -> list[tuple[str, str]]:
    """(type OID, value) of every attribute, in encoding order."""
    attributes = []
    rdns = Reader(raw).sub(der.SEQUENCE)
    while not rdns.empty():
        rdn = rdns.sub(der.SET)
        while not rdn.empty():
            atv = rdn.sub(der.SEQUENCE)
            oid = atv.oid()
            tag, value = atv.any()
            attributes.append((oid, _string(tag, value)))
    return attributes


def go_common_name(attributes: Sequence[tuple[str, str]]) -> str:
    """Go's ``pkix.Name.CommonName``: the LAST common-name attribute (each later one overwrites)."""
    names = [value for oid, value in attributes if oid == COMMON_NAME]
    return names[-1] if names else ""


_TIMES = {  # Go's cryptobyte: "060102150405Z0700" or "0601021504Z0700"; "20060102150405Z0700"; must round-trip
    0x17: re.compile(r"(\d{2})(\d{2})(\d{2})(\d{2})(\d{2})(\d{2})?(Z|[+-]\d{4})"),
    0x18: re.compile(r"(\d{4})(\d{2})(\d{2})(\d{2})(\d{2})(\d{2})(Z|[+-]\d{4})"),
}


def _time(reader: Reader) -> dt.datetime:
    """UTCTime or GeneralizedTime as Go reads them: "Z" or a non-zero +hhmm/-hhmm offset, no fractions."""
    tag, value = reader.any()
    pattern = _TIMES.get(tag)
    match = pattern.fullmatch(value.decode("ascii", "replace")) if pattern else None
    if match is None:
        raise Malformed("validity time")
    year, month, day, hour, minute, second, zone = match.groups()
    try:
        zone_info = dt.UTC
        if zone != "Z":
            hours, minutes = int(zone[1:3]), int(zone[3:])
            offset = dt.timedelta(hours=hours, minutes=minutes)
            if not offset or minutes >= 60:
                raise ValueError("an offset of zero is written Z")
            zone_info = dt.timezone(-offset if zone[0] == "-" else offset)
        full_year = int(year) if tag == 0x18 else int(year) + (1900 if int(year) >= 50 else 2000)
        when = dt.datetime(full_year, int(month), int(day), int(hour), int(minute), int(second or 0), tzinfo=zone_info)
    except ValueError:
        raise Malformed("validity time") from None
    return when.astimezone(dt.UTC)


def _check_key(key_oid: str, params: bytes | None, key: bytes, spki: bytes) -> None:
    """Go's parsePublicKey: a key of an algorithm Go knows must parse, or the whole certificate is refused.
    ``params`` is the whole parameters element (None when absent), ``key`` the subjectPublicKey bits."""
    if key_oid == _RSA:
        if params != b"\x05\x00":
            raise Malformed("RSA key without NULL parameters")
        body = Reader(key).sub(der.SEQUENCE)
        modulus, exponent = body.integer(), body.integer()
        if modulus <= 0 or not 0 < exponent < 1 << 63:
            raise Malformed("RSA key")
        return
    if key_oid in (_ED25519, _X25519):
        if params is not None or len(key) != 32:
            raise Malformed("Edwards/Montgomery key")
        return
    if key_oid == _EC:
        if params is None or Reader(params).oid() not in _GO_CURVES:
            raise Malformed("unsupported elliptic curve")
        if not key.startswith(b"\x04"):
            raise Malformed("EC point is not uncompressed")
    if key_oid in (_EC, _DSA):
        try:
            serialization.load_der_public_key(spki)
        except (ValueError, UnsupportedAlgorithm):
            raise Malformed("public key") from None


def _general_names(reader: Reader) -> Iterator[tuple[int, bytes]]:
    while not reader.empty():
        tag, value = reader.any()
        yield tag ^ 0x80, value


def _ia5(value: bytes, what: str) -> str:
    if any(b >= 0x80 for b in value):
        raise Malformed(what)
    return value.decode("ascii")


def domain_name_valid(name: str, constraint: bool) -> bool:
    """Go's domainNameValid."""
    if not name:
        return True
    if name.endswith("."):
        return False
    if constraint and name.startswith("."):
        name = name[1:]
    return all(label and all(33 <= ord(c) <= 126 for c in label) for label in name.split("."))


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


def _constraint_host(uri: str) -> str | None:
    """Go's parseURIs: the lower-case host without port, or None where constraints cannot be checked."""
    host = uri_host(uri).lower()
    if not host:
        return None
    if ":" in host and not host.endswith("]"):
        host = host.rsplit(":", 1)[0]
        if ":" in host:
            return None
    if _is_ip(host) or (host.startswith("[") and host.endswith("]")):
        return None
    return host


def _name_constraints(value: bytes) -> tuple[NameConstraints, bool]:
    top = Reader(value)
    body = top.sub(der.SEQUENCE)
    top.done()
    permitted = body.optional(der.context(0, True))
    excluded = body.optional(der.context(1, True))
    body.done()
    if not permitted and not excluded:
        raise Malformed("empty name constraints")
    unhandled = False

    def subtrees(raw: bytes | None) -> Subtrees:
        nonlocal unhandled
        found = Subtrees()
        reader = Reader(raw or b"")
        while not reader.empty():
            tag, item = reader.sub(der.SEQUENCE).any()
            if tag in (0x82, 0x86):
                name = _ia5(item, "constraint")
                if tag == 0x86 and _is_ip(name):
                    raise Malformed("URI constraint is an IP address")
                if not domain_name_valid(name, True):
                    raise Malformed("DNS constraint")
                (found.dns if tag == 0x82 else found.uri).append(name)
            elif tag == 0x87:
                found.ip.append(_ip_constraint(item))
            elif tag == 0x81:
                name = _ia5(item, "constraint")
                if "@" in name:
                    _mailbox(name)
                elif not domain_name_valid(name, True):
                    raise Malformed("email constraint")
                found.email.append(name)
            else:
                unhandled = True
        return found

    return NameConstraints(subtrees(permitted), subtrees(excluded)), unhandled


def _ip_constraint(item: bytes) -> IPNetwork:
    """address + contiguous mask, 8 or 32 bytes."""
    if len(item) not in (8, 32):
        raise Malformed("IP constraint length")
    half = len(item) // 2
    mask = int.from_bytes(item[half:], "big")
    prefix = bin(mask).count("1")
    if mask != ((1 << (8 * half)) - 1) ^ ((1 << (8 * half - prefix)) - 1):
        raise Malformed("IP constraint mask")
    address = int.from_bytes(item[:half], "big") & mask
    if half == 4:
        return ipaddress.IPv4Network((address, prefix))
    return ipaddress.IPv6Network((address, prefix))


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


_ATEXT = frozenset("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ!#$%&'*+-/=?^_`{|}~.")


def _quoted_ok(code: int) -> bool:
    return code in (11, 12, 32, 33, 127) or 1 <= code <= 8 or 14 <= code <= 31 or 35 <= code <= 91 or 93 <= code <= 126


def _mailbox(address: str) -> tuple[str, str]:
    """Go's parseRFC2821Mailbox: (local part, domain); :class:`Malformed` where Go cannot parse it."""
    local: list[str] = []
    rest = address
    if rest.startswith('"'):
        rest = rest[1:]
        while True:
            if not rest:
                raise Malformed("mailbox")
            char, rest = rest[0], rest[1:]
            if char == '"':
                break
            if char == "\\":
                if not rest or not (rest[0] in "\x0b\x0c" or 1 <= ord(rest[0]) <= 9 or 14 <= ord(rest[0]) <= 127):
                    raise Malformed("mailbox")
                char, rest = rest[0], rest[1:]
            elif not _quoted_ok(ord(char)):
                raise Malformed("mailbox")
            local.append(char)
    else:
        while rest:
            char = rest[0]
            if char == "\\":  # an escaped character is taken whatever it is
                rest = rest[1:]
                if not rest:
                    raise Malformed("mailbox")
            elif char not in _ATEXT:
                break
            char = rest[0]
            local.append(char)
            rest = rest[1:]
        text = "".join(local)
        if not text or text[0] == "." or text[-1] == "." or ".." in text:
            raise Malformed("mailbox")
    if not rest.startswith("@"):
        raise Malformed("mailbox")
    domain = rest[1:]
    labels = domain.split(".") if domain else []
    if labels and (not labels[-1] or any(not label or any(not 33 <= ord(c) <= 126 for c in label) for label in labels)):
        raise Malformed("mailbox domain")
    return "".join(local), domain


_INT64 = 1 << 63


def _int64(value: int) -> int:
    if not -_INT64 <= value < _INT64:
        raise Malformed("integer beyond 64 bits")
    return value


def _extension(out: Extensions, oid: str, critical: bool, value: bytes) -> bool:
    """Read one extension into ``out``; True when Go leaves it unhandled."""
    reader = Reader(value)
    if oid == "2.5.29.15":
        bits, _ = reader.bit_string()
        usage = 0
        for i in range(9):
            if i // 8 < len(bits) and bits[i // 8] & (0x80 >> (i % 8)):
                usage |= 1 << i
        out.key_usage = usage
    elif oid == "2.5.29.19":
        body = reader.sub(der.SEQUENCE)
        is_ca = body.boolean() if body.peek() == der.BOOLEAN else False
        path_len = -1
        if body.peek() == der.INTEGER:
            path_len = body.integer()
            if not 0 <= path_len < _INT64:
                raise Malformed("basic constraints path length")
        out.basic_constraints_valid, out.is_ca, out.max_path_len = True, is_ca, path_len
    elif oid == _SAN:
        dns: list[str] = []
        emails: list[str] = []
        ips: list[bytes] = []
        uris: list[str] = []
        for tag, item in _general_names(reader.sub(der.SEQUENCE)):
            if tag == 1:
                emails.append(_ia5(item, "rfc822Name"))
            elif tag == 2:
                dns.append(_ia5(item, "dNSName"))
            elif tag == 6:
                uri = _ia5(item, "URI")
                host = uri_host(uri)
                if host and not domain_name_valid(host, False):
                    raise Malformed("URI host")
                uris.append(uri)
            elif tag == 7:
                if len(item) not in (4, 16):
                    raise Malformed("IP address length")
                ips.append(item)
        out.san, out.dns_names, out.emails = value, tuple(dns), tuple(emails)
        out.ips, out.uris = tuple(ips), tuple(uris)
        return not (dns or emails or ips or uris)
    elif oid == _NAME_CONSTRAINTS:
        constraints, unhandled = _name_constraints(value)
        out.name_constraints = constraints
        return unhandled
    elif oid == "2.5.29.31":
        points = reader.sub(der.SEQUENCE)
        while not points.empty():
            point = points.sub(der.SEQUENCE)
            if point.peek() != der.context(0, True):
                continue
            full_names = point.sub(der.context(0, True)).sub(der.context(0, True))
            while full_names.peek() == 0x86:
                full_names.read(0x86)
    elif oid == "2.5.29.35":
        if critical:
            raise Malformed("critical authority key identifier")
        body = reader.sub(der.SEQUENCE)
        out.authority_key_id = body.optional(0x80) or b""
    elif oid == "2.5.29.36":
        body = reader.sub(der.SEQUENCE)
        if body.peek() == 0x80:
            out.require_explicit_policy = _int64(body.integer(0x80))
        if body.peek() == 0x81:
            _int64(body.integer(0x81))
        out.policy_processing = True
    elif oid == "2.5.29.37":
        body = reader.sub(der.SEQUENCE)
        usages = []
        while not body.empty():
            usages.append(body.oid())
        out.ext_key_usages = tuple(usages)
    elif oid == "2.5.29.14":
        if critical:
            raise Malformed("critical subject key identifier")
        out.subject_key_id = reader.read(der.OCTET_STRING)
    elif oid == "2.5.29.32":
        body = reader.sub(der.SEQUENCE)
        seen = set()
        while not body.empty():
            policy = body.sub(der.SEQUENCE).any_oid()
            if policy in seen:
                raise Malformed("duplicate policy")
            seen.add(policy)
        out.has_policies = True
    elif oid == "2.5.29.33":
        body = reader.sub(der.SEQUENCE)
        while not body.empty():
            pair = body.sub(der.SEQUENCE)
            pair.read(der.OID)
            pair.read(der.OID)
        out.policy_processing = True
    elif oid == "2.5.29.54":
        _int64(reader.integer())
        out.policy_processing = True
    elif oid == _AIA:
        if critical:
            raise Malformed("critical authority information access")
        body = reader.sub(der.SEQUENCE)
        while not body.empty():
            access = body.sub(der.SEQUENCE)
            access.oid()
            if access.peek() == 0x86:
                access.read(0x86)
    else:
        return True
    return False


def parse_certificate(data: bytes) -> GoCertificate:
    """Read DER as Go's ``x509.ParseCertificate`` does; :class:`Malformed` where Go returns an error."""
    top = Reader(data)
    raw = top.element(der.SEQUENCE)
    top.done()
    outer = Reader(raw).sub(der.SEQUENCE)
    tbs_raw = outer.element(der.SEQUENCE)
    tbs = Reader(tbs_raw).sub(der.SEQUENCE)
    version = 0
    if tbs.peek() == der.context(0, True):
        wrapped = tbs.sub(der.context(0, True))
        version = wrapped.integer()
        wrapped.done()
    if not 0 <= version <= 2:
        raise Malformed("version")
    version += 1
    if tbs.integer() < 0:
        raise Malformed("negative serial number")
    inner_algorithm = tbs.read(der.SEQUENCE)
    if outer.read(der.SEQUENCE) != inner_algorithm:
        raise Malformed("inner and outer signature algorithms differ")
    algorithm = Reader(inner_algorithm)
    signature_oid = algorithm.oid()
    signature_params = algorithm.data[algorithm.pos :]
    raw_issuer = tbs.element(der.SEQUENCE)
    parse_name(raw_issuer)
    validity = tbs.sub(der.SEQUENCE)
    not_before, not_after = _time(validity), _time(validity)
    raw_subject = tbs.element(der.SEQUENCE)
    subject = parse_name(raw_subject)
    raw_spki = tbs.element(der.SEQUENCE)
    spki = Reader(raw_spki).sub(der.SEQUENCE)
    key_algorithm = spki.sub(der.SEQUENCE)
    key_oid = key_algorithm.oid()
    params_tag = key_algorithm.peek()
    key_params = None if params_tag is None else key_algorithm.element(params_tag)
    key_bits, _ = spki.bit_string()
    _check_key(key_oid, key_params, key_bits, raw_spki)
    fields = Extensions()
    if version > 1:
        tbs.optional(der.context(1))
        tbs.optional(der.context(2))
    if version == 3 and tbs.peek() == der.context(3, True):
        extensions = tbs.sub(der.context(3, True)).sub(der.SEQUENCE)
        seen: set[str] = set()
        while not extensions.empty():
            extension = extensions.sub(der.SEQUENCE)
            oid = extension.oid()
            critical = extension.boolean() if extension.peek() == der.BOOLEAN else False
            value = extension.read(der.OCTET_STRING)
            if oid in seen:
                raise Malformed(f"duplicate extension {oid}")
            seen.add(oid)
            fields.unhandled_critical |= _extension(fields, oid, critical, value) and critical
    signature, _ = outer.bit_string()
    return GoCertificate(
        raw=raw,
        tbs=tbs_raw,
        signature=signature,
        signature_oid=signature_oid,
        signature_params=signature_params,
        version=version,
        raw_issuer=raw_issuer,
        raw_subject=raw_subject,
        raw_spki=raw_spki,
        key_oid=key_oid,
        common_name=go_common_name(subject),
        not_before=not_before,
        not_after=not_after,
        ext=fields,
    )


# --- CA bundles (client-go's cert.ParseCertsPEM over Go's pem.Decode) ---------------------------------------

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


# --- verification (Go's Certificate.Verify with kube's options) ----------------------------------------------


class Pool:
    """Go's CertPool: certificates by raw subject, duplicates (same DER) dropped, insertion order kept."""

    def __init__(self, certificates: Sequence[GoCertificate] = ()) -> None:
        self.certificates: list[GoCertificate] = []
        for cert in certificates:
            if not self.contains(cert):
                self.certificates.append(cert)

    def contains(self, cert: GoCertificate) -> bool:
        return any(c.raw == cert.raw for c in self.certificates)

    def potential_parents(self, child: GoCertificate) -> list[GoCertificate]:
        """Same-name candidates, matching key identifiers first, then one-sided, then mismatched."""
        ranked: tuple[list[GoCertificate], list[GoCertificate], list[GoCertificate]] = ([], [], [])
        for cert in self.certificates:
            if cert.raw_subject != child.raw_issuer:
                continue
            skid, akid = cert.ext.subject_key_id, child.ext.authority_key_id
            rank = 0 if skid == akid else 1 if bool(skid) != bool(akid) else 2
            ranked[rank].append(cert)
        return [*ranked[0], *ranked[1], *ranked[2]]


@dataclass(frozen=True)
class Outcome:
    """What Verify returned: the chains found, or why there are none (``expired``, ``eku``, ``untrusted``)."""

    chains: tuple[tuple[GoCertificate, ...], ...] = ()
    failure: str = ""


def _valid_at(cert: GoCertificate, now: dt.datetime) -> bool:
    return cert.not_before <= now <= cert.not_after


def check_signature(child: GoCertificate, parent: GoCertificate) -> bool:
    """Go's CheckSignatureFrom (SHA-1 and MD5 refused, RSA keys below 1024 bits refused)."""
    ext = parent.ext
    if (parent.version == 3 and not ext.basic_constraints_valid) or (ext.basic_constraints_valid and not ext.is_ca):
        return False
    if ext.key_usage and not ext.key_usage & KEY_USAGE_CERT_SIGN:
        return False
    if parent.key_oid not in _KNOWN_KEYS:
        return False
    try:
        key = serialization.load_der_public_key(parent.raw_spki)
        if child.signature_oid == _RSA_PSS:
            hash_type = _pss_hash(child.signature_params)
            if not isinstance(key, rsa.RSAPublicKey) or key.key_size < 1024:
                return False
            algorithm = hash_type()
            pss = padding.PSS(mgf=padding.MGF1(algorithm), salt_length=algorithm.digest_size)
            key.verify(child.signature, child.tbs, pss, algorithm)
            return True
        key_oid, hash_class = _SIGNATURES[child.signature_oid]
        if key_oid == _RSA and isinstance(key, rsa.RSAPublicKey) and hash_class and key.key_size >= 1024:
            key.verify(child.signature, child.tbs, padding.PKCS1v15(), hash_class())
        elif key_oid == _EC and isinstance(key, ec.EllipticCurvePublicKey) and hash_class:
            key.verify(child.signature, child.tbs, ec.ECDSA(hash_class()))
        elif key_oid == _ED25519 and isinstance(key, ed25519.Ed25519PublicKey):
            key.verify(child.signature, child.tbs)
        else:
            return False
    except (KeyError, ValueError, InvalidSignature, UnsupportedAlgorithm):
        return False
    return True


def _pss_hash(params: bytes) -> type[hashes.HashAlgorithm]:
    """The hash of RSASSA-PSS parameters Go accepts: MGF1 with the same hash, salt = hash size, trailer 1."""
    body = Reader(params).sub(der.SEQUENCE)
    hash_oid = body.sub(der.context(0, True)).sub(der.SEQUENCE).oid()
    mgf = body.sub(der.context(1, True)).sub(der.SEQUENCE)
    if mgf.oid() != "1.2.840.113549.1.1.8" or mgf.sub(der.SEQUENCE).oid() != hash_oid:
        raise ValueError("PSS mask generation")
    hash_class = _HASHES[hash_oid]
    if body.sub(der.context(2, True)).integer() != hash_class().digest_size:
        raise ValueError("PSS salt length")
    if not body.empty() and body.sub(der.context(3, True)).integer() != 1:
        raise ValueError("PSS trailer")
    return hash_class


def _already_in_chain(candidate: GoCertificate, chain: Sequence[GoCertificate]) -> bool:
    return any(
        c.raw_subject == candidate.raw_subject and c.raw_spki == candidate.raw_spki and c.ext.san == candidate.ext.san
        for c in chain
    )


def _ca_valid(cert: GoCertificate, intermediate: bool, chain: Sequence[GoCertificate], now: dt.datetime) -> bool:
    """Go's isValid for a candidate parent."""
    ext = cert.ext
    if ext.unhandled_critical or not _valid_at(cert, now):
        return False
    if intermediate and not (ext.basic_constraints_valid and ext.is_ca):
        return False
    return not (ext.basic_constraints_valid and ext.max_path_len >= 0 and len(chain) - 1 > ext.max_path_len)


def _build(
    chain: tuple[GoCertificate, ...], roots: Pool, intermediates: Pool, now: dt.datetime, checks: list[int]
) -> list[tuple[GoCertificate, ...]]:
    found: list[tuple[GoCertificate, ...]] = []
    child = chain[-1]
    candidates = [(c, False) for c in roots.potential_parents(child)]
    candidates += [(c, True) for c in intermediates.potential_parents(child)]
    for candidate, intermediate in candidates:
        if candidate.key_oid not in _KNOWN_KEYS or _already_in_chain(candidate, chain):
            continue
        checks[0] += 1
        if checks[0] > MAX_SIGNATURE_CHECKS:
            continue
        if not check_signature(child, candidate) or not _ca_valid(candidate, intermediate, chain, now):
            continue
        if intermediate:
            found += _build((*chain, candidate), roots, intermediates, now, checks)
        else:
            found.append((*chain, candidate))
    return found


def _eku_allows_client(chain: Sequence[GoCertificate]) -> bool:
    """Go's checkChainForKeyUsage for [ClientAuth]: every certificate with an EKU list must allow it (or any)."""
    return all(
        not c.ext.ext_key_usages or EKU_ANY in c.ext.ext_key_usages or EKU_CLIENT_AUTH in c.ext.ext_key_usages
        for c in chain
    )


def _policies_valid(chain: Sequence[GoCertificate]) -> bool:
    """Go's policiesValid (RFC 5280 6.1 as updated by RFC 9618) with no user policy set. Mirrored exactly where no
    certificate below the root carries certificatePolicies (the valid-policy graph is then empty, and only the
    explicit-policy counter decides) or none carries policy constraints, mappings or inhibitAnyPolicy (nothing
    can then fail). The rest, policies together with those constraints, is refused: not mirrored."""
    below = chain[:-1]
    if not any(c.ext.policy_processing for c in below):
        return True
    if any(c.ext.has_policies for c in below):
        return False
    explicit = len(chain)  # n + 1, n = certificates below the trust anchor
    for index in range(len(below) - 1, -1, -1):
        cert = chain[index]
        if explicit == 0:
            return False
        if index:
            if cert.raw_issuer != cert.raw_subject and explicit:
                explicit -= 1
            required = cert.ext.require_explicit_policy
            if required is not None and required < explicit:
                explicit = required
    explicit = max(explicit - 1, 0)
    if chain[0].ext.require_explicit_policy == 0:
        explicit = 0
    return explicit != 0


def _dns_has_suffix(constraint: str, name: str) -> bool:
    """Go's dnsHasSuffix: ``name`` ends with ``constraint`` (ASCII case-insensitive) at a label boundary."""
    if len(constraint) > len(name) or not name.lower().endswith(constraint.lower()):
        return False
    return constraint.startswith(".") or len(name) == len(constraint) or name[-len(constraint) - 1] == "."


def _dns_match(constraints: list[str], name: str, permitted: bool) -> bool:
    if "" in constraints or any(_dns_has_suffix(c, name) for c in constraints):
        return True
    if not permitted and name.startswith("*") and "." in name:
        parent = name[name.find(".") :]
        return any("." in c and c[c.find(".") :] == parent for c in constraints)
    return False


def _email_match(constraints: list[str], address: str, permitted: bool) -> bool:
    local, domain = _mailbox(address)
    domains = []
    for constraint in constraints:
        if "@" not in constraint:
            domains.append(constraint)
            continue
        c_local, c_domain = _mailbox(constraint)
        if c_local == local and c_domain.lower() == domain.lower():
            return True
    return bool(domains) and _dns_match(domains, domain, permitted)


def _allowed(items: list[str], constraints: NameConstraints, kind: str) -> bool:
    for side, permitted in ((constraints.permitted, True), (constraints.excluded, False)):
        listed: list[str] = getattr(side, kind)
        if not listed:
            continue
        match = _email_match if kind == "email" else _dns_match
        if any(match(listed, item, permitted) != permitted for item in items):
            return False
    return True


def _ips_allowed(ips: Sequence[bytes], constraints: NameConstraints) -> bool:
    for side, permitted in ((constraints.permitted, True), (constraints.excluded, False)):
        if side.ip and any(any(ipaddress.ip_address(ip) in net for net in side.ip) != permitted for ip in ips):
            return False
    return True


def _names_allowed(ext: Extensions, constraints: NameConstraints) -> bool:
    """One certificate's SANs against one CA's constraints; a name Go cannot read refuses the chain."""
    hosts = [_constraint_host(uri) for uri in ext.uris]
    domains = []
    for address in ext.emails:
        try:
            domains.append(_mailbox(address)[1])
        except Malformed:
            return False
    readable = [*ext.dns_names, *domains]
    if not all(domain_name_valid(n, False) for n in readable) or not all(
        h is not None and domain_name_valid(h, False) for h in hosts
    ):
        return False
    return (
        _ips_allowed(ext.ips, constraints)
        and _allowed(list(ext.dns_names), constraints, "dns")
        and _allowed([h for h in hosts if h is not None], constraints, "uri")
        and _allowed(list(ext.emails), constraints, "email")
    )


def _constraints_hold(chain: Sequence[GoCertificate]) -> bool:
    """Go's checkChainConstraints: each certificate's SANs against the constraints of every CA above it."""
    for index, cert in enumerate(chain):
        if cert.ext.san is None:
            continue
        for above in chain[index + 1 :]:
            constraints = above.ext.name_constraints
            if constraints is not None and not _names_allowed(cert.ext, constraints):
                return False
    return True


def verify(leaf: GoCertificate, intermediates: Sequence[GoCertificate], roots: Pool, now: dt.datetime) -> Outcome:
    """Go's ``leaf.Verify`` with ``Roots=roots``, ``Intermediates`` the rest of the chain, ``KeyUsages=[ClientAuth]``
    and ``CurrentTime=now``."""
    if leaf.ext.unhandled_critical:
        return Outcome(failure="untrusted")
    if not _valid_at(leaf, now):
        return Outcome(failure="expired")
    candidates = [(leaf,)] if roots.contains(leaf) else _build((leaf,), roots, Pool(intermediates), now, [0])
    if not candidates:
        return Outcome(failure="untrusted")
    usable = [c for c in candidates if _policies_valid(c) and _eku_allows_client(c) and _constraints_hold(c)]
    if usable:
        return Outcome(tuple(usable))
    eku_only = any(_policies_valid(c) and not _eku_allows_client(c) for c in candidates)
    return Outcome(failure="eku" if eku_only else "untrusted")
