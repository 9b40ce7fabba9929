"""Bypass-client audit: can a client that reaches an HTTPS endpoint read ORCA load metrics?

The audit sends a list of named vectors (client identity x opt-in header values x protocol x path) to one URL
and looks for a leak: any ``endpoint-load-metrics`` or ``endpoint-load-metrics-bin`` header, or ORCA data in
trailers. A positive control with the load balancer's credentials first shows that the feature is on; without
one (or when it fails) a clean result is *inconclusive*. A timing check compares wrong secrets that differ
early against ones that differ late over one kept-alive HTTP/2 connection (Mann-Whitney U test).

Layout: vector definitions, classification, statistics and the verdict are pure (no sockets); the transport
is a small sans-I/O h2 client over an ``ssl`` socket and a raw HTTP/1.1 client, every socket with a timeout.
The probe never connects anywhere but the URL it is given (and ``control_url`` when one is given).
Secrets never appear in a vector's ``shown`` headers, its repr, or the JSON.
"""

from __future__ import annotations

import datetime as dt
import math
import os
import random
import socket
import ssl
import string
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import h2.config
import h2.connection
import h2.events
import h2.exceptions
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID
from hpack import NeverIndexedHeaderTuple

from . import pki
from .authz import common_name
from .optin import HEADER_BYTES as OPTIN
from .report import HEADER, ORCA_HEADERS, OrcaFormatError, parse_text

Protocol = Literal["h2", "http/1.1", "h2c", "http/1.1-cleartext"]
Outcome = Literal["leak", "no-report", "refused-handshake", "not-accepted", "error"]
PROTOCOLS: tuple[Protocol, ...] = ("h2", "http/1.1", "h2c", "http/1.1-cleartext")
CLEARTEXT: frozenset[str] = frozenset({"h2c", "http/1.1-cleartext"})
TLS_PROTOCOLS: tuple[Protocol, ...] = ("h2", "http/1.1")
DEFAULT_PATH = "/version"
DEFAULT_SECRET_LENGTH = 43  # pki.new_secret(): 32 random bytes, URL-safe base64
LONG_VALUE_LENGTH = 8000
MAX_BODY = 1 << 20
TIMING_ALPHA = 0.001
USER_AGENT = b"secure-orca-probe/0.1"
_SECRET_ALPHABET = string.ascii_letters + string.digits + "-_"
_TEXT_HEADER = HEADER.encode()

Headers = tuple[tuple[bytes, bytes], ...]


class ProbeError(ValueError):
    """Unusable probe input (URL, credential file); the message is one line and never holds a secret."""


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

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "group": self.group,
            "variant": self.variant,
            "description": self.description,
            "identity": self.identity,
            "protocol": self.protocol,
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
    display = tuple(shown) or tuple(f"{n.decode('latin-1')}: {_printable(v)}" for n, v in fields)
    return Variant(name, description, fields, display)


def _printable(value: bytes, limit: int = 80) -> str:
    if len(value) > limit:
        return f"{_printable(value[:24])}...<{len(value)} bytes>"
    text = value.decode("latin-1")
    return text if text.isascii() and text.isprintable() else repr(value)[2:-1]


def _secret_value(secret: str) -> bytes:
    return f"TEXT; secret={secret}".encode()


def _secret_variant(name: str, description: str, secret: str, kind: str) -> Variant:
    return variant(name, description, _secret_value(secret), shown=(f"{OPTIN.decode()}: TEXT; secret=<{kind}>",))


NO_OPT_IN = variant("no-opt-in", "no opt-in header at all (a server must never report unasked)")
TEXT = variant("TEXT", "the supported opt-in value", b"TEXT")


def header_variants() -> list[Variant]:
    """Opt-in header values a client might try: formats, case, whitespace, duplicates, size, bytes."""
    long_value = b"TEXT; secret=" + b"A" * LONG_VALUE_LENGTH
    return [
        NO_OPT_IN,
        TEXT,
        variant("JSON", "unsupported format token", b"JSON"),
        variant("BIN", "unsupported format token", b"BIN"),
        variant("lowercase", "format token in lower case", b"text"),
        variant("leading-space", "leading whitespace", b" TEXT"),
        variant("trailing-space", "trailing whitespace", b"TEXT "),
        variant("duplicate", "the header twice", b"TEXT", b"TEXT"),
        variant("duplicate-mixed", "an unsupported format then TEXT", b"JSON", b"TEXT"),
        variant("comma-list", "two values in one field", b"TEXT, TEXT"),
        variant("name-mixed-case", "header name in mixed case", (b"Endpoint-Load-Metrics-Request", b"TEXT")),
        variant("name-upper-case", "header name in upper case", (OPTIN.upper(), b"TEXT")),
        variant("long-value", f"a {len(long_value)}-byte value", long_value),
        variant("non-ascii-utf8", "UTF-8 bytes after the token", "TEXT é".encode()),
        variant("non-ascii-latin1", "raw high bytes in a secret", b"TEXT; secret=\xff\xfe\xfd"),
        variant("empty", "an empty value", b""),
    ]


def _flip(secret: str, index: int, rng: random.Random) -> str:
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
        (f"secret-{label}last-changed", f"the {whose} with its last character changed", _flip(base, -1, rng)),
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
            _secret_value(random_secret(length, rng)),
            shown=(f"{OPTIN.decode()}: TEXT", f"{OPTIN.decode()}: TEXT; secret=<wrong>"),
        )
    )
    return out


def _vector(v: Variant, identity: Identity, protocol: Protocol, path: str, group: str) -> Vector:
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
    )


def build_vectors(
    paths: Sequence[str],
    identities: Sequence[Identity],
    *,
    secret_guess: str | None = None,
    known_secret: str | None = None,
    seed: int | None = None,
) -> list[Vector]:
    """Every vector of one audit, in order (pure apart from the random wrong secrets)."""
    rng = random.Random(seed)
    first = paths[0] if paths else DEFAULT_PATH
    out: list[Vector] = []
    for identity in identities:
        for protocol in TLS_PROTOCOLS:
            out.append(_vector(TEXT, identity, protocol, first, "identity"))
    for v in header_variants():
        for protocol in TLS_PROTOCOLS:
            out.append(_vector(v, NO_CERT, protocol, first, "header"))
    for v in secret_variants(secret_guess, known_secret, rng):
        for protocol in TLS_PROTOCOLS:
            out.append(_vector(v, NO_CERT, protocol, first, "secret"))
    for path in paths[1:]:
        for v in (NO_OPT_IN, TEXT):
            for protocol in TLS_PROTOCOLS:
                out.append(_vector(v, NO_CERT, protocol, path, "path"))
    for protocol in ("h2c", "http/1.1-cleartext"):
        out.append(_vector(TEXT, NO_CERT, protocol, first, "cleartext"))  # type: ignore[arg-type]
    return out


def control_vectors(
    path: str, lb_identity: Identity | None, lb_secret: str | None, header_only: bool = False
) -> list[Vector]:
    """The positive control: the load balancer's own credentials must get a report (with ``header_only``, the
    bare opt-in is the load balancer's whole credential: KEP option 1)."""
    out = [_vector(TEXT, NO_CERT, "h2", path, "control")] if header_only else []
    if lb_identity is not None:
        out.append(_vector(TEXT, lb_identity, "h2", path, "control"))
    if lb_secret is not None:
        v = _secret_variant("secret", "the load balancer's secret", lb_secret, "redacted")
        out.append(_vector(v, NO_CERT, "h2", path, "control"))
    return out


# --- responses and classification (pure) -----------------------------------------------------------------


@dataclass
class Exchange:
    """What came back for one request; ``error_kind`` is set when no complete response arrived."""

    status: int | None = None
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    trailers: list[tuple[bytes, bytes]] = field(default_factory=list)
    alpn: str | None = None
    error_kind: str | None = None  # connect, server-cert, handshake, not-h2, reset, closed, timeout, protocol
    error: str = ""


def _looks_like_report(value: bytes) -> bool:
    try:
        parse_text(value.decode("latin-1").strip())
    except OrcaFormatError:
        return False
    return True


def find_orca(headers: Iterable[tuple[bytes, bytes]], trailers: Iterable[tuple[bytes, bytes]]) -> list[str]:
    """Where ORCA data appears: an ORCA header name in headers or trailers, or a TEXT report in any trailer."""
    found = []
    for where, fields in (("header", headers), ("trailer", trailers)):
        for name, value in fields:
            lowered = name.strip().lower().decode("latin-1")
            if lowered in ORCA_HEADERS or (where == "trailer" and _looks_like_report(value)):
                found.append(f"{where} {lowered}")
    return found


def classify(exchange: Exchange, protocol: Protocol, with_cert: bool = False) -> tuple[Outcome, str]:
    """The outcome of one vector and a one-line detail. ``with_cert``: the client presented a certificate, so a
    connection closed before any response counts as a refused handshake (with TLS 1.3 the server refuses a
    client certificate after the client's side of the handshake has completed)."""
    leaks = find_orca(exchange.headers, exchange.trailers)
    if leaks:
        return "leak", ", ".join(leaks)
    if exchange.status is not None and exchange.error_kind is None:
        return "no-report", f"status {exchange.status}"
    kind, why = exchange.error_kind or "protocol", exchange.error
    if protocol in CLEARTEXT and kind not in ("connect",):
        return "not-accepted", f"cleartext {kind}: {why}".strip(": ")
    if kind == "handshake":
        return "refused-handshake", f"TLS handshake failed: {why}"
    if kind == "closed" and with_cert and exchange.status is None:
        return "refused-handshake", "connection closed right after the handshake (client certificate refused)"
    if kind in ("not-h2", "reset", "closed") and exchange.status is None:
        return "not-accepted", f"{kind}: {why}".strip(": ")
    return "error", f"{kind}: {why}".strip(": ")


def report_evidence(exchange: Exchange) -> str:
    """The first leaked value, shortened (it is the server's load, not a secret of ours)."""
    for name, value in [*exchange.headers, *exchange.trailers]:
        if name.strip().lower().decode("latin-1") in ORCA_HEADERS:
            return _printable(value, 200)
    return ""


# --- statistics (pure) -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class UTest:
    """Two-sided Mann-Whitney U test (normal approximation with tie and continuity correction)."""

    u: float
    z: float
    p_value: float


def mann_whitney_u(a: Sequence[float], b: Sequence[float]) -> UTest:
    """Do ``a`` and ``b`` come from the same distribution? ``u`` is the U statistic of ``a``."""
    n1, n2 = len(a), len(b)
    if n1 == 0 or n2 == 0:
        raise ValueError("both samples need at least one value")
    pooled = sorted([(x, 0) for x in a] + [(x, 1) for x in b])
    n = n1 + n2
    rank_sum_a = 0.0
    tie_term = 0.0
    i = 0
    while i < n:
        j = i
        while j + 1 < n and pooled[j + 1][0] == pooled[i][0]:
            j += 1
        rank = (i + j) / 2 + 1  # average rank of the tied run i..j (1-based)
        rank_sum_a += rank * sum(1 for k in range(i, j + 1) if pooled[k][1] == 0)
        t = j - i + 1
        tie_term += t**3 - t
        i = j + 1
    u = rank_sum_a - n1 * (n1 + 1) / 2
    mean = n1 * n2 / 2
    variance = n1 * n2 / 12 * ((n + 1) - tie_term / (n * (n - 1))) if n > 1 else 0.0
    if variance <= 0:
        return UTest(u, 0.0, 1.0)
    delta = u - mean
    z = (abs(delta) - 0.5) / math.sqrt(variance) if abs(delta) >= 0.5 else 0.0
    z = math.copysign(z, delta)
    return UTest(u, z, min(1.0, math.erfc(abs(z) / math.sqrt(2))))


def median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


# --- results and verdict (pure) --------------------------------------------------------------------------


@dataclass(frozen=True)
class VectorResult:
    vector: Vector
    outcome: Outcome
    detail: str
    status: int | None = None
    alpn: str | None = None
    evidence: str = ""
    report_ok: bool | None = None  # for a leak or a control: does the report pass Envoy's TEXT rules?
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            **self.vector.to_json(),
            "outcome": self.outcome,
            "detail": self.detail,
            "status": self.status,
            "alpn": self.alpn,
            "evidence": self.evidence,
            "report_valid": self.report_ok,
            "seconds": round(self.seconds, 4),
        }


@dataclass(frozen=True)
class TimingResult:
    """Wrong secrets differing at the first vs the last character, interleaved over one connection."""

    samples_per_kind: int
    secret_length: int
    length_known: bool
    median_early_us: float
    median_late_us: float
    test: UTest
    reconnects: int = 0

    @property
    def suspicious(self) -> bool:
        return self.test.p_value < TIMING_ALPHA

    def to_json(self) -> dict[str, Any]:
        return {
            "samples_per_kind": self.samples_per_kind,
            "secret_length": self.secret_length,
            "length_known": self.length_known,
            "median_early_us": round(self.median_early_us, 1),
            "median_late_us": round(self.median_late_us, 1),
            "u": self.test.u,
            "z": round(self.test.z, 3),
            "p_value": self.test.p_value,
            "alpha": TIMING_ALPHA,
            "suspicious": self.suspicious,
            "reconnects": self.reconnects,
        }


Verdict = Literal["leak", "no-leak", "inconclusive", "unreachable"]
EXIT_CODES: dict[str, int] = {"no-leak": 0, "leak": 1, "inconclusive": 2, "unreachable": 2}


def decide(
    controls: Sequence[VectorResult], results: Sequence[VectorResult], unreachable: str | None = None
) -> tuple[Verdict, str]:
    """The summary verdict and its reason. A leak is proof whatever else happened; a clean run counts only
    with a positive control that got a report and with every vector tested."""
    leaks = [r for r in results if r.outcome == "leak"]
    if leaks:
        return "leak", f"{len(leaks)} of {len(results)} vectors got load metrics (first: {leaks[0].vector.name})"
    if unreachable is not None:
        return "unreachable", unreachable
    if not controls:
        return "inconclusive", "no leak found, but no positive control (give --lb-cert/--lb-key or --lb-secret-file)"
    if not any(c.outcome == "leak" for c in controls):
        return (
            "inconclusive",
            "no leak found, but the positive control got no report (feature off or LB credentials wrong)",
        )
    errors = [r for r in results if r.outcome == "error"]
    if errors:
        return "inconclusive", f"no leak found, but {len(errors)} vectors ended in error (first: {errors[0].detail})"
    return "no-leak", f"none of {len(results)} vectors got load metrics; the positive control did"


@dataclass
class ProbeResult:
    url: str
    verdict: Verdict
    reason: str
    controls: list[VectorResult]
    results: list[VectorResult]
    timing: TimingResult | None = None
    timing_error: str = ""
    seconds: float = 0.0

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict]

    @property
    def control_ok(self) -> bool:
        return any(c.outcome == "leak" for c in self.controls)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.results:
            out[r.outcome] = out.get(r.outcome, 0) + 1
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "verdict": self.verdict,
            "exit_code": self.exit_code,
            "reason": self.reason,
            "control_ok": self.control_ok,
            "counts": self.counts(),
            "controls": [c.to_json() for c in self.controls],
            "vectors": [r.to_json() for r in self.results],
            "timing": self.timing.to_json() if self.timing else None,
            "timing_error": self.timing_error,
            "seconds": round(self.seconds, 3),
        }


# --- transport -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """An ``https://host[:port][/path]`` URL split for connecting."""

    url: str
    host: str
    port: int
    authority: str
    path: str

    @classmethod
    def parse(cls, url: str) -> Target:
        parts = urlsplit(url)
        if parts.scheme != "https":
            raise ProbeError(f"{url!r}: only https:// URLs can be probed")
        try:
            port = parts.port or 443
        except ValueError:
            raise ProbeError(f"{url!r}: invalid port") from None
        if not parts.hostname:
            raise ProbeError(f"{url!r}: no host")
        return cls(url, parts.hostname, port, parts.netloc.rpartition("@")[2], parts.path or "")


class Connector:
    """TLS contexts per (identity, ALPN), built once; connects only to ``target``."""

    def __init__(self, target: Target, cacert: Path | None, insecure: bool, timeout: float) -> None:
        self.target = target
        self.cacert = cacert
        self.insecure = insecure
        self.timeout = timeout
        self._contexts: dict[tuple[str, str], ssl.SSLContext] = {}

    def context(self, identity: Identity, alpn: str) -> ssl.SSLContext:
        key = (identity.name, alpn)
        if key not in self._contexts:
            self._contexts[key] = client_context(self.cacert, self.insecure, identity, [alpn])
        return self._contexts[key]

    def tcp(self) -> socket.socket:
        sock = socket.create_connection((self.target.host, self.target.port), timeout=self.timeout)
        sock.settimeout(self.timeout)
        return sock

    def tls(self, identity: Identity, alpn: str) -> ssl.SSLSocket:
        raw = self.tcp()
        try:
            sock = self.context(identity, alpn).wrap_socket(raw, server_hostname=self.target.host)
        except BaseException:
            raw.close()
            raise
        return sock


def client_context(cacert: Path | None, insecure: bool, identity: Identity, alpn: list[str]) -> ssl.SSLContext:
    """A client context; minted keys are written to a private temporary directory only while loading."""
    context = ssl.create_default_context(cafile=str(cacert) if cacert else None)
    if insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(alpn)
    if identity.pem is not None:
        with tempfile.TemporaryDirectory(prefix="secure-orca-probe-") as tmp:
            cert, key = Path(tmp) / "client.crt", Path(tmp) / "client.key"
            cert.write_bytes(identity.pem[0])
            fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as handle:
                handle.write(identity.pem[1])
            context.load_cert_chain(cert, key)
    elif identity.cert is not None:
        context.load_cert_chain(identity.cert, identity.key)
    return context


def _request_headers(target: Target, path: str, extra: Headers, scheme: bytes = b"https") -> list[Any]:
    base = [
        (b":method", b"GET"),
        (b":scheme", scheme),
        (b":authority", target.authority.encode()),
        (b":path", path.encode()),
        (b"user-agent", USER_AGENT),
        (b"te", b"trailers"),
    ]
    # Opt-in values may hold a secret: never let HPACK index them (it also keeps timing samples comparable).
    return base + [NeverIndexedHeaderTuple(n, v) if n.lower() == OPTIN else (n, v) for n, v in extra]


class H2Client:
    """A minimal HTTP/2 client over one socket (h2 is sans-I/O): sequential GETs, headers and trailers kept
    exactly as received. Outbound validation is off so malformed variants reach the server as written."""

    def __init__(self, sock: socket.socket, target: Target) -> None:
        self.sock = sock
        self.target = target
        self.scheme = b"https" if isinstance(sock, ssl.SSLSocket) else b"http"
        config = h2.config.H2Configuration(
            client_side=True,
            header_encoding=None,
            validate_outbound_headers=False,
            normalize_outbound_headers=False,
            validate_inbound_headers=False,
        )
        self.conn = h2.connection.H2Connection(config=config)
        self.conn.initiate_connection()
        self._flush()
        self.closed = False

    def _flush(self) -> None:
        data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    def get(self, path: str, extra: Headers) -> Exchange:
        """One request; raises OSError/ssl.SSLError/h2 errors to the caller, returns what arrived otherwise."""
        out = Exchange()
        stream = self.conn.get_next_available_stream_id()
        self.conn.send_headers(stream, _request_headers(self.target, path, extra, self.scheme), end_stream=True)
        self._flush()
        body = 0
        while True:
            data = self.sock.recv(65536)
            if not data:
                self.closed = True
                out.error_kind, out.error = "closed", "connection closed before the response ended"
                return out
            try:
                events = self.conn.receive_data(data)
            except h2.exceptions.ProtocolError:
                if not self.closed:
                    raise
                # h2 accepts no frame after a GOAWAY, even for a stream the server still answers
                out.error_kind, out.error = "closed", "GOAWAY before the response ended"
                return out
            for event in events:
                if isinstance(event, h2.events.ResponseReceived) and event.stream_id == stream:
                    out.headers = [(bytes(n), bytes(v)) for n, v in event.headers]
                    out.status = _status(out.headers)
                elif isinstance(event, h2.events.TrailersReceived) and event.stream_id == stream:
                    out.trailers = [(bytes(n), bytes(v)) for n, v in event.headers]
                elif isinstance(event, h2.events.DataReceived):
                    self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                    body += len(event.data)
                elif isinstance(event, h2.events.StreamEnded) and event.stream_id == stream:
                    self._flush()
                    return out
                elif isinstance(event, h2.events.StreamReset) and event.stream_id == stream:
                    out.error_kind, out.error = "reset", f"stream reset ({_code(event.error_code)})"
                    return out
                elif isinstance(event, h2.events.ConnectionTerminated):
                    self.closed = True
                    if event.last_stream_id is None or event.last_stream_id < stream:
                        out.error_kind, out.error = "reset", f"GOAWAY ({_code(event.error_code)})"
                        return out
            self._flush()
            if body > MAX_BODY:
                out.error_kind, out.error = "protocol", "response body too large"
                return out

    def close(self) -> None:
        try:
            self.conn.close_connection()
            self._flush()
        except (OSError, h2.exceptions.ProtocolError):
            pass
        self.sock.close()


def _code(code: Any) -> str:
    return getattr(code, "name", str(code))


def _status(headers: Sequence[tuple[bytes, bytes]]) -> int | None:
    for name, value in headers:
        if name == b":status":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def http1_request(target: Target, path: str, extra: Headers) -> bytes:
    lines = [
        f"GET {path} HTTP/1.1".encode(),
        b"Host: " + target.authority.encode(),
        b"User-Agent: " + USER_AGENT,
        b"Accept: */*",
        b"TE: trailers",
        b"Connection: close, TE",
        *(name + b": " + value for name, value in extra),
    ]
    return b"\r\n".join(lines) + b"\r\n\r\n"


def _parse_fields(block: bytes) -> list[tuple[bytes, bytes]]:
    fields = []
    for line in block.split(b"\r\n"):
        name, sep, value = line.partition(b":")
        if sep:
            fields.append((name.strip().lower(), value.strip()))
    return fields


def parse_http1_response(raw: bytes) -> Exchange:
    """Status, headers and (chunked) trailers of a raw HTTP/1.1 response; tolerant of a truncated body."""
    if not raw:
        return Exchange(error_kind="closed", error="connection closed without a response")
    head, sep, rest = raw.partition(b"\r\n\r\n")
    status_line, _, block = head.partition(b"\r\n")
    parts = status_line.split(b" ", 2)
    if not sep or len(parts) < 2 or not parts[0].startswith(b"HTTP/") or not parts[1].isdigit():
        return Exchange(error_kind="protocol", error="no HTTP/1.1 response")
    out = Exchange(status=int(parts[1]), headers=_parse_fields(block))
    chunked = any(n == b"transfer-encoding" and b"chunked" in v.lower() for n, v in out.headers)
    while chunked:
        size_line, sep, rest = rest.partition(b"\r\n")
        try:
            size = int(size_line.split(b";")[0].strip(), 16)
        except ValueError:
            break
        if not sep:
            break
        if size == 0:
            trailer_block = rest.partition(b"\r\n\r\n")[0] if rest.strip() else b""
            out.trailers = _parse_fields(trailer_block)
            break
        rest = rest[size + 2 :]
    return out


def http1_complete(raw: bytes) -> bool:
    """Whether ``raw`` holds a whole response (by Content-Length or the last chunk), so no need to wait for EOF."""
    head, sep, rest = raw.partition(b"\r\n\r\n")
    if not sep:
        return False
    fields = _parse_fields(head.partition(b"\r\n")[2])
    for name, value in fields:
        if name == b"transfer-encoding" and b"chunked" in value.lower():
            return (rest.startswith(b"0\r\n") or b"\r\n0\r\n" in rest) and rest.endswith(b"\r\n\r\n")
    for name, value in fields:
        if name == b"content-length" and value.isdigit():
            return len(rest) >= int(value)
    return False


def _recv_response(sock: socket.socket, limit: int = MAX_BODY) -> bytes:
    buffer = b""
    while len(buffer) < limit and not http1_complete(buffer):
        try:
            data = sock.recv(65536)
        except ssl.SSLZeroReturnError:
            break
        if not data:
            break
        buffer += data
    return buffer


# --- running ---------------------------------------------------------------------------------------------


def _error(kind: str, error: BaseException | str) -> Exchange:
    text = error if isinstance(error, str) else (str(error) or type(error).__name__)
    return Exchange(error_kind=kind, error=" ".join(text.split())[:160])


def _tls_error(error: ssl.SSLError) -> Exchange:
    if isinstance(error, ssl.SSLCertVerificationError):
        return _error("server-cert", f"server certificate not trusted: {error.verify_message}")
    return _error("handshake", error.reason or str(error))


def exchange(connector: Connector, identity: Identity, vector: Vector) -> Exchange:
    """Send one vector on a fresh connection and collect the response (errors become an Exchange)."""
    target = connector.target
    try:
        if vector.protocol in CLEARTEXT:
            sock: socket.socket = connector.tcp()
        else:
            try:
                sock = connector.tls(identity, "h2" if vector.protocol == "h2" else "http/1.1")
            except ssl.SSLError as error:
                return _tls_error(error)
    except (TimeoutError, OSError) as error:
        return _error("connect", error)
    alpn = sock.selected_alpn_protocol() if isinstance(sock, ssl.SSLSocket) else None
    try:
        if vector.protocol in ("h2", "h2c"):
            if vector.protocol == "h2" and alpn != "h2":
                return _error("not-h2", f"server negotiated {alpn or 'no ALPN protocol'}")
            client = H2Client(sock, target)
            result = client.get(vector.path, vector.headers)
        else:
            sock.sendall(http1_request(target, vector.path, vector.headers))
            result = parse_http1_response(_recv_response(sock))
        result.alpn = alpn
        return result
    except ssl.SSLError as error:
        # TLS 1.3: a client certificate is refused after the client's side of the handshake has finished.
        return _tls_error(error)
    except TimeoutError:
        return _error("timeout", f"no complete response within {connector.timeout:g}s")
    except (ConnectionResetError, BrokenPipeError, ConnectionAbortedError) as error:
        return _error("closed", error)
    except (OSError, h2.exceptions.ProtocolError) as error:
        return _error("protocol", error)
    finally:
        sock.close()


def run_vector(connector: Connector, identities: dict[str, Identity], vector: Vector) -> VectorResult:
    start = time.perf_counter()
    got = exchange(connector, identities[vector.identity], vector)
    outcome, detail = classify(got, vector.protocol, identities[vector.identity].has_cert)
    evidence = report_evidence(got) if outcome == "leak" else ""
    report_ok = None
    if evidence:
        report_ok = any(_looks_like_report(v) for n, v in got.headers if n.lower() == _TEXT_HEADER)
    return VectorResult(vector, outcome, detail, got.status, got.alpn, evidence, report_ok, time.perf_counter() - start)


def timing_check(
    connector: Connector,
    path: str,
    samples: int,
    known_secret: str | None,
    seed: int | None = None,
    warmup: int = 20,
) -> TimingResult:
    """Interleave wrong secrets that differ from the real one (or a random base) at the first vs the last
    character over one kept-alive HTTP/2 connection, reconnecting if the server closes it."""
    rng = random.Random(seed)
    length = len(known_secret) if known_secret else DEFAULT_SECRET_LENGTH
    base = known_secret or random_secret(length, rng)
    times: dict[str, list[float]] = {"early": [], "late": []}
    client: H2Client | None = None
    reconnects = 0
    plan = ["warmup"] * warmup
    for _ in range(samples):
        pair = ["early", "late"]
        rng.shuffle(pair)
        plan += pair
    try:
        for kind in plan:
            while True:
                if client is None or client.closed:
                    if client is not None:
                        client.close()
                        reconnects += 1
                        if reconnects > 20:
                            raise ProbeError("the server kept closing the timing connection")
                    sock = connector.tls(NO_CERT, "h2")
                    if sock.selected_alpn_protocol() != "h2":
                        sock.close()
                        raise ProbeError("the server does not speak HTTP/2")
                    client = H2Client(sock, connector.target)
                guess = _flip(base, 0 if kind in ("early", "warmup") else -1, rng)
                start = time.perf_counter_ns()
                got = client.get(path, ((OPTIN, _secret_value(guess)),))
                elapsed = (time.perf_counter_ns() - start) / 1000
                if got.error_kind is None:
                    break
                client.closed = True  # retry this sample on a new connection
            if find_orca(got.headers, got.trailers):
                raise ProbeError("wrong secrets get a report: no secret is checked, nothing to time")
            if kind != "warmup":
                times[kind].append(elapsed)
    finally:
        if client is not None:
            client.close()
    test = mann_whitney_u(times["early"], times["late"])
    return TimingResult(
        samples, length, known_secret is not None, median(times["early"]), median(times["late"]), test, reconnects
    )


@dataclass(frozen=True)
class ProbeConfig:
    """Everything one audit needs. Secrets are excluded from repr."""

    cacert: Path | None = None
    insecure: bool = False
    lb_cert: Path | None = None
    lb_key: Path | None = None
    lb_secret: str | None = field(default=None, repr=False)
    client_cert: Path | None = None
    client_key: Path | None = None
    secret_guess: str | None = field(default=None, repr=False)
    paths: tuple[str, ...] = ()
    timing_samples: int = 500
    timeout: float = 5.0
    front_proxy_cn: str | None = None
    control_url: str | None = None
    seed: int | None = None
    lb_header_only: bool = False  # the LB sends the bare opt-in (option 1): that is the positive control


def _cert_names(path: Path | None) -> tuple[str | None, str | None]:
    """The subject CN and issuer CN of the first certificate in ``path``."""
    if path is None:
        return None, None
    cert = x509.load_pem_x509_certificate(path.read_bytes())
    issuer = cert.issuer.get_attributes_for_oid(x509.oid.NameOID.COMMON_NAME)
    return common_name(cert), (str(issuer[0].value) if issuer else None)


def identities_for(config: ProbeConfig) -> tuple[list[Identity], Identity | None]:
    """The identities the vectors use, and the load balancer's (for the control only)."""
    lb_cn, lb_issuer = _cert_names(config.lb_cert)
    allowed = config.front_proxy_cn or lb_cn or pki.FRONT_PROXY_CN
    out = [NO_CERT]
    if config.client_cert is not None:
        out.append(Identity("client", "the given client certificate", config.client_cert, config.client_key))
    out += mint_identities(allowed, lb_issuer)
    lb = Identity("lb", "the load balancer's certificate", config.lb_cert, config.lb_key) if config.lb_cert else None
    return out, lb


def default_paths(target: Target, paths: Sequence[str]) -> tuple[str, ...]:
    if paths:
        return tuple(paths)
    return (target.path,) if target.path not in ("", "/") else (DEFAULT_PATH,)


def probe(
    url: str,
    config: ProbeConfig,
    on_result: Callable[[int, int, VectorResult], None] | None = None,
    on_phase: Callable[[str], None] | None = None,
) -> ProbeResult:
    """Run the whole audit against ``url``: positive control, every vector, then the timing check.

    ``on_result(index, total, result)`` and ``on_phase(text)`` report progress. Raises ProbeError for unusable
    input before any traffic; network failures end up in the result (verdict ``unreachable``)."""
    started = time.perf_counter()
    target = Target.parse(url)
    control_target = Target.parse(config.control_url) if config.control_url else target
    paths = default_paths(target, config.paths)
    for path in paths:
        if not path.startswith("/"):
            raise ProbeError(f"path {path!r} must start with /")
    try:
        identities, lb = identities_for(config)
    except (OSError, ValueError) as error:
        raise ProbeError(f"cannot read the load balancer certificate: {error}") from None
    by_name = {i.name: i for i in identities}
    if lb is not None:
        by_name[lb.name] = lb
    connector = Connector(target, config.cacert, config.insecure, config.timeout)
    control_connector = Connector(control_target, config.cacert, config.insecure, config.timeout)
    try:
        for identity in by_name.values():  # load every credential up front: bad files fail before any traffic
            connector.context(identity, "h2")
    except (OSError, ssl.SSLError) as error:
        raise ProbeError(f"cannot load a client certificate or key: {error}") from None
    vectors = build_vectors(
        paths, identities, secret_guess=config.secret_guess, known_secret=config.lb_secret, seed=config.seed
    )
    controls_v = control_vectors(paths[0], lb, config.lb_secret, config.lb_header_only)
    total = len(controls_v) + len(vectors)
    done = 0

    def run_all(conn: Connector, items: Sequence[Vector]) -> list[VectorResult]:
        nonlocal done
        out = []
        for vector in items:
            result = run_vector(conn, by_name, vector)
            done += 1
            if on_result is not None:
                on_result(done, total, result)
            out.append(result)
        return out

    if on_phase:
        on_phase(f"probing {url} ({total} requests)")
    baseline = run_all(connector, vectors[:1])
    unreachable = _unreachable(baseline[0])
    if unreachable:
        verdict, reason = decide([], [], unreachable)
        return ProbeResult(url, verdict, reason, [], baseline, seconds=time.perf_counter() - started)
    controls = run_all(control_connector, controls_v)
    results = baseline + run_all(connector, vectors[1:])
    verdict, reason = decide(controls, results)
    out = ProbeResult(url, verdict, reason, controls, results)
    if config.timing_samples > 0:
        if on_phase:
            on_phase(f"timing check: {config.timing_samples} early/late pairs over one HTTP/2 connection")
        try:
            out.timing = timing_check(connector, paths[0], config.timing_samples, config.lb_secret, config.seed)
        except (OSError, ssl.SSLError, h2.exceptions.ProtocolError, ProbeError) as error:
            out.timing_error = " ".join(str(error).split())[:160] or type(error).__name__
    out.seconds = time.perf_counter() - started
    return out


def _unreachable(baseline: VectorResult) -> str | None:
    if baseline.outcome != "error":
        return None
    kind = baseline.detail.partition(":")[0]
    if kind in ("connect", "server-cert", "timeout"):
        return f"cannot reach the server: {baseline.detail}"
    return None
