"""The differential corpus: named front-proxy cases (CA bundle, presented chain, allowed names, time) covering
every field kube-apiserver's decision reads. Generated fresh in memory on every run (a second or two); keys never
touch the repository.

Ordinary certificates come from trustme (an issuer we did not write); shapes trustme cannot make are built with
``cryptography``; shapes ``cryptography`` refuses to build are made by editing the DER of a to-be-signed
certificate and signing it again (:func:`resign`).
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trustme
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa, x25519
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from secure_orca.x509 import der
from secure_orca.x509.der import Reader

ALLOWED = "front-proxy-client"
NOW = dt.datetime.now(dt.UTC).replace(microsecond=0)
DAY = dt.timedelta(days=1)
CLIENT = ExtendedKeyUsageOID.CLIENT_AUTH
SERVER = ExtendedKeyUsageOID.SERVER_AUTH
Key = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey | ed25519.Ed25519PrivateKey


@dataclass(frozen=True)
class Case:
    """One front-proxy decision: what kube-apiserver would be configured with and what the client presents."""

    name: str
    category: str
    bundle: bytes  # the requestheader CA file (PEM)
    chain: tuple[bytes, ...]  # DER, leaf first, as presented in the handshake
    names: tuple[str, ...] = (ALLOWED,)
    at: dt.datetime = NOW
    key: bytes | None = None  # the leaf's private key (PEM), for the handshake column


@dataclass(frozen=True)
class Node:
    """A certificate (DER) and its private key."""

    der: bytes
    key: Key

    @property
    def cert(self) -> x509.Certificate:
        return x509.load_der_x509_certificate(self.der)

    def key_pem(self) -> bytes:
        return self.key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )


# --- DER helpers ---------------------------------------------------------------------------------------------


def tlv(tag: int, content: bytes) -> bytes:
    size = len(content)
    if size < 0x80:
        return bytes([tag, size]) + content
    raw = size.to_bytes((size.bit_length() + 7) // 8, "big")
    return bytes([tag, 0x80 | len(raw)]) + raw + content


def _encode_oid(dotted: str) -> bytes:
    arcs = [int(a) for a in dotted.split(".")]
    body = bytearray()
    for arc in [40 * arcs[0] + arcs[1], *arcs[2:]]:
        chunk = [arc & 0x7F]
        arc >>= 7
        while arc:
            chunk.append(0x80 | (arc & 0x7F))
            arc >>= 7
        body += bytes(reversed(chunk))
    return tlv(der.OID, bytes(body))


def name_der(*attributes: tuple[str, int, bytes], multi: bool = False) -> bytes:
    """A Name from (type OID, string tag, value); ``multi`` puts all attributes in one RDN."""
    atvs = [tlv(der.SEQUENCE, _encode_oid(oid) + tlv(tag, value)) for oid, tag, value in attributes]
    rdns = [tlv(der.SET, b"".join(atvs))] if multi else [tlv(der.SET, atv) for atv in atvs]
    return tlv(der.SEQUENCE, b"".join(rdns))


def cn(value: bytes | str, tag: int = der.UTF8_STRING) -> tuple[str, int, bytes]:
    return ("2.5.4.3", tag, value.encode() if isinstance(value, str) else value)


def extension_der(oid: str, value: bytes, critical: bool = False) -> bytes:
    flag = tlv(der.BOOLEAN, b"\xff") if critical else b""
    return tlv(der.SEQUENCE, _encode_oid(oid) + flag + tlv(der.OCTET_STRING, value))


def _elements(content: bytes) -> list[bytes]:
    reader = Reader(content)
    out = []
    while not reader.empty():
        tag = reader.peek()
        assert tag is not None
        out.append(reader.element(tag))
    return out


def _split(cert_der: bytes) -> tuple[bytes, bytes, bytes]:
    outer = Reader(cert_der).sub(der.SEQUENCE)
    return outer.element(der.SEQUENCE), outer.element(der.SEQUENCE), outer.element(der.BIT_STRING)


def _sign(key: Key, data: bytes, digest: hashes.HashAlgorithm, pss: bool = False) -> bytes:
    if isinstance(key, ec.EllipticCurvePrivateKey):
        return key.sign(data, ec.ECDSA(digest))
    if isinstance(key, rsa.RSAPrivateKey) and pss:
        return key.sign(data, padding.PSS(padding.MGF1(digest), digest.digest_size), digest)
    if isinstance(key, rsa.RSAPrivateKey):
        return key.sign(data, padding.PKCS1v15(), digest)
    return key.sign(data)


TbsEdit = Callable[[list[bytes]], list[bytes]]


def resign(
    node: Node,
    issuer_key: Key,
    edit: TbsEdit,
    algorithm: bytes | None = None,
    digest: hashes.HashAlgorithm | None = None,
    pss: bool = False,
) -> Node:
    """Edit the to-be-signed fields (a list of DER elements) and sign again with ``issuer_key`` (SHA-256 unless
    ``digest``; ``algorithm`` replaces the declared signature algorithm in both places)."""
    tbs, outer_algorithm, _ = _split(node.der)
    fields = edit(_elements(Reader(tbs).read(der.SEQUENCE)))
    if algorithm is not None:
        fields[2] = algorithm
    new_tbs = tlv(der.SEQUENCE, b"".join(fields))
    signature = tlv(der.BIT_STRING, b"\x00" + _sign(issuer_key, new_tbs, digest or hashes.SHA256(), pss))
    return Node(tlv(der.SEQUENCE, new_tbs + (algorithm or outer_algorithm) + signature), node.key)


# indexes of a v3 TBSCertificate's fields
VERSION, SERIAL, SIGALG, ISSUER, VALIDITY, SUBJECT, SPKI = range(7)


def with_signature(node: Node, algorithm: bytes, signature: bytes) -> Node:
    """``node`` declaring ``algorithm`` (in both places) with ``signature`` as its signature value, unsigned:
    the shape of a certificate whose check runs a public-key operation of the signature's size and fails."""
    tbs, _, _ = _split(node.der)
    fields = _elements(Reader(tbs).read(der.SEQUENCE))
    fields[SIGALG] = algorithm
    new_tbs = tlv(der.SEQUENCE, b"".join(fields))
    return Node(tlv(der.SEQUENCE, new_tbs + algorithm + tlv(der.BIT_STRING, b"\x00" + signature)), node.key)


def add_extension(raw: bytes) -> TbsEdit:
    def edit(fields: list[bytes]) -> list[bytes]:
        wrapper = fields[-1]
        extensions = _elements(Reader(Reader(wrapper).read(der.context(3, True))).read(der.SEQUENCE))
        fields[-1] = tlv(der.context(3, True), tlv(der.SEQUENCE, b"".join([*extensions, raw])))
        return fields

    return edit


def extended(node: Node, signer: Key, oid: str, value: bytes, critical: bool = False) -> Node:
    """``node`` with one more extension (raw value), signed again by ``signer``."""
    return resign(node, signer, add_extension(extension_der(oid, value, critical)))


def set_field(index: int, value: bytes) -> TbsEdit:
    def edit(fields: list[bytes]) -> list[bytes]:
        fields[index] = value
        return fields

    return edit


def to_v1(fields: list[bytes]) -> list[bytes]:
    """Drop the version (v1) and the extensions."""
    return fields[1:-1]


def pem(*ders: bytes, kind: str = "CERTIFICATE", headers: str = "") -> bytes:
    out = b""
    for item in ders:
        body = base64.encodebytes(item).decode().replace("\n", "")
        lines = "\n".join(body[i : i + 64] for i in range(0, len(body), 64))
        out += f"-----BEGIN {kind}-----\n{headers}{lines}\n-----END {kind}-----\n".encode()
    return out


# --- certificates ----------------------------------------------------------------------------------------------


def ec_key(curve: ec.EllipticCurve | None = None) -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(curve or ec.SECP256R1())


_KU_CA = x509.KeyUsage(True, False, False, False, False, True, True, False, False)
_KU_LEAF = x509.KeyUsage(True, False, False, False, False, False, False, False, False)
_DEFAULT = object()


def make(
    subject: str | x509.Name,
    issuer: Node | None = None,
    *,
    ca: bool = False,
    key: Key | None = None,
    path_length: int | None = None,
    basic_constraints: bool | None = True,  # True: critical, False: non-critical, None: absent
    key_usage: x509.KeyUsage | object | None = _DEFAULT,
    eku: Sequence[x509.ObjectIdentifier] | object | None = _DEFAULT,  # leaves: clientAuth; CAs: none
    eku_critical: bool = False,
    san: Sequence[x509.GeneralName] = (),
    constraints: x509.NameConstraints | None = None,
    constraints_critical: bool = True,
    not_before: dt.datetime | None = None,
    not_after: dt.datetime | None = None,
    hash_algorithm: hashes.SHA256 | hashes.SHA384 | hashes.SHA512 | None = None,  # what x509 signing accepts
    serial: int | None = None,
    rsa_pss: bool = False,
    key_ids: bool = True,
) -> Node:
    """One certificate; ``issuer=None`` is self-signed. CAs get no EKU unless asked for."""
    key = key or ec_key()
    name = subject if isinstance(subject, x509.Name) else x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    issuer_name = issuer.cert.subject if issuer else name
    signer = issuer.key if issuer else key
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(serial if serial is not None else x509.random_serial_number())
        .not_valid_before(not_before or NOW - DAY)
        .not_valid_after(not_after or NOW + 30 * DAY)
    )
    if basic_constraints is not None:
        builder = builder.add_extension(x509.BasicConstraints(ca, path_length), critical=basic_constraints)
    usage = (_KU_CA if ca else _KU_LEAF) if key_usage is _DEFAULT else key_usage
    if isinstance(usage, x509.KeyUsage):
        builder = builder.add_extension(usage, critical=True)
    usages = (None if ca else (CLIENT,)) if eku is _DEFAULT else eku
    if isinstance(usages, (tuple, list)):
        builder = builder.add_extension(x509.ExtendedKeyUsage(list(usages)), critical=eku_critical)
    if san:
        builder = builder.add_extension(x509.SubjectAlternativeName(list(san)), critical=False)
    if constraints is not None:
        builder = builder.add_extension(constraints, critical=constraints_critical)
    if key_ids:
        builder = builder.add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        if issuer:
            aki = x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer.key.public_key())
            builder = builder.add_extension(aki, critical=False)
    if isinstance(signer, ed25519.Ed25519PrivateKey):
        cert = builder.sign(signer, None)
    elif rsa_pss and isinstance(signer, rsa.RSAPrivateKey):
        pss = padding.PSS(mgf=padding.MGF1(hashes.SHA256()), salt_length=32)
        cert = builder.sign(signer, hashes.SHA256(), rsa_padding=pss)
    else:
        cert = builder.sign(signer, hash_algorithm or hashes.SHA256())
    return Node(cert.public_bytes(serialization.Encoding.DER), key)


def rsa_key_with_exponent(exponent: int, bits: int = 2048) -> rsa.RSAPrivateKey:
    """An RSA key with any odd public exponent (cryptography generates only 3 and 65537)."""
    while True:
        base = rsa.generate_private_key(65537, bits).private_numbers()
        p, q = base.p, base.q
        order = math.lcm(p - 1, q - 1)
        if math.gcd(exponent, order) == 1:
            break
    d = pow(exponent, -1, order)
    public = rsa.RSAPublicNumbers(exponent, p * q)
    return rsa.RSAPrivateNumbers(p, q, d, d % (p - 1), d % (q - 1), pow(q, -1, p), public).private_key()


def rsa_public_key_info(modulus: int, exponent: int) -> bytes:
    """A SubjectPublicKeyInfo for any RSA modulus and exponent (no private key needed)."""
    raw_key = tlv(der.SEQUENCE, _integer(modulus) + _integer(exponent))
    return tlv(der.SEQUENCE, algorithm_der_null("1.2.840.113549.1.1.1") + tlv(der.BIT_STRING, b"\0" + raw_key))


GO_MAX_EXPONENT = (1 << 31) - 1  # crypto/internal/fips140/rsa checkPublicKey
PRIME_ABOVE_GO_MAX = 2147483659  # the first prime above 2^31
LARGEST_PRIME_BELOW_2_63 = (1 << 63) - 25


def root(name: str = "requestheader-ca", **options: Any) -> Node:
    return make(name, ca=True, **options)


def leaf(issuer: Node, name: str = ALLOWED, **options: Any) -> Node:
    return make(name, issuer, **options)


def utc_time(when: dt.datetime) -> bytes:
    if 1950 <= when.year < 2050:
        return tlv(0x17, when.strftime("%y%m%d%H%M%SZ").encode())
    return tlv(0x18, when.strftime("%Y%m%d%H%M%SZ").encode())


def algorithm_der(dotted: str) -> bytes:
    return tlv(der.SEQUENCE, _encode_oid(dotted))


def algorithm_der_null(dotted: str) -> bytes:
    return tlv(der.SEQUENCE, _encode_oid(dotted) + tlv(0x05, b""))


def _integer(value: int) -> bytes:
    return tlv(der.INTEGER, value.to_bytes(value.bit_length() // 8 + 1, "big", signed=True))


def _from_pem(blob: bytes) -> bytes:
    return x509.load_pem_x509_certificate(blob).public_bytes(serialization.Encoding.DER)


def _trustme_key(blob: bytes) -> Key:
    key = serialization.load_pem_private_key(blob, password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey)
    return key


def _trustme_ca(ca: trustme.CA) -> Node:
    return Node(_from_pem(ca.cert_pem.bytes()), _trustme_key(ca.private_key_pem.bytes()))


def _trustme_chain(issued: trustme.LeafCert) -> list[Node | bytes]:
    first, *rest = (_from_pem(p.bytes()) for p in issued.cert_chain_pems)
    return [Node(first, _trustme_key(issued.private_key_pem.bytes())), *rest]


@dataclass
class Corpus:
    cases: list[Case] = field(default_factory=list)

    def add(
        self,
        name: str,
        bundle: Sequence[Node] | bytes,
        chain: Sequence[Node | bytes],
        names: Sequence[str] = (ALLOWED,),
        at: dt.datetime = NOW,
    ) -> None:
        bundle_pem = bundle if isinstance(bundle, bytes) else pem(*(n.der for n in bundle))
        ders = tuple(c.der if isinstance(c, Node) else c for c in chain)
        first = chain[0] if chain else None
        key = first.key_pem() if isinstance(first, Node) else None
        category = name.split("/", 1)[0]
        self.cases.append(Case(name, category, bundle_pem, ders, tuple(names), at, key))


URI_SANS = (
    b"spiffe://cluster.local/ns/default/sa/proxy",
    b"http://%zz/",
    b"http://exa%41mple.com/",
    b"http://a b/",
    b"http://[::1/",
    b"1http://x/",
    b"http://x:99999/",
    b"http://x:port/",
    b"urn:example:proxy",
    b"http://user@host.example/p?q#f",
    b"http://x/%zz",
    b"http://x/\x7f",
    b"//host.example/path",
    b"",
    b"http://[::1]:8443/",
    b"http://[10.0.0.1]/",
    b"http://[fe80::1%25eth0]/",
    b"http://x:1:2/",
    b"http://us er@x/",
    b"http://u%zz@x/",
    b"http://x/#%zz",
    b"http://x/?%zz",
    b"http://%C3%A9.example/",
    b"http://x%25y/",
    b"http://a{b}/",
    b":nothing",
    b"path:with/colon",
    b"x?y:z",
)


def _trustme_cases(c: Corpus) -> None:
    ca = trustme.CA()
    root_node = _trustme_ca(ca)
    c.add("trustme/leaf-allowed-cn", [root_node], _trustme_chain(ca.issue_cert("proxy.example", common_name=ALLOWED)))
    c.add("trustme/leaf-other-cn", [root_node], _trustme_chain(ca.issue_cert("proxy.example", common_name="other")))
    c.add("trustme/any-name", [root_node], _trustme_chain(ca.issue_cert("proxy.example")), names=())
    child = ca.create_child_ca()
    via = _trustme_chain(child.issue_cert("proxy.example", common_name=ALLOWED))
    c.add("trustme/intermediate", [root_node], via)
    c.add("trustme/intermediate-not-sent", [root_node], via[:1])
    c.add("trustme/intermediate-as-anchor", [_trustme_ca(child)], via[:1])
    other = trustme.CA()
    c.add("trustme/other-ca", [root_node], _trustme_chain(other.issue_cert("proxy.example", common_name=ALLOWED)))
    expired = ca.issue_cert("proxy.example", common_name=ALLOWED, not_before=NOW - 3 * DAY, not_after=NOW - DAY)
    c.add("trustme/expired", [root_node], _trustme_chain(expired))
    rsa_ca = trustme.CA(key_type=trustme.KeyType.RSA)
    rsa_leaf = rsa_ca.issue_cert("proxy.example", common_name=ALLOWED, key_type=trustme.KeyType.RSA)
    c.add("trustme/rsa", [_trustme_ca(rsa_ca)], _trustme_chain(rsa_leaf))


def _name_cases(c: Corpus) -> None:
    ca = root()

    def named(name: str, subject: bytes, names: Sequence[str] = (ALLOWED,), **options: object) -> None:
        base = leaf(ca, "placeholder", **options)
        c.add(f"names/{name}", [ca], [resign(base, ca.key, set_field(SUBJECT, subject))], names)

    u, p = der.UTF8_STRING, der.PRINTABLE_STRING
    org = ("2.5.4.10", u, b"proxies")
    named("cn-utf8", name_der(cn(ALLOWED)))
    named("cn-printable", name_der(cn(ALLOWED, p)))
    named("cn-t61", name_der(cn(ALLOWED, der.T61_STRING)))
    named("cn-ia5", name_der(cn(ALLOWED, der.IA5_STRING)))
    named("cn-bmp", name_der(cn(ALLOWED.encode("utf-16-be"), der.BMP_STRING)))
    named("cn-bmp-trailing-nul", name_der(cn(ALLOWED.encode("utf-16-be") + b"\0\0", der.BMP_STRING)))
    named("cn-bmp-surrogate", name_der(cn(b"\xd8\x00\x00a", der.BMP_STRING)))
    named("cn-universalstring", name_der(cn(ALLOWED.encode("utf-32-be"), 0x1C)))
    named("cn-visiblestring", name_der(cn(ALLOWED, 0x1A)))
    named("cn-numeric", name_der(cn("12345", der.NUMERIC_STRING)), names=("12345",))
    named("cn-numeric-invalid", name_der(cn("12a45", der.NUMERIC_STRING)), names=())
    named("cn-printable-invalid-char", name_der(cn("front_proxy_client", p)), names=())
    named("cn-printable-star-amp", name_der(cn("proxy*&", p)), names=("proxy*&",))
    named("cn-utf8-invalid", name_der(cn(b"front-proxy-\xff")), names=())
    named("cn-t61-latin1", name_der(cn(b"pr\xf8xy", der.T61_STRING)), names=("prøxy",))
    named("cn-utf8-unicode", name_der(cn("prøxy")), names=("prøxy",))
    named("two-cn-first-allowed", name_der(cn(ALLOWED), cn("intruder")))
    named("two-cn-last-allowed", name_der(cn("intruder"), cn(ALLOWED)))
    named("two-cn-one-rdn-first-allowed", name_der(cn(ALLOWED), cn("intruder"), multi=True))
    named("two-cn-one-rdn-last-allowed", name_der(cn("intruder"), cn(ALLOWED), multi=True))
    named("two-cn-mixed-types-last-allowed", name_der(cn("intruder", p), cn(ALLOWED.encode("utf-16-be"), 0x1E)))
    named("case-differs", name_der(cn("Front-Proxy-Client")))
    named("trailing-space", name_der(cn(ALLOWED + " ")))
    named("leading-space", name_der(cn(" " + ALLOWED)))
    named("embedded-nul", name_der(cn(ALLOWED + "\0evil")))
    named("cn-then-org", name_der(cn(ALLOWED), org))
    named("attribute-type-oid-arc-2-31", name_der(cn(ALLOWED), ("1.3.6.1.4.1.2147483648", u, b"x")))
    named("attribute-type-oid-arc-2-31-minus-1", name_der(cn(ALLOWED), ("1.3.6.1.4.1.2147483647", u, b"x")))
    named("org-then-cn", name_der(org, cn(ALLOWED)))
    named("org-only", name_der(("2.5.4.10", u, ALLOWED.encode())))
    named("empty-cn", name_der(cn("")))
    named("empty-cn-any-name", name_der(cn("")), names=())
    named("empty-subject-any-name", name_der(), names=())
    san = (x509.DNSName(ALLOWED),)
    named("san-only", name_der(org), san=san)
    named("san-only-any-name", name_der(org), names=(), san=san)
    named("san-differs-cn-allowed", name_der(cn(ALLOWED)), san=(x509.DNSName("other.example"),))


def _eku_cases(c: Corpus) -> None:
    ca = root()
    unknown = x509.ObjectIdentifier("1.3.6.1.4.1.55555.1")
    any_eku = ExtendedKeyUsageOID.ANY_EXTENDED_KEY_USAGE
    c.add("eku/leaf-client", [ca], [leaf(ca)])
    c.add("eku/leaf-server-only", [ca], [leaf(ca, eku=(SERVER,))])
    c.add("eku/leaf-none", [ca], [leaf(ca, eku=None)])
    c.add("eku/leaf-any", [ca], [leaf(ca, eku=(any_eku,))])
    c.add("eku/leaf-unknown-only", [ca], [leaf(ca, eku=(unknown,))])
    c.add("eku/leaf-client-and-unknown", [ca], [leaf(ca, eku=(unknown, CLIENT))])
    c.add("eku/leaf-critical", [ca], [leaf(ca, eku_critical=True)])
    empty = extended(leaf(ca, eku=None), ca.key, "2.5.29.37", tlv(der.SEQUENCE, b""))
    c.add("eku/leaf-empty-list", [ca], [empty])
    big_arc = _encode_oid("1.3.6.1.4.1.2147483648")  # an arc of 2**31: past what cryptobyte reads
    client_and_big = tlv(der.SEQUENCE, _encode_oid("1.3.6.1.5.5.7.3.2") + big_arc)
    c.add("eku/leaf-client-and-oid-arc-2-31", [ca], [extended(leaf(ca, eku=None), ca.key, "2.5.29.37", client_and_big)])
    bad = extended(leaf(ca, eku=None), ca.key, "2.5.29.37", b"\x30\x03\x06\x01")
    c.add("eku/leaf-malformed", [ca], [bad])
    for label, usages in (("server-only", (SERVER,)), ("client", (CLIENT,)), ("any", (any_eku,)), ("none", None)):
        mid = make("intermediate", ca, ca=True, eku=usages)
        c.add(f"eku/intermediate-{label}", [ca], [leaf(mid), mid])
    for label, usages in (("server-only", (SERVER,)), ("client", (CLIENT,))):
        eku_root = root(eku=usages)
        c.add(f"eku/root-{label}", [eku_root], [leaf(eku_root)])


def raw_constraints(permitted: Sequence[bytes] = (), excluded: Sequence[bytes] = ()) -> bytes:
    """A NameConstraints value from raw GeneralNames (cryptography refuses unmasked IP networks)."""
    body = b""
    for tag, names in ((0xA0, permitted), (0xA1, excluded)):
        if names:
            body += tlv(tag, b"".join(tlv(der.SEQUENCE, name) for name in names))
    return tlv(der.SEQUENCE, body)


def ip_constraint(address: str, mask: str) -> bytes:
    return tlv(0x87, ipaddress.ip_address(address).packed + ipaddress.ip_address(mask).packed)


def with_constraints(value: bytes) -> Node:
    """A root whose critical NameConstraints extension is ``value`` (raw DER)."""
    base = root("constrained-ca")
    return extended(base, base.key, "2.5.29.30", value, True)


def with_san(issuer: Node, *names: bytes) -> Node:
    """A leaf of ``issuer`` with these raw GeneralNames as its SAN."""
    return extended(leaf(issuer), issuer.key, "2.5.29.17", tlv(der.SEQUENCE, b"".join(names)))


def ip(address: str) -> bytes:
    """An iPAddress GeneralName."""
    return tlv(0x87, ipaddress.ip_address(address).packed)


def _go_126_constraint_cases(c: Corpus) -> None:
    """Go 1.26's constraints.go (sorted, pruned sets searched by lower bound) where it differs from "any
    constraint matches"."""

    wide, narrow = ip_constraint("10.9.9.9", "255.0.0.0"), ip_constraint("10.5.0.0", "255.255.0.0")
    for side, value in (
        ("permitted", raw_constraints([wide, narrow])),
        ("excluded", raw_constraints((), [wide, narrow])),
    ):
        ca = with_constraints(value)
        c.add(f"constraints/ip-unmasked-{side}-in-wide", [ca], [with_san(ca, ip("10.7.0.1"))])
        c.add(f"constraints/ip-unmasked-{side}-in-narrow", [ca], [with_san(ca, ip("10.5.1.1"))])
        c.add(f"constraints/ip-unmasked-{side}-above-wide-ip", [ca], [with_san(ca, ip("10.9.9.10"))])
    single = with_constraints(raw_constraints([ip_constraint("10.0.0.5", "255.0.0.0")]))
    c.add("constraints/ip-unmasked-single", [single], [with_san(single, ip("10.0.0.1"))])
    mapped = with_constraints(
        raw_constraints([ip_constraint("::ffff:10.0.0.0", "ffff:ffff:ffff:ffff:ffff:ffff:ff00:0")])
    )
    c.add("constraints/ip-v4-mapped-constraint-v4-san", [mapped], [with_san(mapped, ip("10.1.2.3"))])
    c.add("constraints/ip-v4-mapped-constraint-v6-san", [mapped], [with_san(mapped, ip("::ffff:10.1.2.3"))])
    c.add("constraints/ip-v4-mapped-constraint-other-v6", [mapped], [with_san(mapped, ip("2001:db8::1"))])
    emails = with_constraints(raw_constraints([tlv(0x81, b"a@x.example"), tlv(0x81, b"a@y.example")]))
    c.add("constraints/email-same-local-part-first", [emails], [with_san(emails, tlv(0x81, b"a@x.example"))])
    c.add("constraints/email-same-local-part-last", [emails], [with_san(emails, tlv(0x81, b"a@y.example"))])
    for side, value in (
        ("permitted", raw_constraints([tlv(0x82, b"example.com")])),
        ("excluded", raw_constraints((), [tlv(0x82, b"example.com")])),
    ):
        ca = with_constraints(value)
        c.add(f"constraints/dns-empty-name-{side}", [ca], [with_san(ca, tlv(0x82, b""))])
    excluded_mail = with_constraints(raw_constraints((), [tlv(0x81, b"example.com")]))
    c.add("constraints/email-empty-domain-excluded", [excluded_mail], [with_san(excluded_mail, tlv(0x81, b"a@"))])
    dns_sets = (
        ("dns-sorted-dash", [b"a.com", b"a.a.com", b"a-a.com"], b"x.a-a.com"),
        ("dns-leading-dot-and-bare", [b".example.com", b"example.com"], b"example.com"),
        ("dns-upper-case", [b"EXAMPLE.com", b"z.org"], b"proxy.example.COM"),
    )
    for label, names, san in dns_sets:
        ca = with_constraints(raw_constraints([tlv(0x82, n) for n in names]))
        c.add(f"constraints/{label}", [ca], [with_san(ca, tlv(0x82, san))])
        ca = with_constraints(raw_constraints((), [tlv(0x82, n) for n in names]))
        c.add(f"constraints/{label}-excluded", [ca], [with_san(ca, tlv(0x82, san))])


def _constraint_cases(c: Corpus) -> None:
    ca = root()
    sign_only = x509.KeyUsage(True, False, False, False, False, False, False, False, False)
    c.add("basic/root-no-keyusage", [r := root(key_usage=None)], [leaf(r)])
    c.add("basic/root-keyusage-without-certsign", [r := root(key_usage=sign_only)], [leaf(r)])
    c.add("basic/root-no-basic-constraints", [r := root(basic_constraints=None)], [leaf(r)])
    r = make("requestheader-ca", ca=False, key_usage=_KU_CA, eku=None)
    c.add("basic/root-ca-false", [r], [leaf(r)])
    no_usage = root(key_usage=None)
    empty_usage = extended(no_usage, no_usage.key, "2.5.29.15", tlv(der.BIT_STRING, b"\x00"), True)
    c.add("basic/root-keyusage-empty", [empty_usage], [leaf(no_usage)])
    c.add("basic/root-basic-constraints-noncritical", [r := root(basic_constraints=False)], [leaf(r)])
    options: dict[str, Any]
    for label, options in (
        ("no-basic-constraints", {"basic_constraints": None}),
        ("ca-false", {"ca": False, "key_usage": _KU_CA, "eku": None}),
        ("no-keyusage", {"key_usage": None}),
        ("keyusage-without-certsign", {"key_usage": sign_only}),
    ):
        mid = make("intermediate", ca, **{"ca": True} | options)
        c.add(f"basic/intermediate-{label}", [ca], [leaf(mid), mid])
    zero = root(path_length=0)
    c.add("basic/root-pathlen0-direct-leaf", [zero], [leaf(zero)])
    mid = make("intermediate", zero, ca=True)
    c.add("basic/root-pathlen0-one-intermediate", [zero], [leaf(mid), mid])
    one = root(path_length=1)
    mid1 = make("intermediate", one, ca=True)
    c.add("basic/root-pathlen1-one-intermediate", [one], [leaf(mid1), mid1])
    mid2 = make("intermediate-2", mid1, ca=True)
    c.add("basic/root-pathlen1-two-intermediates", [one], [leaf(mid2), mid2, mid1])
    top = make("intermediate", ca, ca=True, path_length=0)
    below = make("intermediate-2", top, ca=True)
    c.add("basic/intermediate-pathlen0-below-it", [ca], [leaf(below), below, top])
    c.add("basic/leaf-is-ca", [ca], [leaf(ca, ca=True, key_usage=_KU_CA)])
    certsign = x509.KeyUsage(False, False, False, False, False, True, False, False, False)
    c.add("basic/leaf-keyusage-certsign-only", [ca], [leaf(ca, key_usage=certsign)])
    c.add("basic/leaf-no-keyusage", [ca], [leaf(ca, key_usage=None)])
    c.add("basic/leaf-no-basic-constraints", [ca], [leaf(ca, basic_constraints=None)])
    bad_path = extension_der("2.5.29.19", tlv(der.SEQUENCE, tlv(der.INTEGER, b"\xff")), True)
    c.add(
        "basic/leaf-negative-pathlen", [ca], [resign(leaf(ca, basic_constraints=None), ca.key, add_extension(bad_path))]
    )
    huge_path = extension_der("2.5.29.19", tlv(der.SEQUENCE, tlv(der.BOOLEAN, b"\xff") + _integer(1 << 64)), True)
    c.add("basic/leaf-pathlen-2-64", [ca], [resign(leaf(ca, basic_constraints=None), ca.key, add_extension(huge_path))])
    v1_root = root(key_ids=False)
    v1_root = resign(v1_root, v1_root.key, to_v1)
    c.add("basic/v1-root", [v1_root], [leaf(v1_root, key_ids=False)])
    v1_mid = resign(make("intermediate", ca, ca=True), ca.key, to_v1)
    c.add("basic/v1-intermediate", [ca], [leaf(v1_mid, key_ids=False), v1_mid])
    c.add("basic/v1-leaf", [ca], [resign(leaf(ca), ca.key, to_v1)])
    v2 = tlv(der.context(0, True), tlv(der.INTEGER, b"\x01"))
    v2_base = root()
    v2_root = resign(v2_base, v2_base.key, set_field(VERSION, v2))
    c.add("basic/v2-root-with-extensions", [v2_root], [leaf(v2_base)])
    v4 = tlv(der.context(0, True), tlv(der.INTEGER, b"\x03"))
    c.add("basic/leaf-version-4", [ca], [resign(leaf(ca), ca.key, set_field(VERSION, v4))])


def _extension_cases(c: Corpus) -> None:
    ca = root()

    def constrained(permitted: list[x509.GeneralName] | None, excluded: list[x509.GeneralName] | None) -> Node:
        return root("constrained-ca", constraints=x509.NameConstraints(permitted, excluded))

    dns = x509.DNSName
    for label, nc_root, san in (
        ("permitted-dns-match", constrained([dns("example.com")], None), [dns("proxy.example.com")]),
        ("permitted-dns-exact", constrained([dns("example.com")], None), [dns("example.com")]),
        ("permitted-dns-miss", constrained([dns("example.com")], None), [dns("proxy.other.org")]),
        ("permitted-dns-suffix-not-label", constrained([dns("example.com")], None), [dns("badexample.com")]),
        ("permitted-dns-no-san", constrained([dns("example.com")], None), []),
        ("permitted-dns-leading-dot-apex", constrained([dns(".example.com")], None), [dns("example.com")]),
        ("permitted-dns-case", constrained([dns("Example.COM")], None), [dns("proxy.example.com")]),
        ("excluded-dns-match", constrained(None, [dns("example.com")]), [dns("a.example.com")]),
        ("excluded-dns-other", constrained(None, [dns("example.com")]), [dns("a.example.org")]),
        ("excluded-dns-wildcard-sibling", constrained(None, [dns("a.example.com")]), [dns("*.example.com")]),
        (
            "permitted-ip-match",
            constrained([x509.IPAddress(ipaddress.ip_network("10.0.0.0/8"))], None),
            [x509.IPAddress(ipaddress.ip_address("10.1.2.3"))],
        ),
        (
            "permitted-ip-miss",
            constrained([x509.IPAddress(ipaddress.ip_network("10.0.0.0/8"))], None),
            [x509.IPAddress(ipaddress.ip_address("192.168.1.1"))],
        ),
        (
            "permitted-ip-other-family",
            constrained([x509.IPAddress(ipaddress.ip_network("10.0.0.0/8"))], None),
            [x509.IPAddress(ipaddress.ip_address("::1"))],
        ),
        (
            "permitted-email-domain",
            constrained([x509.RFC822Name("example.com")], None),
            [x509.RFC822Name("a@example.com")],
        ),
        ("permitted-email-miss", constrained([x509.RFC822Name("example.com")], None), [x509.RFC822Name("a@other.org")]),
        (
            "permitted-uri-host",
            constrained([x509.UniformResourceIdentifier("example.com")], None),
            [x509.UniformResourceIdentifier("spiffe://example.com/proxy")],
        ),
        (
            "permitted-dns-only-ip-san",
            constrained([dns("example.com")], None),
            [x509.IPAddress(ipaddress.ip_address("10.0.0.1"))],
        ),
    ):
        c.add(f"constraints/{label}", [nc_root], [leaf(nc_root, san=san)])
    uri_root = constrained([x509.UniformResourceIdentifier("example.com")], None)
    for index, uri in enumerate(
        (
            b"spiffe://PROXY.Example.com:8443/x",
            b"urn:example:proxy",
            b"http://[::1]/",
            b"http://10.0.0.1/",
            b"https://other.org/",
        )
    ):
        uri_san = tlv(der.SEQUENCE, tlv(0x86, uri))
        no_san = leaf(uri_root)
        c.add(f"constraints/permitted-uri-{index}", [uri_root], [extended(no_san, uri_root.key, "2.5.29.17", uri_san)])
    mail_root = constrained([x509.RFC822Name("example.com"), x509.RFC822Name("boss@corp.example")], None)
    for index, address in enumerate(
        (
            b"a b@example.com",
            b'"a b"@example.com',
            b"a\\ b@example.com",
            b".a@example.com",
            b"a..b@example.com",
            b"a@EXAMPLE.COM",
            b"a@sub.example.com",
            b"boss@CORP.example",
            b"Boss@corp.example",
            b"a@",
            b"@example.com",
            b"a@example.com.",
            b"a@b@example.com",
        )
    ):
        mail_san = tlv(der.SEQUENCE, tlv(0x81, address))
        c.add(
            f"constraints/email-{index}", [mail_root], [extended(leaf(mail_root), mail_root.key, "2.5.29.17", mail_san)]
        )
    _go_126_constraint_cases(c)
    dirname = [x509.DirectoryName(x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "proxies")]))]
    crit = root("constrained-ca", constraints=x509.NameConstraints(dirname, None))
    c.add("constraints/dirname-only-critical", [crit], [leaf(crit)])
    soft = root("constrained-ca", constraints=x509.NameConstraints(dirname, None), constraints_critical=False)
    c.add("constraints/dirname-only-noncritical", [soft], [leaf(soft)])
    mid = make("intermediate", ca, ca=True, constraints=x509.NameConstraints([dns("example.com")], None))
    c.add("constraints/intermediate-violated", [ca], [leaf(mid, san=[dns("proxy.other.org")]), mid])
    c.add("constraints/intermediate-satisfied", [ca], [leaf(mid, san=[dns("proxy.example.com")]), mid])
    c.add(
        "constraints/intermediate-san-checked-by-root",
        [r := constrained([dns("example.com")], None)],
        [leaf(m := make("intermediate", r, ca=True, san=[dns("other.org")])), m],
    )

    unknown = "1.3.6.1.4.1.55555.2"
    c.add("extensions/leaf-unknown-critical", [ca], [extended(leaf(ca), ca.key, unknown, b"\x05\x00", True)])
    c.add("extensions/leaf-unknown-noncritical", [ca], [extended(leaf(ca), ca.key, unknown, b"\x05\x00")])
    base = root()
    r = extended(base, base.key, unknown, b"\x05\x00", True)
    c.add("extensions/root-unknown-critical", [r], [leaf(r)])
    mid = make("intermediate", ca, ca=True)
    mid_crit = extended(mid, ca.key, unknown, b"\x05\x00", True)
    c.add("extensions/intermediate-unknown-critical", [ca], [leaf(mid), mid_crit])
    # Malformed non-critical extensions: Go ignores those it does not parse and refuses those it does.
    for label, oid in (("sct-list", "1.3.6.1.4.1.11129.2.4.2"), ("unknown", unknown), ("freshest-crl", "2.5.29.46")):
        base = root()
        bad_root = extended(base, base.key, oid, b"\xff\xff\xff")
        c.add(f"extensions/root-malformed-noncritical-{label}", [bad_root], [leaf(bad_root)])
    base = root(key_ids=False)
    bad_ski_root = extended(base, base.key, "2.5.29.14", b"\x05\x00")
    c.add("extensions/root-malformed-ski", [bad_ski_root], [leaf(bad_ski_root, key_ids=False)])
    plain = leaf(ca, key_ids=False)
    c.add("extensions/leaf-malformed-ski", [ca], [extended(plain, ca.key, "2.5.29.14", b"\x05\x00")])
    c.add("extensions/leaf-critical-ski", [ca], [extended(plain, ca.key, "2.5.29.14", tlv(4, b"\x01\x02"), True)])
    aki = tlv(der.SEQUENCE, tlv(0x80, b"\x01\x02"))
    c.add("extensions/leaf-critical-aki", [ca], [extended(plain, ca.key, "2.5.29.35", aki, True)])
    aia = tlv(der.SEQUENCE, tlv(der.SEQUENCE, _encode_oid("1.3.6.1.5.5.7.48.1") + tlv(0x86, b"http://ocsp.example")))
    c.add("extensions/leaf-critical-aia", [ca], [extended(plain, ca.key, "1.3.6.1.5.5.7.1.1", aia, True)])
    c.add("extensions/leaf-noncritical-aia", [ca], [extended(plain, ca.key, "1.3.6.1.5.5.7.1.1", aia)])
    uri = tlv(0x86, b"http://crl.example/ca.crl")
    for label, points in (
        ("full-name", tlv(der.SEQUENCE, tlv(der.SEQUENCE, tlv(0xA0, tlv(0xA0, uri))))),
        ("relative-name", tlv(der.SEQUENCE, tlv(der.SEQUENCE, tlv(0xA0, tlv(0xA1, b""))))),
        ("no-name", tlv(der.SEQUENCE, tlv(der.SEQUENCE, tlv(0x81, b"\x05\xa0")))),
        ("truncated-uri", tlv(der.SEQUENCE, tlv(der.SEQUENCE, tlv(0xA0, tlv(0xA0, b"\x86\x05ab"))))),
    ):
        c.add(f"extensions/leaf-crl-points-{label}", [ca], [extended(plain, ca.key, "2.5.29.31", points)])
    broken_aia = tlv(der.SEQUENCE, tlv(der.SEQUENCE, _encode_oid("1.3.6.1.5.5.7.48.1") + b"\x86\x05ab"))
    c.add("extensions/leaf-aia-truncated-uri", [ca], [extended(plain, ca.key, "1.3.6.1.5.5.7.1.1", broken_aia)])
    twice = extended(leaf(ca), ca.key, "2.5.29.14", tlv(4, b"\x01\x02"))
    c.add("extensions/leaf-duplicate-extension", [ca], [twice])
    empty_san = tlv(der.SEQUENCE, b"")
    c.add("extensions/leaf-empty-san-critical", [ca], [extended(plain, ca.key, "2.5.29.17", empty_san, True)])
    c.add("extensions/leaf-empty-san-noncritical", [ca], [extended(plain, ca.key, "2.5.29.17", empty_san)])
    bad_ip = tlv(der.SEQUENCE, tlv(0x87, b"\x0a\x00\x00"))
    c.add("extensions/leaf-san-ip-wrong-length", [ca], [extended(plain, ca.key, "2.5.29.17", bad_ip)])
    other_name = tlv(der.SEQUENCE, tlv(0xA0, _encode_oid("1.2.3.4") + tlv(0xA0, tlv(der.UTF8_STRING, b"x"))))
    c.add("extensions/leaf-san-othername-only-critical", [ca], [extended(plain, ca.key, "2.5.29.17", other_name, True)])
    for index, uri in enumerate(URI_SANS):
        uri_san = tlv(der.SEQUENCE, tlv(0x86, uri))
        c.add(f"extensions/leaf-uri-san-{index}", [ca], [extended(plain, ca.key, "2.5.29.17", uri_san)])
    false_flag = tlv(der.SEQUENCE, _encode_oid("1.3.6.1.4.1.55555.4") + tlv(der.BOOLEAN, b"\x00") + tlv(4, b"\x05\x00"))
    c.add("extensions/leaf-explicit-false-critical", [ca], [resign(plain, ca.key, add_extension(false_flag))])
    policies = x509.PolicyConstraints(require_explicit_policy=None, inhibit_policy_mapping=0)
    mid = make("intermediate", ca, ca=True)
    pc_mid = extended(mid, ca.key, "2.5.29.36", policies.public_bytes())
    c.add("extensions/intermediate-policy-constraints-inhibit-mapping", [ca], [leaf(mid), pc_mid])
    require = x509.PolicyConstraints(require_explicit_policy=0, inhibit_policy_mapping=None)
    req_mid = extended(mid, ca.key, "2.5.29.36", require.public_bytes())
    c.add("extensions/intermediate-require-explicit-policy-none-given", [ca], [leaf(mid), req_mid])
    for skip in (1, 2):
        counted = x509.PolicyConstraints(require_explicit_policy=skip, inhibit_policy_mapping=None)
        counted_mid = extended(mid, ca.key, "2.5.29.36", counted.public_bytes())
        c.add(f"extensions/intermediate-require-explicit-policy-after-{skip}", [ca], [leaf(mid), counted_mid])
    on_leaf = extended(leaf(ca), ca.key, "2.5.29.36", require.public_bytes())
    c.add("extensions/leaf-require-explicit-policy", [ca], [on_leaf])
    policy = x509.CertificatePolicies([x509.PolicyInformation(x509.ObjectIdentifier("2.23.140.1.2.1"), None)])
    with_policies = extended(mid, ca.key, "2.5.29.32", policy.public_bytes())
    with_both = extended(with_policies, ca.key, "2.5.29.36", require.public_bytes())
    c.add("extensions/intermediate-policies-only", [ca], [leaf(mid), with_policies])
    c.add("extensions/intermediate-policies-and-require-explicit", [ca], [leaf(mid), with_both])
    with_policy = extended(leaf(mid), mid.key, "2.5.29.32", policy.public_bytes())
    big_policy = tlv(der.SEQUENCE, tlv(der.SEQUENCE, _encode_oid("1.3.6.1.4.1.1099511627776")))
    c.add("extensions/leaf-policy-oid-arc-2-40", [ca], [extended(leaf(ca), ca.key, "2.5.29.32", big_policy)])
    c.add("extensions/policies-everywhere-and-require-explicit", [ca], [with_policy, with_both])


def _validity_cases(c: Corpus) -> None:
    ca = root()
    c.add("validity/leaf-expired", [ca], [leaf(ca, not_before=NOW - 3 * DAY, not_after=NOW - DAY)])
    c.add("validity/leaf-not-yet-valid", [ca], [leaf(ca, not_before=NOW + DAY, not_after=NOW + 3 * DAY)])
    c.add("validity/leaf-at-not-after", [ca], [leaf(ca, not_after=NOW)])
    c.add("validity/leaf-at-not-before", [ca], [leaf(ca, not_before=NOW)])
    c.add("validity/leaf-one-second-expired", [ca], [leaf(ca, not_after=NOW - dt.timedelta(seconds=1))])
    c.add("validity/leaf-until-2060", [ca], [leaf(ca, not_after=dt.datetime(2060, 1, 1, tzinfo=dt.UTC))])
    c.add("validity/leaf-since-1955", [ca], [leaf(ca, not_before=dt.datetime(1955, 1, 1, tzinfo=dt.UTC))])
    inverted = tlv(der.SEQUENCE, utc_time(NOW + DAY) + utc_time(NOW - DAY))
    c.add("validity/leaf-inverted", [ca], [resign(leaf(ca), ca.key, set_field(VALIDITY, inverted))])
    generalized_2049 = tlv(der.SEQUENCE, tlv(0x18, b"20200101000000Z") + tlv(0x18, b"20491231000000Z"))
    c.add(
        "validity/leaf-generalized-before-2050", [ca], [resign(leaf(ca), ca.key, set_field(VALIDITY, generalized_2049))]
    )
    fraction = tlv(der.SEQUENCE, utc_time(NOW - DAY) + tlv(0x18, (NOW + DAY).strftime("%Y%m%d%H%M%S.5Z").encode()))
    c.add("validity/leaf-generalized-fraction", [ca], [resign(leaf(ca), ca.key, set_field(VALIDITY, fraction))])
    later = NOW + DAY
    for label, not_after in (
        ("utc-offset", tlv(0x17, (later + dt.timedelta(hours=2)).strftime("%y%m%d%H%M%S+0200").encode())),
        ("utc-offset-negative", tlv(0x17, (later - dt.timedelta(hours=5)).strftime("%y%m%d%H%M%S-0500").encode())),
        ("utc-offset-zero", tlv(0x17, later.strftime("%y%m%d%H%M%S+0000").encode())),
        ("utc-without-seconds", tlv(0x17, later.strftime("%y%m%d%H%MZ").encode())),
        ("generalized-offset", tlv(0x18, (later + dt.timedelta(hours=1)).strftime("%Y%m%d%H%M%S+0100").encode())),
        ("utc-offset-minus-zero", tlv(0x17, (NOW - dt.timedelta(minutes=1)).strftime("%y%m%d%H%M%S-0000").encode())),
    ):
        spelled = tlv(der.SEQUENCE, utc_time(NOW - DAY) + not_after)
        c.add(f"validity/leaf-{label}", [ca], [resign(leaf(ca), ca.key, set_field(VALIDITY, spelled))])
    local = (NOW + dt.timedelta(minutes=30)).strftime("%y%m%d%H%M%S+0100")  # 30 minutes ago in UTC
    early = tlv(der.SEQUENCE, utc_time(NOW - DAY) + tlv(0x17, local.encode()))
    c.add("validity/leaf-offset-puts-expiry-in-the-past", [ca], [resign(leaf(ca), ca.key, set_field(VALIDITY, early))])
    mid = make("intermediate", ca, ca=True, not_before=NOW - 3 * DAY, not_after=NOW - DAY)
    c.add("validity/intermediate-expired", [ca], [leaf(mid), mid])
    old = root(not_before=NOW - 3 * DAY, not_after=NOW - DAY)
    c.add("validity/root-expired", [old], [leaf(old)])
    future = root(not_before=NOW + DAY, not_after=NOW + 3 * DAY)
    c.add("validity/root-not-yet-valid", [future], [leaf(future)])
    c.add("validity/checked-at-other-time", [ca], [leaf(ca)], at=NOW + 40 * DAY)


def _algorithm_cases(c: Corpus) -> None:
    for label, curve, digest in (
        ("p384-sha384", ec.SECP384R1(), hashes.SHA384()),
        ("p521-sha512", ec.SECP521R1(), hashes.SHA512()),
    ):
        r = root(key=ec_key(curve), hash_algorithm=digest)
        c.add(f"algorithms/ecdsa-{label}", [r], [leaf(r, hash_algorithm=digest)])
    ca = root()
    same = lambda fields: fields  # noqa: E731
    for label, oid, weak in (
        ("ecdsa-sha1", "1.2.840.10045.4.1", hashes.SHA1()),
        ("ecdsa-sha224", "1.2.840.10045.4.3.1", hashes.SHA224()),
    ):
        c.add(f"algorithms/{label}-leaf", [ca], [resign(leaf(ca), ca.key, same, algorithm_der(oid), weak)])
    rsa_root = root(key=rsa.generate_private_key(65537, 2048))
    c.add("algorithms/rsa2048", [rsa_root], [leaf(rsa_root)])
    rsa_sha1 = tlv(der.SEQUENCE, _encode_oid("1.2.840.113549.1.1.5") + tlv(0x05, b""))
    c.add("algorithms/rsa-sha1-leaf", [rsa_root], [resign(leaf(rsa_root), rsa_root.key, same, rsa_sha1, hashes.SHA1())])
    c.add("algorithms/rsa-pss-leaf", [rsa_root], [leaf(rsa_root, rsa_pss=True)])
    small = root(key=rsa.generate_private_key(65537, 1024))
    c.add("algorithms/rsa1024-root", [small], [leaf(small)])
    odd_exponent = root(key=rsa.generate_private_key(3, 2048))
    c.add("algorithms/rsa-exponent-3-root", [odd_exponent], [leaf(odd_exponent)])
    # Go refuses an RSA exponent above 2^31-1 before any modular exponentiation.
    for label, exponent in (
        ("2^31-1", GO_MAX_EXPONENT),
        ("2^31+11", PRIME_ABOVE_GO_MAX),
        ("2^63-25", LARGEST_PRIME_BELOW_2_63),
    ):
        big_e = root(f"rsa-e-{label}", key=rsa_key_with_exponent(exponent))
        c.add(f"algorithms/rsa-root-exponent-{label}", [big_e], [leaf(big_e)])
        mid_e = make(f"rsa-e-{label}-intermediate", ca, ca=True, key=rsa_key_with_exponent(exponent))
        c.add(f"algorithms/rsa-intermediate-exponent-{label}", [ca], [leaf(mid_e), mid_e])
    # crypto/tls refuses a presented certificate whose RSA key is over 8192 bits (handshake_server.go).
    for bits in (8192, 8193, 8194):
        modulus = (1 << (bits - 1)) | (int.from_bytes(bytes(range(256)) * 4, "big") % (1 << (bits - 2))) | 1
        c.add(
            f"algorithms/rsa-leaf-{bits}-bits",
            [ca],
            [resign(leaf(ca), ca.key, set_field(SPKI, rsa_public_key_info(modulus, 65537)))],
        )
    c.add("algorithms/rsa-leaf-key", [ca], [leaf(ca, key=rsa.generate_private_key(65537, 2048))])
    ed_root = root(key=ed25519.Ed25519PrivateKey.generate())
    ed_null = algorithm_der_null("1.3.101.112")
    # Go right-aligns a BIT STRING with unused bits (parser.go: signature.RightAlign(), PublicKey.RightAlign()).
    padded = leaf(ca)
    while _split(padded.der)[2][-1] & 1:  # a signature whose last bit is 0 may declare one unused bit
        padded = leaf(ca)
    tbs, algorithm, signature = _split(padded.der)
    body = Reader(signature).read(der.BIT_STRING)
    c.add(
        "algorithms/signature-unused-bits",
        [ca],
        [tlv(der.SEQUENCE, tbs + algorithm + tlv(der.BIT_STRING, b"\x01" + body[1:]))],
    )
    ed_key = ed25519.Ed25519PrivateKey.generate()
    while ed_key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)[-1] & 1:
        ed_key = ed25519.Ed25519PrivateKey.generate()
    raw = ed_key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    padded_spki = tlv(der.SEQUENCE, algorithm_der("1.3.101.112") + tlv(der.BIT_STRING, b"\x01" + raw))
    ed_padded = resign(root(key=ed_key), ed_key, set_field(SPKI, padded_spki))
    c.add("algorithms/ed25519-root-key-unused-bits", [ed_padded], [leaf(Node(ed_padded.der, ed_key))])
    c.add("algorithms/ed25519-signature-null-params", [ed_root], [resign(leaf(ed_root), ed_root.key, same, ed_null)])
    pss_root = root(key=rsa.generate_private_key(65537, 2048))
    sha256 = _encode_oid("2.16.840.1.101.3.4.2.1")
    for label, hash_params, mgf_params in (
        ("null-params", b"\x05\x00", b"\x05\x00"),
        ("absent-params", b"", b""),
        ("hash-params-integer", tlv(der.INTEGER, b"\x00"), b"\x05\x00"),
        ("mgf-hash-params-integer", b"\x05\x00", tlv(der.INTEGER, b"\x00")),
    ):
        mgf = tlv(der.SEQUENCE, _encode_oid("1.2.840.113549.1.1.8") + tlv(der.SEQUENCE, sha256 + mgf_params))
        params = tlv(0xA0, tlv(der.SEQUENCE, sha256 + hash_params)) + tlv(0xA1, mgf) + tlv(0xA2, _integer(32))
        pss_alg = tlv(der.SEQUENCE, _encode_oid("1.2.840.113549.1.1.10") + tlv(der.SEQUENCE, params))
        pss_leaf = resign(leaf(pss_root), pss_root.key, same, pss_alg, pss=True)
        c.add(f"algorithms/rsa-pss-{label}", [pss_root], [pss_leaf])
    c.add("algorithms/ed25519-root-and-leaf", [ed_root], [leaf(ed_root, key=ed25519.Ed25519PrivateKey.generate())])
    c.add("algorithms/ed25519-leaf-under-ecdsa", [ca], [leaf(ca, key=ed25519.Ed25519PrivateKey.generate())])
    c.add("algorithms/p224-leaf-key", [ca], [leaf(ca, key=ec_key(ec.SECP224R1()))])
    c.add("algorithms/secp256k1-leaf-key", [ca], [leaf(ca, key=ec_key(ec.SECP256K1()))])
    k1_root = root(key=ec_key(ec.SECP256K1()))
    c.add("algorithms/secp256k1-root", [k1_root], [leaf(k1_root)])
    brainpool = root(key=ec_key(ec.BrainpoolP256R1()))
    c.add("algorithms/brainpool-root", [brainpool], [leaf(brainpool)])
    x_leaf = make(ALLOWED, ca, key=ec_key())
    x_key = (
        x25519.X25519PrivateKey.generate()
        .public_key()
        .public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    c.add("algorithms/x25519-leaf-key", [ca], [resign(x_leaf, ca.key, set_field(SPKI, x_key))])
    unknown_key = tlv(der.SEQUENCE, algorithm_der("1.3.6.1.4.1.55555.3") + tlv(der.BIT_STRING, b"\x00\x01\x02"))
    c.add("algorithms/unknown-leaf-key-algorithm", [ca], [resign(x_leaf, ca.key, set_field(SPKI, unknown_key))])
    rsa_leaf = leaf(ca, key=rsa.generate_private_key(65537, 2048))
    rsa_spki = Reader(_split(rsa_leaf.der)[0]).sub(der.SEQUENCE)
    for _ in range(SPKI):
        rsa_spki.element(rsa_spki.peek() or 0)
    spki = Reader(rsa_spki.element(der.SEQUENCE)).sub(der.SEQUENCE)
    spki.element(der.SEQUENCE)
    no_null = tlv(der.SEQUENCE, algorithm_der("1.2.840.113549.1.1.1") + spki.element(der.BIT_STRING))
    c.add("algorithms/rsa-key-without-null-params", [ca], [resign(rsa_leaf, ca.key, set_field(SPKI, no_null))])
    numbers = rsa.generate_private_key(65537, 2048).public_key().public_numbers()
    for exponent in (1, 3, (1 << 63) + 1):
        raw_key = tlv(der.SEQUENCE, _integer(numbers.n) + _integer(exponent))
        rsa_spki_e = tlv(
            der.SEQUENCE, algorithm_der_null("1.2.840.113549.1.1.1") + tlv(der.BIT_STRING, b"\0" + raw_key)
        )
        label = "huge" if exponent > 3 else str(exponent)
        c.add(f"algorithms/rsa-leaf-exponent-{label}", [ca], [resign(x_leaf, ca.key, set_field(SPKI, rsa_spki_e))])
    point = ec_key().public_key().public_bytes(serialization.Encoding.X962, serialization.PublicFormat.CompressedPoint)
    compressed = tlv(
        der.SEQUENCE,
        tlv(der.SEQUENCE, _encode_oid("1.2.840.10045.2.1") + _encode_oid("1.2.840.10045.3.1.7"))
        + tlv(der.BIT_STRING, b"\0" + point),
    )
    c.add("algorithms/ec-leaf-compressed-point", [ca], [resign(x_leaf, ca.key, set_field(SPKI, compressed))])
    ed_raw = (
        ed25519.Ed25519PrivateKey.generate()
        .public_key()
        .public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    )
    ed_params = tlv(der.SEQUENCE, algorithm_der_null("1.3.101.112") + tlv(der.BIT_STRING, b"\0" + ed_raw))
    c.add("algorithms/ed25519-leaf-key-with-parameters", [ca], [resign(x_leaf, ca.key, set_field(SPKI, ed_params))])
    good = leaf(ca)
    tbs, algorithm, signature = _split(good.der)
    flipped = signature[:-1] + bytes([signature[-1] ^ 1])
    c.add("algorithms/bad-signature", [ca], [tlv(der.SEQUENCE, tbs + algorithm + flipped)])
    sha384 = algorithm_der("1.2.840.10045.4.3.3")
    c.add("algorithms/inner-outer-mismatch", [ca], [tlv(der.SEQUENCE, tbs + sha384 + signature)])
    c.add("algorithms/declared-sha384-signed-sha256", [ca], [resign(good, ca.key, same, algorithm=sha384)])
    c.add(
        "algorithms/rsa-oid-ecdsa-signature",
        [ca],
        [resign(good, ca.key, same, algorithm=algorithm_der("1.2.840.113549.1.1.11"))],
    )
    c.add("algorithms/ecdsa-root-rsa-leaf-signed-by-rsa", [ca], [leaf(rsa_root)])
    c.add("algorithms/serial-zero", [ca], [resign(good, ca.key, set_field(SERIAL, tlv(der.INTEGER, b"\x00")))])
    c.add("algorithms/serial-159-bits", [ca], [leaf(ca, serial=(1 << 158) + 12345)])
    c.add("algorithms/serial-200-bits", [ca], [resign(good, ca.key, set_field(SERIAL, tlv(der.INTEGER, b"\x01" * 25)))])
    c.add("algorithms/serial-negative", [ca], [resign(good, ca.key, set_field(SERIAL, tlv(der.INTEGER, b"\xff")))])
    c.add(
        "algorithms/serial-non-minimal", [ca], [resign(good, ca.key, set_field(SERIAL, tlv(der.INTEGER, b"\x00\x01")))]
    )
    trailing = tlv(der.SEQUENCE, tbs + algorithm + signature) + b"\x00"
    c.add("algorithms/trailing-data", [ca], [trailing])


def _chain_cases(c: Corpus) -> None:
    ca = root()
    mid1 = make("intermediate-1", ca, ca=True)
    mid2 = make("intermediate-2", mid1, ca=True)
    end = leaf(mid2)
    c.add("chains/two-intermediates", [ca], [end, mid2, mid1])
    c.add("chains/two-intermediates-reversed", [ca], [end, mid1, mid2])
    c.add("chains/duplicate-intermediate", [ca], [end, mid2, mid2, mid1])
    c.add("chains/leaf-repeated", [ca], [end, end, mid2, mid1])
    c.add("chains/root-included", [ca], [end, mid2, mid1, ca])
    c.add("chains/unrelated-extra", [ca], [end, root("stranger"), mid2, mid1])
    c.add("chains/missing-intermediate", [ca], [end, mid2])
    c.add("chains/intermediate-as-anchor", [mid2], [end])
    c.add("chains/upper-intermediate-as-anchor", [mid1], [end, mid2])
    c.add("chains/root-and-intermediate-in-bundle", [ca, mid1], [end, mid2])
    own = make(ALLOWED)
    c.add("chains/self-signed-leaf-in-bundle", [own], [own])
    c.add("chains/self-signed-leaf-not-in-bundle", [ca], [own])
    c.add("chains/root-presented-as-leaf", [ca], [ca], names=())
    c.add("chains/empty", [ca], [])
    # cross-signing: one intermediate key and name, certified by an untrusted root and by the trusted one
    stranger = root("stranger-ca")
    cross_key = ec_key()
    via_stranger = make("cross", stranger, ca=True, key=cross_key)
    via_trusted = make("cross", ca, ca=True, key=cross_key)
    cross_leaf = leaf(via_trusted)
    c.add("chains/cross-signed-untrusted-only", [ca], [cross_leaf, via_stranger])
    c.add("chains/cross-signed-both", [ca], [cross_leaf, via_stranger, via_trusted])
    stale = make("cross", ca, ca=True, key=cross_key, not_before=NOW - 3 * DAY, not_after=NOW - DAY)
    c.add("chains/cross-signed-expired-and-valid", [ca], [cross_leaf, stale, via_trusted])
    c.add("chains/cross-signed-expired-only", [ca], [cross_leaf, stale])
    old_root = make("requestheader-ca", key=ca.key, ca=True, not_before=NOW - 3 * DAY, not_after=NOW - DAY)
    c.add("chains/expired-and-renewed-root-in-bundle", [old_root, ca], [leaf(ca)])
    twin = make("intermediate-1", ca, ca=True)
    c.add("chains/same-name-other-key-first", [ca], [leaf(mid1), twin, mid1])
    long_chain: list[Node] = []
    parent = ca
    for depth in range(5):
        parent = make(f"level-{depth}", parent, ca=True)
        long_chain.insert(0, parent)
    c.add("chains/five-intermediates", [ca], [leaf(parent), *long_chain])
    loop_a_key, loop_b_key = ec_key(), ec_key()
    a_signer = Node(make("loop-a", key=loop_a_key, ca=True).der, loop_a_key)
    b_node = make("loop-b", a_signer, ca=True, key=loop_b_key)
    a_node = make("loop-a", b_node, ca=True, key=loop_a_key)
    c.add("chains/intermediate-loop", [ca], [leaf(a_node), a_node, b_node])
    # Go stops after 100 signature checks per Verify: decoys named like the intermediate, tried first
    real = make("busy-intermediate", ca, ca=True, key_ids=False)
    decoy_signer = root("decoy-signer")
    decoys = [make("busy-intermediate", decoy_signer, ca=True, key_ids=False) for _ in range(99)]
    busy_leaf = leaf(real, key_ids=False)
    c.add("chains/signature-checks-at-limit", [ca], [busy_leaf, *decoys[:98], real])
    c.add("chains/signature-checks-over-limit", [ca], [busy_leaf, *decoys, real])
    renamed = make(ALLOWED, root("requestheader-ca-renamed", key=ca.key))
    c.add("chains/issuer-name-differs-same-key", [ca], [renamed])
    wrong_aki = extended(leaf(ca, key_ids=False), ca.key, "2.5.29.35", tlv(der.SEQUENCE, tlv(0x80, b"\x09" * 20)))
    c.add("chains/leaf-authority-key-id-mismatch", [ca], [wrong_aki])


def _bundle_cases(c: Corpus) -> None:
    ca, second = root(), root("second-ca")
    end = leaf(second)
    ca_pem, second_pem = pem(ca.der), pem(second.der)
    key_block = pem(b"\x30\x00", kind="PRIVATE KEY")
    headers = "Proc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,00112233445566778899AABBCCDDEEFF\n\n"
    broken = pem(b"\x30\x03\x02\x01\x01")
    c.add("bundle/two-cas-second-signs", ca_pem + second_pem, [end])
    c.add("bundle/key-block-first", key_block + second_pem, [end])
    c.add("bundle/crl-block-first", pem(b"\x30\x00", kind="X509 CRL") + second_pem, [end])
    c.add("bundle/only-block-has-headers", pem(second.der, headers=headers), [end])
    c.add("bundle/signer-has-headers", pem(second.der, headers=headers) + ca_pem, [end])
    c.add("bundle/trusted-certificate-type", pem(second.der, kind="TRUSTED CERTIFICATE"), [end])
    c.add("bundle/text-between-blocks", ca_pem + b"\nsome comment\n\n" + second_pem, [end])
    c.add("bundle/leading-text", b"# requestheader CA\n" + second_pem, [end])
    c.add("bundle/crlf", second_pem.replace(b"\n", b"\r\n"), [end])
    c.add("bundle/no-final-newline", second_pem.rstrip(b"\n"), [end])
    c.add("bundle/indented-base64", second_pem.replace(b"\nM", b"\n  M"), [end])
    c.add("bundle/malformed-certificate-after", second_pem + broken, [end])
    c.add("bundle/malformed-certificate-before", broken + second_pem, [end])
    c.add("bundle/bad-base64-block-first", pem(b"\x30\x00").replace(b"MAA=", b"M!A=") + second_pem, [end])
    c.add("bundle/duplicate-ca", second_pem + second_pem, [end])
    c.add("bundle/empty", b"", [end])
    c.add("bundle/no-certificate-block", key_block, [end])
    critical = extended(ca, ca.key, "1.3.6.1.4.1.55555.2", b"\x05\x00", True)
    c.add("bundle/unknown-critical-ca-alongside", pem(critical.der) + second_pem, [end])
    # Go's pem.Decode needs "\n-----END ": an END marker that follows the base64 on its line ends no
    # block, and Decode looks on for the next BEGIN.
    glued = second_pem.replace(b"\n-----END", b"-----END")
    c.add("bundle/end-on-base64-line-signer-first", glued + ca_pem, [end])
    c.add("bundle/end-on-base64-line-signer-last", ca_pem + glued, [end])
    c.add("bundle/end-on-base64-line-only", glued, [end])
    c.add("bundle/begin-not-at-line-start", b"#" + second_pem, [end])
    c.add("bundle/begin-indented", b"\n " + second_pem, [end])
    c.add("bundle/text-after-end", second_pem.replace(b"END CERTIFICATE-----\n", b"END CERTIFICATE----- x\n"), [end])
    c.add("bundle/end-type-differs", second_pem.replace(b"END CERTIFICATE", b"END X509 CRL"), [end])
    c.add("bundle/data-after-padding-block-first", pem(b"\x30\x00").replace(b"MAA=", b"MAA=MAA=") + second_pem, [end])
    c.add("bundle/colon-line-is-a-header", second_pem.replace(b"-----\nM", b"-----\nnote:x\nM", 1), [end])
    c.add(
        "bundle/empty-block-then-signer",
        b"-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n" + second_pem,
        [end],
    )
    c.add("bundle/unterminated-block-then-signer", b"-----BEGIN CERTIFICATE-----\nMAA=\n" + second_pem, [end])
    c.add("bundle/begin-without-dashes-then-signer", b"-----BEGIN CERTIFICATE\n" + second_pem, [end])


def case_duplicates(count: int, first: int) -> list[bytes]:
    """``count`` DNS names: example.com then EXAMPLE.COM at index ``first``, among fillers (Go sorts more than
    12 constraints with an unstable pdqsort)."""
    fillers = [f"f{i:02d}.example".encode() for i in range(count - 2)]
    return [*fillers[:first], b"example.com", b"EXAMPLE.COM", *fillers[first:]]


def _mutation_cases(c: Corpus) -> None:
    """Shapes a mistake in our verifier's shortcuts, counters and limits would grant (docs/mutation.md): Go
    refuses each, or grants it beside one it refuses (the exact edge)."""

    # an excluded DNS name that is not the first of its sorted set, and excluded names written in upper case
    for label, names, san in (
        ("dns-excluded-middle", [b"aaa.example", b"example.com", b"zzz.example"], b"proxy.example.com"),
        ("dns-excluded-last", [b"aaa.example", b"bbb.example", b"example.com"], b"example.com"),
        ("dns-excluded-capital-a", [b"b.example", b"A.example"], b"x.a.example"),
        ("dns-excluded-capital-a-exact", [b"A.example", b"b.example", b"c.example"], b"a.example"),
        ("dns-excluded-capital-a-after-underscore", [b"A.example", b"_.example"], b"x.a.example"),
    ):
        ca = with_constraints(raw_constraints((), [tlv(0x82, n) for n in names]))
        c.add(f"constraints/{label}", [ca], [with_san(ca, tlv(0x82, san))])
    # the sort key: "." before "-" (a name under b.example sorts before b-b.example), "Z" folded as "A" is,
    # "[" not folded (it is not "{"); one name written twice in different case is pruned to its first spelling,
    # whose parent alone answers a wildcard
    for label, names, san in (
        ("dns-excluded-period-before-hyphen", [b"b.example", b"b-b.example"], b"x.b.example"),
        ("dns-excluded-capital-z", [b"y.example", b"Z.example"], b"x.z.example"),
        ("dns-excluded-duplicate-in-capitals-wildcard", [b"example.com", b"EXAMPLE.COM"], b"*.COM"),
        ("dns-excluded-leading-period", [b".example.com"], b"x.example.com"),
        ("dns-excluded-sibling-not-wildcard", [b"x.example.com"], b"y.example.com"),
    ):
        ca = with_constraints(raw_constraints((), [tlv(0x82, n) for n in names]))
        c.add(f"constraints/{label}", [ca], [with_san(ca, tlv(0x82, san))])
    one_letter = with_constraints(raw_constraints([tlv(0x82, b"a.example")]))
    c.add("constraints/dns-permitted-no-label-boundary", [one_letter], [with_san(one_letter, tlv(0x82, b"ba.example"))])
    # 12 and 13 excluded names, one written twice in different case: past 12, which spelling Go keeps (and so
    # whether its parent answers *.COM) is its pdqsort's choice
    for label, count, first in (("12", 12, 2), ("13", 13, 2), ("13-first", 13, 0)):
        ca = with_constraints(raw_constraints((), [tlv(0x82, n) for n in case_duplicates(count, first)]))
        c.add(f"constraints/dns-excluded-{label}-duplicate-in-capitals", [ca], [with_san(ca, tlv(0x82, b"*.COM"))])
    brace = with_constraints(raw_constraints([tlv(0x82, b"{.example")]))
    c.add("constraints/dns-permitted-brace-san-bracket", [brace], [with_san(brace, tlv(0x82, b"[.example"))])
    # '@' and '`' fold to different bytes of the sort key (only A-Z fold): an exact key is an exact name
    at_sign = with_constraints(raw_constraints([tlv(0x82, b"@.example")]))
    c.add("constraints/dns-permitted-at-sign-san-backtick", [at_sign], [with_san(at_sign, tlv(0x82, b"`.example"))])
    # a name covered by the middle entry of an excluded set, not by the first: pruned from the set (Go searches
    # the entry just below the name, here the covering one)
    covered = [b"aaa.example", b"example.com", b"x.example.com"]
    ca = with_constraints(raw_constraints((), [tlv(0x82, n) for n in covered]))
    c.add("constraints/dns-excluded-covered-by-middle", [ca], [with_san(ca, tlv(0x82, b"y.example.com"))])
    # an address below every IP constraint's address, inside the first (an unmasked network): Go compares it
    # with the first entry
    for side, value in (
        (
            "permitted",
            raw_constraints([ip_constraint("10.0.0.5", "255.0.0.0"), ip_constraint("20.0.0.0", "255.0.0.0")]),
        ),
        (
            "excluded",
            raw_constraints((), [ip_constraint("10.0.0.5", "255.0.0.0"), ip_constraint("20.0.0.0", "255.0.0.0")]),
        ),
    ):
        ca = with_constraints(value)
        c.add(f"constraints/ip-below-first-entry-{side}", [ca], [with_san(ca, ip("10.0.0.1"))])
    # a wider network after a narrower one that holds its address but not its broadcast address: both kept
    holds_address = [ip_constraint("10.0.0.0", "255.255.0.0"), ip_constraint("10.0.5.5", "255.254.0.0")]
    for side, value in (
        ("permitted", raw_constraints(holds_address)),
        ("excluded", raw_constraints((), holds_address)),
    ):
        ca = with_constraints(value)
        c.add(f"constraints/ip-wider-after-narrower-{side}", [ca], [with_san(ca, ip("10.1.0.1"))])
    # one address, two masks, the narrow one written first: sorted by mask, the wide one comes first and the
    # narrow one is pruned; an address below theirs, in the wide network only, meets the wide one
    same_address = [ip_constraint("10.5.0.5", "255.255.0.0"), ip_constraint("10.5.0.5", "255.0.0.0")]
    for side, value in (("permitted", raw_constraints(same_address)), ("excluded", raw_constraints((), same_address))):
        ca = with_constraints(value)
        c.add(f"constraints/ip-same-address-narrow-first-{side}", [ca], [with_san(ca, ip("10.1.0.1"))])
    # an IPv4-mapped constraint address with a mask that does not cover the mapping's prefix: Go reads the
    # network as IPv4, so an IPv6 SAN (not mapped) is never inside it
    for side, value in (
        ("permitted", raw_constraints([ip_constraint("::ffff:10.0.0.0", "::")])),
        ("excluded", raw_constraints((), [ip_constraint("::ffff:10.0.0.0", "::")])),
    ):
        ca = with_constraints(value)
        c.add(f"constraints/ip-v4-mapped-zero-mask-{side}-v6-san", [ca], [with_san(ca, ip("2001:db8::1"))])
    # an IPv4-mapped IPv6 SAN against an excluded IPv4 range
    v4 = with_constraints(raw_constraints((), [ip_constraint("10.0.0.0", "255.0.0.0")]))
    c.add("constraints/ip-v4-mapped-san-excluded-v4", [v4], [with_san(v4, ip("::ffff:10.1.2.3"))])
    # overlapping IP constraints, each side, an address in both and one in the wide only
    wide, narrow = ip_constraint("10.0.0.0", "255.0.0.0"), ip_constraint("10.1.0.0", "255.255.0.0")
    for side, value in (
        ("permitted", raw_constraints([wide, narrow])),
        ("excluded", raw_constraints((), [narrow, wide])),
    ):
        ca = with_constraints(value)
        c.add(f"constraints/ip-overlapping-{side}-in-both", [ca], [with_san(ca, ip("10.1.2.3"))])
        c.add(f"constraints/ip-overlapping-{side}-in-wide", [ca], [with_san(ca, ip("10.200.0.1"))])
        c.add(f"constraints/ip-overlapping-{side}-outside", [ca], [with_san(ca, ip("11.0.0.1"))])
    # IPv6 constraints: a SAN inside, and one outside with the same last four bytes as the network
    v6_net = ip_constraint("2001:db8::", "ffff:ffff::")
    for side, value in (("permitted", raw_constraints([v6_net])), ("excluded", raw_constraints((), [v6_net]))):
        ca = with_constraints(value)
        c.add(f"constraints/ip-v6-{side}-inside", [ca], [with_san(ca, ip("2001:db8::1"))])
        c.add(f"constraints/ip-v6-{side}-outside-same-tail", [ca], [with_san(ca, ip("2001:db9::"))])
    # a dNSName Go cannot parse (a trailing dot), under a constraint that does not name it
    elsewhere = with_constraints(raw_constraints((), [tlv(0x82, b"other.org")]))
    trailing_dot = with_san(elsewhere, tlv(0x82, b"a.example."))
    c.add("constraints/dns-trailing-dot-excluded-elsewhere", [elsewhere], [trailing_dot])
    leading_dot = with_san(elsewhere, tlv(0x82, b".a.example"))  # valid as a constraint, not as a name
    c.add("constraints/dns-leading-dot-excluded-elsewhere", [elsewhere], [leading_dot])
    # a URI SAN whose host is an IP literal, under URI constraints
    for side, value in (
        ("permitted", raw_constraints([tlv(0x86, b"example.com")])),
        ("excluded", raw_constraints((), [tlv(0x86, b"example.com")])),
    ):
        ca = with_constraints(value)
        c.add(f"constraints/uri-ip-host-{side}-v4", [ca], [with_san(ca, tlv(0x86, b"https://10.0.0.1/x"))])
        c.add(f"constraints/uri-ip-host-{side}-v6", [ca], [with_san(ca, tlv(0x86, b"https://[2001:db8::1]:8443/x"))])
    # URI hosts as Go's parseURIs reads them: the port cut off; an empty host, and a host ending in "]" (not an
    # IP literal), under a permitted "" (every host)
    for side, value in (
        ("permitted", raw_constraints([tlv(0x86, b"example.com")])),
        ("excluded", raw_constraints((), [tlv(0x86, b"example.com")])),
    ):
        ca = with_constraints(value)
        c.add(f"constraints/uri-port-{side}", [ca], [with_san(ca, tlv(0x86, b"https://example.com:8443/x"))])
    every_host = with_constraints(raw_constraints([tlv(0x86, b"")]))
    c.add("constraints/uri-empty-host-permitted-all", [every_host], [with_san(every_host, tlv(0x86, b"urn:x:proxy"))])
    c.add("constraints/uri-bracket-host-permitted-all", [every_host], [with_san(every_host, tlv(0x86, b"https://a]/"))])
    # two email SANs, one outside the permitted domain; a CA's own SAN outside its own constraints (they
    # constrain the certificates below it only)
    mail_ca = with_constraints(raw_constraints([tlv(0x81, b"example.com")]))
    two_mails = with_san(mail_ca, tlv(0x81, b"a@example.com"), tlv(0x81, b"b@other.org"))
    c.add("constraints/email-permitted-second-outside", [mail_ca], [two_mails])
    fenced_root = root(
        "constrained-ca",
        constraints=x509.NameConstraints([x509.DNSName("example.com")], None),
        san=[x509.DNSName("other.org")],
    )
    c.add("constraints/root-san-outside-own-constraints", [fenced_root], [leaf(fenced_root)])
    # requireExplicitPolicy counted over two intermediates: 2 runs out at the leaf (Go refuses), 3 does not
    ca = root()
    for skip in (2, 3):
        required = x509.PolicyConstraints(require_explicit_policy=skip, inhibit_policy_mapping=None)
        top = extended(make("intermediate-1", ca, ca=True), ca.key, "2.5.29.36", required.public_bytes())
        below = make("intermediate-2", top, ca=True)
        c.add(f"extensions/require-explicit-policy-{skip}-two-intermediates", [ca], [leaf(below), below, top])
    # requireExplicitPolicy=0 on the trust anchor, which Go does not process (RFC 5280 6.1: the anchor is input)
    anchor_required = x509.PolicyConstraints(require_explicit_policy=0, inhibit_policy_mapping=None)
    strict_base = root("strict-ca")
    strict_root = extended(strict_base, strict_base.key, "2.5.29.36", anchor_required.public_bytes())
    strict_mid = make("intermediate", strict_root, ca=True)
    c.add("extensions/root-require-explicit-policy-0", [strict_root], [leaf(strict_mid), strict_mid])
    # ... nor when a certificate below it has policy constraints of its own (processed, unlike the anchor's)
    loose = x509.PolicyConstraints(require_explicit_policy=5, inhibit_policy_mapping=None)
    loose_mid = extended(make("intermediate", strict_root, ca=True), strict_root.key, "2.5.29.36", loose.public_bytes())
    c.add("extensions/root-require-explicit-policy-0-intermediate-5", [strict_root], [leaf(loose_mid), loose_mid])
    # a self-issued intermediate (a key rollover under one name) does not count down requireExplicitPolicy
    two = x509.PolicyConstraints(require_explicit_policy=2, inhibit_policy_mapping=None)
    rolled_top = extended(make("rolled", ca, ca=True), ca.key, "2.5.29.36", two.public_bytes())
    rolled = make("rolled", rolled_top, ca=True)  # issuer and subject both "rolled"
    c.add("extensions/require-explicit-policy-2-self-issued-below", [ca], [leaf(rolled), rolled, rolled_top])
    # certificate policies together with policy constraints or mappings
    mid = make("intermediate", ca, ca=True)
    policy = x509.CertificatePolicies([x509.PolicyInformation(x509.ObjectIdentifier("2.23.140.1.2.1"), None)])
    other = x509.CertificatePolicies([x509.PolicyInformation(x509.ObjectIdentifier("2.23.140.1.2.2"), None)])
    require = x509.PolicyConstraints(require_explicit_policy=0, inhibit_policy_mapping=None)
    with_policies = extended(mid, ca.key, "2.5.29.32", policy.public_bytes())
    both = extended(with_policies, ca.key, "2.5.29.36", require.public_bytes())
    other_leaf = extended(leaf(mid), mid.key, "2.5.29.32", other.public_bytes())
    c.add("extensions/policies-and-require-explicit-leaf-other-policy", [ca], [other_leaf, both])
    any_policy = _encode_oid("2.5.29.32.0")
    mapping = tlv(der.SEQUENCE, tlv(der.SEQUENCE, any_policy + _encode_oid("2.23.140.1.2.1")))
    mapped = extended(with_policies, ca.key, "2.5.29.33", mapping)
    c.add("extensions/policies-and-mapping-from-any-policy", [ca], [leaf(mid), mapped])
    # an RSA-PSS signature declaring trailerField 2 (Go: only 1)
    pss_root = root(key=rsa.generate_private_key(65537, 2048))
    sha256 = _encode_oid("2.16.840.1.101.3.4.2.1")
    mgf = tlv(der.SEQUENCE, _encode_oid("1.2.840.113549.1.1.8") + tlv(der.SEQUENCE, sha256 + b"\x05\x00"))
    params = tlv(0xA0, tlv(der.SEQUENCE, sha256 + b"\x05\x00")) + tlv(0xA1, mgf) + tlv(0xA2, _integer(32))
    for label, trailer in (("1", b""), ("1-explicit", tlv(0xA3, _integer(1))), ("2", tlv(0xA3, _integer(2)))):
        pss_alg = tlv(der.SEQUENCE, _encode_oid("1.2.840.113549.1.1.10") + tlv(der.SEQUENCE, params + trailer))
        pss_leaf = resign(leaf(pss_root), pss_root.key, lambda f: f, pss_alg, pss=True)
        c.add(f"algorithms/rsa-pss-trailer-{label}", [pss_root], [pss_leaf])
    # two candidate chains through one intermediate key, one without clientAuth: Go answers IncompatibleUsage
    # only when every candidate failed on its usage (verify.go), not when the other failed its name constraints
    # or its policies
    shared = ec_key()
    server_only = make("shared-intermediate", ca, ca=True, key=shared, eku=[SERVER])
    fence = x509.NameConstraints([x509.DNSName("a.example")], None)
    fenced = make("shared-intermediate", ca, ca=True, key=shared, constraints=fence)
    strict = extended(make("shared-intermediate", ca, ca=True, key=shared), ca.key, "2.5.29.36", require.public_bytes())
    outside = leaf(server_only, san=[x509.DNSName("proxy.other.org")])
    c.add("eku/one-candidate-eku-other-constraints", [ca], [outside, server_only, fenced])
    c.add("eku/one-candidate-eku-other-policies", [ca], [outside, server_only, strict])
    server_too = make("shared-intermediate", ca, ca=True, key=shared, eku=[SERVER])
    c.add("eku/both-candidates-eku", [ca], [outside, server_only, server_too])
    # one presented intermediate with an RSA key over 8192 bits among normal certificates (crypto/tls refuses)
    modulus = (1 << 8193) | (int.from_bytes(bytes(range(256)) * 4, "big") % (1 << 8192)) | 1
    oversized = resign(make("oversized", ca, ca=True), ca.key, set_field(SPKI, rsa_public_key_info(modulus, 65537)))
    c.add("chains/one-oversized-rsa-intermediate", [ca], [leaf(mid), mid, oversized])
    c.add("chains/one-oversized-rsa-intermediate-first", [ca], [leaf(mid), oversized, mid])


def serve_argv(
    cert: Path, key: Path, requestheader_ca: Path, names: Sequence[str], client_ca: Path | None = None
) -> list[str]:
    """``secure-orca serve`` on an ephemeral loopback port, front-proxy mode only, with these credentials."""
    argv = [sys.executable, "-m", "secure_orca", "serve", "--bind-address", "127.0.0.1", "--secure-port", "0"]
    argv += ["--tls-cert-file", str(cert), "--tls-private-key-file", str(key)]
    argv += ["--requestheader-client-ca-file", str(requestheader_ca)]
    argv += ["--requestheader-allowed-names", ",".join(names)] if names else []
    argv += ["--client-ca-file", str(client_ca)] if client_ca else []
    argv += ["--feature-gates", "RequestCostAggregation=true", "--enable-endpoint-load-metrics"]
    # The cases decide load reports only: a front proxy that names no user falls through to anonymous.
    argv += ["--requestheader-missing-user=anonymous"]
    return [*argv, "--endpoint-load-metrics-auth", "front-proxy"]


def build() -> list[Case]:
    """Every case, freshly generated."""
    corpus = Corpus()
    for section in (
        _trustme_cases,
        _name_cases,
        _eku_cases,
        _constraint_cases,
        _extension_cases,
        _validity_cases,
        _algorithm_cases,
        _chain_cases,
        _bundle_cases,
        _mutation_cases,
    ):
        section(corpus)
    names = [case.name for case in corpus.cases]
    assert len(names) == len(set(names)), "case names must be unique"
    return corpus.cases
