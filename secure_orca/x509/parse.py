"""Go's ``crypto/x509`` certificate parsing (``parser.go``, Go 1.26.0), mirrored (pure).

Reads certificates as ``x509.ParseCertificate`` does: strict DER (:mod:`secure_orca.x509.der`), the attribute string
types Go knows, the extensions Go parses (one handler per OID in ``_EXTENSIONS``) and the ones it leaves unhandled.
Written from reading that source, not translated from it; ``tests/x509oracle`` runs the real Go code on the same
corpus.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization

import secure_orca.x509.der as der
from secure_orca.x509.der import Malformed, Reader
from secure_orca.x509.url import uri_host

COMMON_NAME = "2.5.4.3"
EKU_ANY = "2.5.29.37.0"
EKU_CLIENT_AUTH = "1.3.6.1.5.5.7.3.2"
KEY_USAGE_CERT_SIGN = 1 << 5
OID_KEY_USAGE = "2.5.29.15"
OID_BASIC_CONSTRAINTS = "2.5.29.19"
OID_SUBJECT_ALT_NAME = "2.5.29.17"
OID_NAME_CONSTRAINTS = "2.5.29.30"
OID_CRL_DISTRIBUTION_POINTS = "2.5.29.31"
OID_AUTHORITY_KEY_ID = "2.5.29.35"
OID_POLICY_CONSTRAINTS = "2.5.29.36"
OID_EXT_KEY_USAGE = "2.5.29.37"
OID_SUBJECT_KEY_ID = "2.5.29.14"
OID_CERTIFICATE_POLICIES = "2.5.29.32"
OID_POLICY_MAPPINGS = "2.5.29.33"
OID_INHIBIT_ANY_POLICY = "2.5.29.54"
OID_AUTHORITY_INFO_ACCESS = "1.3.6.1.5.5.7.1.1"
KEY_RSA, KEY_EC, KEY_ED25519, KEY_X25519, KEY_DSA = (
    "1.2.840.113549.1.1.1",
    "1.2.840.10045.2.1",
    "1.3.101.112",
    "1.3.101.110",
    "1.2.840.10040.4.1",
)
_GO_CURVES = frozenset({"1.3.132.0.33", "1.2.840.10045.3.1.7", "1.3.132.0.34", "1.3.132.0.35"})

_PRINTABLE = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789'()+,-./:=? *&")


IPConstraint = tuple[bytes, bytes]  # (address, mask) as the extension holds them: Go does not mask the address


@dataclass
class Subtrees:
    """One side (permitted or excluded) of a name constraints extension, the forms Go enforces."""

    dns: list[str] = field(default_factory=list)
    uri: list[str] = field(default_factory=list)
    email: list[str] = field(default_factory=list)
    ip: list[IPConstraint] = field(default_factory=list)


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
    rsa: tuple[int, int] | None = None  # (modulus, public exponent) of an RSA key
    key_shifted: bool = False  # the key's BIT STRING declares unused bits: Go's key is not raw_spki's


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


def _check_key(key_oid: str, params: bytes | None, key: bytes, spki: bytes) -> tuple[int, int] | None:
    """Go's parsePublicKey: a key of an algorithm Go knows must parse, or the whole certificate is refused.
    ``params`` is the whole parameters element (None when absent), ``key`` the subjectPublicKey bits. Returns
    an RSA key's (modulus, exponent)."""
    if key_oid == KEY_RSA:
        if params != b"\x05\x00":
            raise Malformed("RSA key without NULL parameters")
        body = Reader(key).sub(der.SEQUENCE)
        modulus, exponent = body.integer(), body.integer()
        if modulus <= 0 or not 0 < exponent < 1 << 63:
            raise Malformed("RSA key")
        return modulus, exponent
    if key_oid in (KEY_ED25519, KEY_X25519):
        if params is not None or len(key) != 32:
            raise Malformed("Edwards/Montgomery key")
        return None
    if key_oid == KEY_EC:
        if params is None or Reader(params).oid() not in _GO_CURVES:
            raise Malformed("unsupported elliptic curve")
        if not key.startswith(b"\x04"):
            raise Malformed("EC point is not uncompressed")
    if key_oid in (KEY_EC, KEY_DSA):
        try:
            serialization.load_der_public_key(spki)
        except (ValueError, UnsupportedAlgorithm):
            raise Malformed("public key") from None
    return None


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
                if tag == 0x86 and is_ip(name):
                    raise Malformed("URI constraint is an IP address")
                if not domain_name_valid(name, True):
                    raise Malformed("DNS constraint")
                (found.dns if tag == 0x82 else found.uri).append(name)
            elif tag == 0x87:
                found.ip.append(_ip_constraint(item))
            elif tag == 0x81:
                name = _ia5(item, "constraint")
                if "@" in name:
                    mailbox(name)
                elif not domain_name_valid(name, True):
                    raise Malformed("email constraint")
                found.email.append(name)
            else:
                unhandled = True
        return found

    return NameConstraints(subtrees(permitted), subtrees(excluded)), unhandled


def _ip_constraint(item: bytes) -> IPConstraint:
    """Go's parseNameConstraintsExtension: address and contiguous mask, 8 or 32 bytes; the address is kept as
    written, bits beyond the mask included (parser.go, Go 1.26.0)."""
    if len(item) not in (8, 32):
        raise Malformed("IP constraint length")
    half = len(item) // 2
    mask = int.from_bytes(item[half:], "big")
    prefix = bin(mask).count("1")
    if mask != ((1 << (8 * half)) - 1) ^ ((1 << (8 * half - prefix)) - 1):
        raise Malformed("IP constraint mask")
    return item[:half], item[half:]


def is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


_ATEXT = frozenset("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ!#$%&'*+-/=?^_`{|}~.")


def _quoted_ok(code: int) -> bool:
    return code in (11, 12, 32, 33, 127) or 1 <= code <= 8 or 14 <= code <= 31 or 35 <= code <= 91 or 93 <= code <= 126


def mailbox(address: str) -> tuple[str, str]:
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


# Each handler reads one extension's value into the Extensions (``critical`` is the extension's flag) and returns
# True when Go leaves the extension unhandled (so a critical one refuses the certificate at verification).
_Handler = Callable[[Extensions, Reader, bool], bool]


def _key_usage(out: Extensions, reader: Reader, critical: bool) -> bool:
    bits, _ = reader.bit_string()
    usage = 0
    for i in range(9):
        if i // 8 < len(bits) and bits[i // 8] & (0x80 >> (i % 8)):
            usage |= 1 << i
    out.key_usage = usage
    return False


def _basic_constraints(out: Extensions, reader: Reader, critical: bool) -> bool:
    body = reader.sub(der.SEQUENCE)
    is_ca = body.boolean() if body.peek() == der.BOOLEAN else False
    path_len = -1
    if body.peek() == der.INTEGER:
        path_len = body.integer()
        if not 0 <= path_len < _INT64:
            raise Malformed("basic constraints path length")
    out.basic_constraints_valid, out.is_ca, out.max_path_len = True, is_ca, path_len
    return False


def _subject_alt_name(out: Extensions, reader: Reader, critical: bool) -> bool:
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
    out.san, out.dns_names, out.emails = reader.data, tuple(dns), tuple(emails)
    out.ips, out.uris = tuple(ips), tuple(uris)
    return not (dns or emails or ips or uris)


def _name_constraints_extension(out: Extensions, reader: Reader, critical: bool) -> bool:
    constraints, unhandled = _name_constraints(reader.data)
    out.name_constraints = constraints
    return unhandled


def _crl_distribution_points(out: Extensions, reader: Reader, critical: bool) -> bool:
    points = reader.sub(der.SEQUENCE)
    while not points.empty():
        point = points.sub(der.SEQUENCE)
        if point.peek() != der.context(0, True):
            continue
        full_names = point.sub(der.context(0, True)).sub(der.context(0, True))
        while full_names.peek() == 0x86:
            full_names.read(0x86)
    return False


def _authority_key_id(out: Extensions, reader: Reader, critical: bool) -> bool:
    if critical:
        raise Malformed("critical authority key identifier")
    body = reader.sub(der.SEQUENCE)
    out.authority_key_id = body.optional(0x80) or b""
    return False


def _policy_constraints(out: Extensions, reader: Reader, critical: bool) -> bool:
    body = reader.sub(der.SEQUENCE)
    if body.peek() == 0x80:
        out.require_explicit_policy = _int64(body.integer(0x80))
    if body.peek() == 0x81:
        _int64(body.integer(0x81))
    out.policy_processing = True
    return False


def _ext_key_usage(out: Extensions, reader: Reader, critical: bool) -> bool:
    body = reader.sub(der.SEQUENCE)
    usages = []
    while not body.empty():
        usages.append(body.oid())
    out.ext_key_usages = tuple(usages)
    return False


def _subject_key_id(out: Extensions, reader: Reader, critical: bool) -> bool:
    if critical:
        raise Malformed("critical subject key identifier")
    out.subject_key_id = reader.read(der.OCTET_STRING)
    return False


def _certificate_policies(out: Extensions, reader: Reader, critical: bool) -> bool:
    body = reader.sub(der.SEQUENCE)
    seen = set()
    while not body.empty():
        policy = body.sub(der.SEQUENCE).any_oid()
        if policy in seen:
            raise Malformed("duplicate policy")
        seen.add(policy)
    out.has_policies = True
    return False


def _policy_mappings(out: Extensions, reader: Reader, critical: bool) -> bool:
    body = reader.sub(der.SEQUENCE)
    while not body.empty():
        pair = body.sub(der.SEQUENCE)
        pair.read(der.OID)
        pair.read(der.OID)
    out.policy_processing = True
    return False


def _inhibit_any_policy(out: Extensions, reader: Reader, critical: bool) -> bool:
    _int64(reader.integer())
    out.policy_processing = True
    return False


def _authority_info_access(out: Extensions, reader: Reader, critical: bool) -> bool:
    if critical:
        raise Malformed("critical authority information access")
    body = reader.sub(der.SEQUENCE)
    while not body.empty():
        access = body.sub(der.SEQUENCE)
        access.oid()
        if access.peek() == 0x86:
            access.read(0x86)
    return False


# The extensions Go's processExtensions handles; any other is unhandled.
_EXTENSIONS: dict[str, _Handler] = {
    OID_KEY_USAGE: _key_usage,
    OID_BASIC_CONSTRAINTS: _basic_constraints,
    OID_SUBJECT_ALT_NAME: _subject_alt_name,
    OID_NAME_CONSTRAINTS: _name_constraints_extension,
    OID_CRL_DISTRIBUTION_POINTS: _crl_distribution_points,
    OID_AUTHORITY_KEY_ID: _authority_key_id,
    OID_POLICY_CONSTRAINTS: _policy_constraints,
    OID_EXT_KEY_USAGE: _ext_key_usage,
    OID_SUBJECT_KEY_ID: _subject_key_id,
    OID_CERTIFICATE_POLICIES: _certificate_policies,
    OID_POLICY_MAPPINGS: _policy_mappings,
    OID_INHIBIT_ANY_POLICY: _inhibit_any_policy,
    OID_AUTHORITY_INFO_ACCESS: _authority_info_access,
}


def _extension(out: Extensions, oid: str, critical: bool, value: bytes) -> bool:
    """Read one extension into ``out``; True when Go leaves it unhandled."""
    handler = _EXTENSIONS.get(oid)
    return True if handler is None else handler(out, Reader(value), critical)


def _right_align(bits: bytes, unused: int) -> bytes:
    """Go's asn1.BitString.RightAlign: the bits shifted right over the unused ones, same length."""
    if not unused:
        return bits
    return (int.from_bytes(bits, "big") >> unused).to_bytes(len(bits), "big")


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
    key_bits, key_unused = spki.bit_string()
    key_bits = _right_align(key_bits, key_unused)
    rsa_key = _check_key(key_oid, key_params, key_bits, raw_spki)
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
    signature, unused = outer.bit_string()
    signature = _right_align(signature, unused)
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
        rsa=rsa_key,
        key_shifted=bool(key_unused),
    )
