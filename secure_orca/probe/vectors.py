"""Probe vectors (pure, no sockets): client identities, opt-in header and secret variants, and the ordered
vector list of one audit (client identity x opt-in header values x protocol x path), plus the positive control.

Secrets never appear in a vector's ``shown`` headers or its repr.
"""

from __future__ import annotations

import datetime as dt
import random
import string
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from cryptography.x509.oid import ExtendedKeyUsageOID

from secure_orca import pki
from secure_orca.orca import oob
from secure_orca.orca.headers import OPTIN_BYTES as OPTIN

Protocol = Literal["h2", "http/1.1", "h2c", "http/1.1-cleartext"]
PROTOCOLS: tuple[Protocol, ...] = ("h2", "http/1.1", "h2c", "http/1.1-cleartext")
CLEARTEXT: frozenset[str] = frozenset({"h2c", "http/1.1-cleartext"})
TLS_PROTOCOLS: tuple[Protocol, ...] = ("h2", "http/1.1")
DEFAULT_PATH = "/version"
DEFAULT_SECRET_LENGTH = 43  # pki.new_secret(): 32 random bytes, URL-safe base64
LONG_VALUE_LENGTH = 8000
_SECRET_ALPHABET = string.ascii_letters + string.digits + "-_"

Headers = tuple[tuple[bytes, bytes], ...]


# --- identities ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Identity:
    """A client identity: no certificate, a certificate file pair, or a certificate minted in memory."""

    name: str
    description: str
    cert: Path | None = None
    key: Path | None = None
    pem: tuple[bytes, bytes] | None = field(default=None, repr=False)  # (chain, key), minted by the probe

    @property
    def has_cert(self) -> bool:
        return self.cert is not None or self.pem is not None


NO_CERT = Identity("none", "no client certificate")


def _minted(name: str, description: str, leaf: pki.Issued) -> Identity:
    return Identity(name, description, pem=(leaf.cert_pem(), leaf.key_pem()))


def client_ca_identities(client_ca: pki.Issued, names: Sequence[str]) -> list[Identity]:
    """Certificates from the server's own client CA (ordinary users) named like the load balancer: the front
    proxy's or the load reader's Common Name. A server must tell the CA apart, not just the name."""
    return [
        _minted(f"client-ca-{name}", f"client-CA user certificate with CN={name}", pki.issue(client_ca, name))
        for name in dict.fromkeys(names)
    ]


def mint_identities(allowed_cn: str, issuer_cn: str | None = None) -> list[Identity]:
    """Certificates the probe makes itself, each carrying the allowed front-proxy CN. The 'wrong CA' is a new
    CA named like the real front-proxy CA (``issuer_cn``) when that name is known: same name, other key."""
    fake_ca = pki.make_ca(issuer_cn or "secure-orca-probe-unknown-ca")
    now = dt.datetime.now(dt.UTC)
    return [
        _minted("self-signed", f"self-signed certificate with CN={allowed_cn}", pki.make_ca(allowed_cn)),
        _minted("wrong-ca", f"CN={allowed_cn} from a CA the server does not trust", pki.issue(fake_ca, allowed_cn)),
        _minted(
            "expired",
            f"CN={allowed_cn}, expired yesterday, from an untrusted CA",
            pki.issue(fake_ca, allowed_cn, not_before=now - dt.timedelta(days=30), not_after=now - dt.timedelta(1)),
        ),
        _minted(
            "wrong-eku",
            f"CN={allowed_cn} with ExtKeyUsage serverAuth only, from an untrusted CA",
            pki.issue(fake_ca, allowed_cn, eku=(ExtendedKeyUsageOID.SERVER_AUTH,)),
        ),
    ]


# --- vectors (pure) --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Vector:
    """One attempt: who connects, with which opt-in headers, over which protocol, to which path.

    ``headers`` are the raw extra request headers (they may hold a secret, so they are left out of repr);
    ``shown`` is their display form with every secret replaced by its kind."""

    name: str
    description: str
    identity: str
    protocol: Protocol
    path: str
    headers: Headers = field(default=(), repr=False)
    shown: tuple[str, ...] = ()
    group: str = "header"
    variant: str = "TEXT"
    method: str = "GET"
    body: bytes = field(default=b"", repr=False)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "group": self.group,
            "variant": self.variant,
            "description": self.description,
            "identity": self.identity,
            "protocol": self.protocol,
            "method": self.method,
            "path": self.path,
            "headers": list(self.shown),
        }


@dataclass(frozen=True)
class Variant:
    """Opt-in header fields to send, as (name, value) pairs, with their display form."""

    name: str
    description: str
    fields: Headers
    shown: tuple[str, ...]


def variant(name: str, description: str, *values: bytes | tuple[bytes, bytes], shown: Sequence[str] = ()) -> Variant:
    """A variant from values of the opt-in header, or (name, value) pairs for other header names."""
    fields = tuple(v if isinstance(v, tuple) else (OPTIN, v) for v in values)
    display = tuple(shown) or tuple(f"{n.decode('latin-1')}: {printable(v)}" for n, v in fields)
    return Variant(name, description, fields, display)


def printable(value: bytes, limit: int = 80) -> str:
    if len(value) > limit:
        return f"{printable(value[:24])}...<{len(value)} bytes>"
    text = value.decode("latin-1")
    return text if text.isascii() and text.isprintable() else repr(value)[2:-1]


def secret_value(secret: str) -> bytes:
    return f"TEXT; secret={secret}".encode()


def _secret_variant(name: str, description: str, secret: str, kind: str) -> Variant:
    return variant(name, description, secret_value(secret), shown=(f"{OPTIN.decode()}: TEXT; secret=<{kind}>",))


NO_OPT_IN = variant("no-opt-in", "no opt-in header at all (a server must never report unasked)")
TEXT = variant("TEXT", "the supported opt-in value", b"TEXT")


def header_variants() -> list[Variant]:
    """Opt-in header values a client might try: formats, case, whitespace, duplicates, size, bytes."""
    long_value = b"TEXT; secret=" + b"A" * LONG_VALUE_LENGTH
    return [
        NO_OPT_IN,
        TEXT,
        variant("JSON", "the JSON format (a report for the entitled only)", b"JSON"),
        variant("BIN", "the BIN format (a report for the entitled only)", b"BIN"),
        variant("lowercase", "format token in lower case", b"text"),
        variant("leading-space", "leading whitespace", b" TEXT"),
        variant("trailing-space", "trailing whitespace", b"TEXT "),
        variant("duplicate", "the header twice", b"TEXT", b"TEXT"),
        variant("duplicate-mixed", "another format then TEXT", b"JSON", b"TEXT"),
        variant("comma-list", "two values in one field", b"TEXT, TEXT"),
        variant("name-mixed-case", "header name in mixed case", (b"Endpoint-Load-Metrics-Request", b"TEXT")),
        variant("name-upper-case", "header name in upper case", (OPTIN.upper(), b"TEXT")),
        variant("long-value", f"a {len(long_value)}-byte value", long_value),
        variant("non-ascii-utf8", "UTF-8 bytes after the token", "TEXT é".encode()),
        variant("non-ascii-latin1", "raw high bytes in a secret", b"TEXT; secret=\xff\xfe\xfd"),
        variant("empty", "an empty value", b""),
    ]


# --- the ecosystem's spellings and the out-of-band stream --------------------------------------------------

SPELLING_GROUP = "spelling"
OOB_GROUP = "oob"
FORMAT_HEADER = b"endpoint-load-metrics-format"  # vLLM (PR 24905) and Triton (PR 7839) read this one


def spelling_variants() -> list[Variant]:
    """Opt-ins other servers answer: ``endpoint-load-metrics-format`` with each format Envoy parses (TEXT, JSON,
    BIN) and the lower-case values those servers take. Any report they get names the spelling in the verdict."""
    values = (b"TEXT", b"JSON", b"BIN", b"text", b"json")
    found = [
        variant(f"format-{v.decode()}", f"{FORMAT_HEADER.decode()}: {v.decode()}", (FORMAT_HEADER, v)) for v in values
    ]
    # the same header as a server or a proxy in front of it may read it: another letter case (HTTP/1.1 names are
    # case-insensitive; Starlette, which vLLM reads it with, folds them), ``_`` for ``-`` (CGI, WSGI, nginx's
    # underscores_in_headers) and gRPC metadata's ``-bin`` suffix
    for name, spelled in DIALECT_SPELLINGS:
        found.append(variant(f"format-{name}", f"{spelled.decode()}: text", (spelled, b"text")))
    return found


DIALECT_SPELLINGS = (
    ("case", b"Endpoint-Load-Metrics-Format"),
    ("underscore", b"endpoint_load_metrics_format"),
    ("bin", b"endpoint-load-metrics-format-bin"),
)


GRPC = (b"content-type", b"application/grpc")


def oob_variants() -> list[Variant]:
    """StreamCoreMetrics as a bypass client opens it: a plain gRPC call, with another content type, with forged
    identity headers, with the in-band opt-in."""
    forged = ((b"x-remote-user", FORGED_USER.encode()), (b"x-remote-group", FORGED_GROUP.encode()))
    return [
        variant("grpc", "StreamCoreMetrics as a gRPC call", GRPC),
        variant("json-content-type", "StreamCoreMetrics as JSON", (b"content-type", b"application/json")),
        variant("identity-headers", "StreamCoreMetrics with forged identity headers", GRPC, *forged),
        variant("opt-in", "StreamCoreMetrics with the in-band opt-in", GRPC, (OPTIN, b"TEXT")),
    ]


LOAD_ENDPOINT_GROUP = "load-endpoint"
# The load endpoints model servers serve to anyone (orca.polled): SGLang's /v1/loads (PR 16976), also as
# Prometheus text, and Prometheus' /metrics (vLLM's gauges); with the spellings a gateway must read as the same
# path (a percent-encoded letter, a trailing or doubled ``/``, another letter case).
LOAD_ENDPOINTS = (
    "/v1/loads",
    "/v1/loads?format=prometheus",
    "/v1/load%73",
    "/v1//loads/",
    "/v1/LOADS",
    "/metrics",
    "/metrics/",
)


def load_endpoint_vectors() -> list[Vector]:
    """Each load endpoint asked by a client without a certificate and without an opt-in, as SGLang's own clients
    ask it (the endpoint needs none)."""
    return [
        _vector(NO_OPT_IN, NO_CERT, protocol, path, LOAD_ENDPOINT_GROUP)
        for path in LOAD_ENDPOINTS
        for protocol in TLS_PROTOCOLS
    ]


def flip(secret: str, index: int, rng: random.Random) -> str:
    """``secret`` with the character at ``index`` replaced by another character of the secret alphabet."""
    index %= len(secret)
    new = rng.choice([c for c in _SECRET_ALPHABET if c != secret[index]])
    return secret[:index] + new + secret[index + 1 :]


def random_secret(length: int, rng: random.Random) -> str:
    return "".join(rng.choice(_SECRET_ALPHABET) for _ in range(length))


def _near_misses(base: str, whose: str, label: str, rng: random.Random) -> list[tuple[str, str, str]]:
    """(name, description, value) of secrets one step away from ``base``: prefixes, one more, last changed."""
    return [
        (f"secret-{label}prefix-half", f"the first half of the {whose}", base[: len(base) // 2]),
        (f"secret-{label}prefix-all-but-one", f"the {whose} without its last character", base[:-1]),
        (f"secret-{label}extended", f"the {whose} with one character appended", base + "A"),
        (f"secret-{label}last-changed", f"the {whose} with its last character changed", flip(base, -1, rng)),
    ]


def secret_variants(guess: str | None, known: str | None, rng: random.Random) -> list[Variant]:
    """Secret guesses: empty, wrong (random, of the real length if known), the given candidate, and near misses
    of the candidate and of the real secret (which is otherwise only used by the positive control). The real
    secret itself is never a vector."""
    length = len(known) if known else DEFAULT_SECRET_LENGTH
    out = [
        _secret_variant("secret-empty", "an empty secret", "", "empty"),
        _secret_variant(
            "secret-wrong", f"a random wrong secret of {length} characters", random_secret(length, rng), "wrong"
        ),
    ]
    near: list[tuple[str, str, str]] = []
    if guess:
        if guess != known:
            out.append(_secret_variant("secret-guess", "the given candidate secret", guess, "guess"))
        near += _near_misses(guess, "candidate", "guess-", rng) if len(guess) >= 2 else []
    if known and len(known) >= 2:
        near += _near_misses(known, "real secret", "", rng)
    for name, description, value in near:
        if value != known:
            out.append(_secret_variant(name, description, value, name.removeprefix("secret-")))
    out.append(
        variant(
            "secret-duplicate",
            "a plain TEXT then a wrong secret, as two fields",
            b"TEXT",
            secret_value(random_secret(length, rng)),
            shown=(f"{OPTIN.decode()}: TEXT", f"{OPTIN.decode()}: TEXT; secret=<wrong>"),
        )
    )
    return out


# --- impersonation (kube's front-proxy identity headers, forged) ------------------------------------------

IMPERSONATION_GROUP = "impersonation"
SELF_SUBJECT_REVIEWS = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
REVIEW_BODY = b'{"kind":"SelfSubjectReview","apiVersion":"authentication.k8s.io/v1"}'
FORGED_USER = "system:admin"
FORGED_GROUP = "system:masters"
FORGED_EXTRA_KEY = "scopes"
FORGED_EXTRA = "probe-forged-extra"
FORGED_UID = "probe-forged-uid"
FORGED_ROOT = "root"  # the second value of a duplicated user header
FORGED_VALUES = frozenset({FORGED_USER, FORGED_GROUP, FORGED_EXTRA, FORGED_UID, FORGED_ROOT})


H2_SPELLINGS = frozenset({"forged-lower-case", "forged-duplicates"})  # HTTP/2 field names must be lower case


def impersonation_variants() -> list[Variant]:
    """Forged identity headers as a bypass client might send them: every name in several spellings, and
    duplicated; each with the plain opt-in, so the load verdict is read beside the identity. Only the
    lower-case ones go over HTTP/2, where any other spelling is a malformed request (the `header` group
    already checks that it is refused); over HTTP/1.1, names are case-insensitive and every spelling counts."""
    values = (FORGED_USER.encode(), FORGED_GROUP.encode(), FORGED_EXTRA.encode(), FORGED_UID.encode())
    spellings = {
        "plain": (b"X-Remote-User", b"X-Remote-Group", b"X-Remote-Extra-Scopes", b"X-Remote-Uid"),
        "lower-case": (b"x-remote-user", b"x-remote-group", b"x-remote-extra-scopes", b"x-remote-uid"),
        "upper-case": (b"X-REMOTE-USER", b"X-REMOTE-GROUP", b"X-REMOTE-EXTRA-SCOPES", b"X-REMOTE-UID"),
        "mixed-case": (b"x-ReMoTe-uSeR", b"X-rEmOtE-gRoUp", b"x-REMOTE-extra-Scopes", b"x-Remote-UID"),
    }
    forged = {name: tuple(zip(names, values, strict=True)) for name, names in spellings.items()}
    out = [
        variant(f"forged-{name}", f"forged identity headers, names in {name}", b"TEXT", *fields)
        for name, fields in forged.items()
    ]
    duplicated = (*forged["lower-case"], (b"x-remote-user", FORGED_ROOT.encode()), (b"x-remote-group", values[1]))
    out.append(variant("forged-duplicates", "forged identity headers, each name twice", b"TEXT", *duplicated))
    return out


def _vector(
    v: Variant, identity: Identity, protocol: Protocol, path: str, group: str, method: str = "GET", body: bytes = b""
) -> Vector:
    where = "" if path == DEFAULT_PATH else f" {path}"
    return Vector(
        name=f"{group}:{v.name}/{identity.name}/{protocol}{where}",
        description=f"{v.description}; {identity.description}; {protocol}",
        identity=identity.name,
        protocol=protocol,
        path=path,
        headers=v.fields,
        shown=v.shown,
        group=group,
        variant=v.name,
        method=method,
        body=body,
    )


def _asking(body: bytes) -> Callable[[Variant, Identity, Protocol, str, str], Vector]:
    """How the vectors to the audited paths are sent: GET, or POST with ``body``."""

    def at(v: Variant, identity: Identity, protocol: Protocol, path: str, group: str) -> Vector:
        return _vector(v, identity, protocol, path, group, "POST" if body else "GET", body)

    return at


def _impersonation(v: Variant, identity: Identity, protocol: Protocol, group: str) -> Vector:
    return _vector(v, identity, protocol, SELF_SUBJECT_REVIEWS, group, "POST", REVIEW_BODY)


def build_vectors(
    paths: Sequence[str],
    identities: Sequence[Identity],
    *,
    secret_guess: str | None = None,
    known_secret: str | None = None,
    seed: int | None = None,
    body: bytes = b"",
) -> list[Vector]:
    """Every vector of one audit, in order (pure apart from the random wrong secrets). With ``body``, every
    vector sent to ``paths`` is a POST of it (a model server's completion endpoint answers nothing else)."""
    rng = random.Random(seed)
    first = paths[0] if paths else DEFAULT_PATH
    out: list[Vector] = []
    at = _asking(body)
    for identity in identities:
        for protocol in TLS_PROTOCOLS:
            out.append(at(TEXT, identity, protocol, first, "identity"))
    for v in header_variants():
        for protocol in TLS_PROTOCOLS:
            out.append(at(v, NO_CERT, protocol, first, "header"))
    for v in secret_variants(secret_guess, known_secret, rng):
        for protocol in TLS_PROTOCOLS:
            out.append(at(v, NO_CERT, protocol, first, "secret"))
    for path in paths[1:]:
        for v in (NO_OPT_IN, TEXT):
            for protocol in TLS_PROTOCOLS:
                out.append(at(v, NO_CERT, protocol, path, "path"))
    for protocol in ("h2c", "http/1.1-cleartext"):
        out.append(at(TEXT, NO_CERT, protocol, first, "cleartext"))  # type: ignore[arg-type]
    for v in spelling_variants():
        for protocol in TLS_PROTOCOLS:
            out.append(at(v, NO_CERT, protocol, first, SPELLING_GROUP))
    frame = oob.request_frame(1.0)
    grpc, *others = oob_variants()
    for identity in identities:
        for protocol in TLS_PROTOCOLS:
            out.append(_vector(grpc, identity, protocol, oob.PATH, OOB_GROUP, "POST", frame))
    for v in others:
        out.append(_vector(v, NO_CERT, "h2", oob.PATH, OOB_GROUP, "POST", frame))
    out += load_endpoint_vectors()
    for identity in identities:
        for v in impersonation_variants():
            for protocol in TLS_PROTOCOLS:
                if protocol == "http/1.1" or v.name in H2_SPELLINGS:
                    out.append(_impersonation(v, identity, protocol, IMPERSONATION_GROUP))
    return out


def impersonation_controls(lb_identity: Identity | None) -> list[Vector]:
    """The positive control of impersonation: with the load balancer's front-proxy certificate the forged
    identity must be believed, since that is what the certificate is for (kube's requestheader)."""
    if lb_identity is None:
        return []
    lower_case = next(v for v in impersonation_variants() if v.name == "forged-lower-case")  # valid HTTP/2 names
    return [_impersonation(lower_case, lb_identity, "h2", "control")]


def control_vectors(
    path: str, lb_identity: Identity | None, lb_secret: str | None, header_only: bool = False, body: bytes = b""
) -> list[Vector]:
    """The positive control: the load balancer's own credentials must get a report (with ``header_only``, the
    bare opt-in is the load balancer's whole credential: KEP option 1)."""
    at = _asking(body)
    out = [at(TEXT, NO_CERT, "h2", path, "control")] if header_only else []
    if lb_identity is not None:
        out.append(at(TEXT, lb_identity, "h2", path, "control"))
        out.append(_vector(oob_variants()[0], lb_identity, "h2", oob.PATH, "control", "POST", oob.request_frame(1.0)))
    if lb_secret is not None:
        v = _secret_variant("secret", "the load balancer's secret", lb_secret, "redacted")
        out.append(at(v, NO_CERT, "h2", path, "control"))
    return out
