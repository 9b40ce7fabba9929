"""Audit events: one JSON line per request, in kube's ``audit.k8s.io/v1`` ``Event`` shape (level Metadata, stage
ResponseComplete), with the load-report decision as annotations.

Mirrors kubernetes/apiserver at 24a394e516bfda066d7e2221d7d92c052de27c54: ``pkg/apis/audit/v1/types.go`` (the
fields), ``pkg/server/options/audit.go`` (``--audit-log-path``, ``-`` for stdout, file mode 0600 in a 0700
directory; ``--audit-log-maxsize`` in MB, 0 disables rotation, default 100; ``--audit-log-maxbackup``, 0 keeps
all, default 100) and lumberjack's rotation (the file renamed to ``NAME-2006-01-02T15-04-05.000.EXT``, UTC).
``verb`` is the lowercased HTTP method, as kube writes it for non-resource requests; ``auditID`` is the response's
``Audit-Id`` when the application sent a UUID there (the demo backend does, as kube-apiserver), else a new UUID.

The user is who the request authenticated as; when a verified front proxy asserted that user, the proxy's
certificate CN is kept apart in the ``authentication.secure-orca.io/front-proxy`` annotation, as Pinniped keeps
the original user apart from the impersonated one.

On the event loop a request costs one small record and a deque append: events are built, redacted and written
by one writer thread. A full queue drops the event and counts it; a write error (a full disk) drops the batch,
counts it and serving goes on. No header value is written except the User-Agent, and every credential a client
presented (opt-in secret, Authorization) and every configured secret and token is redacted from every string.
"""

from __future__ import annotations

import collections
import datetime as dt
import functools
import ipaddress
import json
import logging
import os
import re
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, Any
from urllib.parse import quote, quote_plus

from cryptography import x509

from secure_orca.authn.user import ANONYMOUS, UserInfo
from secure_orca.authz.reasons import Reason
from secure_orca.credentials.loader import Material
from secure_orca.orca import optin
from secure_orca.orca.headers import OPTIN_BYTES, REPORT
from secure_orca.server.asgi import ASGIApp, Message, Receive, Scope, Send
from secure_orca.x509.chainverifier import common_name

log = logging.getLogger("secure_orca.audit")
AUDIT_KEY = "secure_orca.audit"  # scope key of the request's AuditRecord
REASON = "endpoint-load-metrics.secure-orca.io/reason"  # the load-report decision's Reason
REPORT_ANNOTATION = "endpoint-load-metrics.secure-orca.io/report"  # how a report reached the caller
IN_BAND, OUT_OF_BAND, NO_REPORT = "in-band", "out-of-band", "none"
FRONT_PROXY = "authentication.secure-orca.io/front-proxy"  # CN of the front proxy that asserted the user
REDACTED = "[redacted]"
DEFAULT_MAXSIZE_MB, DEFAULT_MAXBACKUP = 100, 100  # kube's defaults
QUEUE_LIMIT = 10_000
_REPORT_NAME = REPORT.encode()
_USER_AGENT, _AUTHORIZATION = b"user-agent", b"authorization"
_FORWARDED_FOR, _REAL_IP = b"x-forwarded-for", b"x-real-ip"
_AUDIT_ID = b"audit-id"


class AuditRecord:
    """What the request path learns about one request; the writer thread turns it into an Event."""

    __slots__ = ("decision", "front_proxy", "headers", "received", "report", "response", "scope", "stage", "status",
                 "user")  # fmt: skip

    def __init__(self, scope: Scope) -> None:
        self.scope = scope  # kept as received: method, path, query, client address
        self.headers = scope["headers"]  # the list as received (layers below build new lists, never mutate it)
        self.received = time.time_ns()
        self.stage = 0
        self.status = 0
        self.user: UserInfo | None = None
        self.front_proxy: x509.Certificate | None = None  # the verified front proxy that asserted ``user``
        self.decision = Reason.NO_OPT_IN
        self.report = NO_REPORT
        self.response: Iterable[tuple[bytes, bytes]] = ()  # the response's headers, as sent


def record_of(scope: Scope) -> AuditRecord | None:
    record = scope.get(AUDIT_KEY)
    return record if isinstance(record, AuditRecord) else None


def _response(record: AuditRecord) -> tuple[str, bytes]:
    """How a report reached the caller, and the response's Audit-Id (kube's header: the event's auditID)."""
    report, audit_id = record.report, b""
    for index, (name, value) in enumerate(record.response):
        if index == 0 and name == _REPORT_NAME:  # the middleware puts an attached report first
            report = IN_BAND
        elif name == _AUDIT_ID:
            audit_id = value
            break
    return report, audit_id


def mark_streamed(scope: Scope) -> None:
    """For the out-of-band stream: this request's reports went out on it (annotated ``out-of-band``)."""
    record = record_of(scope)
    if record is not None:
        record.report = OUT_OF_BAND


_CREDENTIAL_HEADERS = frozenset({_AUTHORIZATION, b"authorization".replace(b"-", b"_"), OPTIN_BYTES,
                                 OPTIN_BYTES.replace(b"-", b"_")})  # fmt: skip
_second = (-1, "")
_quote: Callable[[str], str] = json.encoder.encode_basestring  # type: ignore[attr-defined]  # JSON string, UTF-8


def _timestamp(ns: int) -> str:
    """metav1.MicroTime: RFC 3339, microseconds, UTC (the seconds part formatted once per second)."""
    global _second
    seconds, rest = divmod(ns, 1_000_000_000)
    if _second[0] != seconds:
        _second = (seconds, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)))
    return f"{_second[1]}.{rest // 1000:06d}Z"


def _credentials(name: bytes, value: bytes) -> set[str]:
    """What a credential header carried: Authorization's whole value and each part (scheme and token); the
    opt-in's secret (parsed, and anything after ``;`` should the value be malformed), never its format."""
    text = value.decode("latin-1")
    if name.replace(b"_", b"-") != OPTIN_BYTES:
        return {v for v in (text.strip(), *(part for part in text.split() if len(part) >= 4)) if v}
    if ";" not in text:
        return set()
    try:
        secret = optin.parse([value]).secret
    except optin.OptInError:
        secret = None
    return {v for v in (secret, text, *(part.strip().removeprefix("secret=") for part in text.split(";")[1:])) if v}


class Redactor:
    """Replaces every known credential, raw or percent-encoded, in a string (the forms computed once)."""

    def __init__(self, values: Iterable[str] = (), forms: Iterable[str] = ()) -> None:
        found = set(forms)
        for value in values:
            found |= {value, quote(value, safe=""), quote_plus(value, safe=""), quote(value)}
        self.forms = sorted((f for f in found if f), key=len, reverse=True)  # longest first

    def plus(self, values: Iterable[str]) -> Redactor:
        return Redactor(values, self.forms)

    def __call__(self, text: str) -> str:
        for form in self.forms:
            if form in text:
                text = text.replace(form, REDACTED)
        return text


_PROXY_NAMES: dict[int, tuple[x509.Certificate, str]] = {}


def _proxy_name(certificate: x509.Certificate) -> str:
    """The front proxy's CN as kube reads it, parsed once per certificate object (the server keeps one object
    per presented chain, and parsing or even hashing a certificate costs more than the rest of an event)."""
    known = _PROXY_NAMES.get(id(certificate))
    if known is None or known[0] is not certificate:
        if len(_PROXY_NAMES) >= 64:
            _PROXY_NAMES.clear()
        known = _PROXY_NAMES[id(certificate)] = (certificate, common_name(certificate) or "")
    return known[1]


_UUID = re.compile(rb"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _response_id(value: bytes) -> str | None:
    return value.decode() if _UUID.fullmatch(value) else None


def _audit_id() -> str:
    """A random (version 4) UUID, as kube's auditID."""
    raw = bytearray(os.urandom(16))
    raw[6], raw[8] = raw[6] & 0x0F | 0x40, raw[8] & 0x3F | 0x80
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


@functools.lru_cache(maxsize=256)
def _ip(text: str) -> str | None:
    try:
        return str(ipaddress.ip_address(text.strip()))
    except ValueError:
        return None


def _source_ips(forwarded: list[str], real: list[str], remote: str | None) -> list[str]:
    """kube's ``utilnet.SourceIPs``: X-Forwarded-For, X-Real-Ip when not listed, then the peer when it is not the
    last one listed; anything that is not an IP address is dropped (so no client text gets through)."""
    ips = [ip for ip in map(_ip, forwarded) if ip]
    for text in real[:1]:
        ip = _ip(text)
        if ip and ip not in ips:
            ips.append(ip)
    peer = _ip(remote or "")
    if peer and (not ips or ips[-1] != peer):
        ips.append(peer)
    return ips


def _strings(values: Iterable[str], redact: Callable[[str], str]) -> str:
    return ",".join(_quote(redact(v)) for v in values)


def _user(user: UserInfo | None, redact: Callable[[str], str]) -> str:
    """authentication/v1 UserInfo as JSON text (``{}`` when the request authenticated as no one)."""
    if user is None:
        return "{}"
    parts = [f'"username":{_quote(redact(user.name))}']
    if user.uid:
        parts.append(f'"uid":{_quote(redact(user.uid))}')
    if user.groups:
        parts.append(f'"groups":[{_strings(user.groups, redact)}]')
    if user.extra:
        extra = ",".join(f"{_quote(redact(k))}:[{_strings(vs, redact)}]" for k, vs in user.extra.items())
        parts.append(f'"extra":{{{extra}}}')
    return "{" + ",".join(parts) + "}"


def line(record: AuditRecord, known: Redactor | Iterable[str] = (), audit_id: str | None = None) -> str:
    """The ``audit.k8s.io/v1`` Event of one answered request as one JSON line (no newline), its fields in the
    order of kube's struct; written directly, every string through json's own escaping (a third of the cost of
    building a dict and encoding it). Pure but for a fresh auditID when neither ``audit_id`` nor the response
    gives one."""
    redact = known if isinstance(known, Redactor) else Redactor(known)
    agent = None
    forwarded: list[str] = []
    real: list[str] = []
    presented: set[str] = set()
    for name, value in record.headers:
        lowered = name.lower()
        if lowered == _USER_AGENT:
            agent = value if agent is None else agent
        elif lowered in _CREDENTIAL_HEADERS:
            presented |= _credentials(lowered, value)
        elif lowered == _FORWARDED_FOR:
            forwarded += value.decode("latin-1").split(",")
        elif lowered == _REAL_IP:
            real.append(value.decode("latin-1"))
    if presented:
        redact = redact.plus(presented)
    scope = record.scope
    query = scope.get("query_string", b"")
    raw_path = scope.get("raw_path") or scope.get("path", "").encode("utf-8", "surrogateescape")
    uri = (raw_path + b"?" + query if query else raw_path).decode("latin-1")
    client = scope.get("client")
    ips = _source_ips(forwarded, real, client[0] if client else None)
    report, response_id = _response(record)
    annotations = f'"{REASON}":"{record.decision.value}","{REPORT_ANNOTATION}":"{report}"'
    if record.front_proxy is not None and record.user is not None and record.user.name != ANONYMOUS:
        annotations += f',"{FRONT_PROXY}":{_quote(redact(_proxy_name(record.front_proxy)))}'
    agent_field = f',"userAgent":{_quote(redact(agent.decode("utf-8", "replace")))}' if agent is not None else ""
    identifier = audit_id or _response_id(response_id) or _audit_id()
    return (
        f'{{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":{_quote(identifier)},'
        f'"stage":"ResponseComplete","requestURI":{_quote(redact(uri))},'
        f'"verb":{_quote(str(scope.get("method", "")).lower())},"user":{_user(record.user, redact)},'
        f'"sourceIPs":[{",".join(map(_quote, ips))}]{agent_field},'
        f'"responseStatus":{{"metadata":{{}},"code":{int(record.status)}}},'
        f'"requestReceivedTimestamp":"{_timestamp(record.received)}",'
        f'"stageTimestamp":"{_timestamp(record.stage or record.received)}","annotations":{{{annotations}}}}}'
    )


def event(record: AuditRecord, known: Redactor | Iterable[str] = (), audit_id: str | None = None) -> dict[str, Any]:
    """The Event as data (``line`` parsed: one definition of what is written)."""
    result: dict[str, Any] = json.loads(line(record, known, audit_id))
    return result


class RotatingFile:
    """lumberjack's size rotation: before a write would pass ``max_bytes``, the file is renamed with a UTC
    timestamp and a new one opened; beyond ``max_backups`` (0: keep all) the oldest backups are removed."""

    def __init__(self, path: Path, max_bytes: int, max_backups: int) -> None:
        self.path, self.max_bytes, self.max_backups = path, max_bytes, max_backups
        self.file: IO[bytes] | None = None
        self.size = 0
        self.regular = True

    def _open(self) -> IO[bytes]:
        if self.file is None:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            self.file = os.fdopen(fd, "ab", buffering=0)
            st = os.fstat(fd)
            self.size = st.st_size
            self.regular = stat.S_ISREG(st.st_mode)  # a device or a pipe is never renamed
        return self.file

    def backups(self) -> list[Path]:
        stem, suffix = self.path.stem, self.path.suffix
        found = [p for p in self.path.parent.glob(f"{stem}-*{suffix}") if p != self.path]
        return sorted(found)

    def _rotate(self) -> None:
        self.close()
        stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H-%M-%S.%f")[:-3]
        if self.path.exists():
            self.path.rename(self.path.with_name(f"{self.path.stem}-{stamp}{self.path.suffix}"))
        if self.max_backups:
            for old in self.backups()[: -self.max_backups]:
                old.unlink(missing_ok=True)

    def write(self, data: bytes) -> None:
        file = self._open()
        if self.regular and self.max_bytes and self.size and self.size + len(data) > self.max_bytes:
            self._rotate()
            file = self._open()
        self.size += len(data)
        file.write(data)

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None


class AuditLog:
    """The bounded queue and its writer thread. ``sink`` is a RotatingFile or any object with ``write(bytes)``."""

    def __init__(
        self,
        sink: Any,
        known: Callable[[], Iterable[str]] = tuple,
        limit: int = QUEUE_LIMIT,
        period: float = 0.05,
    ) -> None:
        self.sink, self.known, self.limit, self.period = sink, known, limit, period
        self.queue: collections.deque[AuditRecord] = collections.deque()
        self.written = self.dropped = self.write_errors = 0
        self._broken = False  # the last write failed: the next one starts on a fresh line
        self._known: frozenset[str] = frozenset()
        self._redactor = Redactor()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def submit(self, record: AuditRecord) -> None:
        """Called on the event loop once per answered request: never blocks."""
        if len(self.queue) >= self.limit:
            self.dropped += 1
        else:
            self.queue.append(record)

    def drain(self) -> int:
        """Write every queued event (the writer thread calls it; tests may too). Returns how many."""
        records = []
        while self.queue:
            records.append(self.queue.popleft())
        if not records:
            return 0
        known = frozenset(self.known())
        if known != self._known:
            self._known, self._redactor = known, Redactor(known)
        redactor = self._redactor
        lines = [(line(r, redactor) + "\n").encode("utf-8", "backslashreplace") for r in records]
        try:
            data = b"".join(lines)
            self.sink.write((b"\n" + data) if self._broken else data)
            flush = getattr(self.sink, "flush", None)
            if flush is not None:
                flush()
        except (OSError, ValueError) as error:
            self.write_errors += len(records)
            if not self._broken:
                log.warning("audit log: cannot write (%s); events are dropped until it can", _errno_text(error))
            self._broken = True
            return 0
        if self._broken:
            log.info("audit log: writing again")
        self._broken = False
        self.written += len(records)
        return len(records)

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            self._drain_safely()
        self._drain_safely()

    def _drain_safely(self) -> None:
        try:
            self.drain()
        except Exception:  # never let the writer die: count and go on
            self.write_errors += 1
            log.exception("audit log: event dropped")

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="audit-log", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        close = getattr(self.sink, "close", None)
        if close is not None and self.sink is not sys.stdout.buffer:
            close()


def _errno_text(error: Exception) -> str:
    return os.strerror(error.errno) if isinstance(error, OSError) and error.errno else type(error).__name__


class KnownSecrets:
    """Every shared secret and token the credential loader has read (``material`` is the one in force; a
    reload, e.g. a kubelet swap, brings new values): the writer thread redacts them all, rotated-out ones
    included. No file is read here."""

    def __init__(self, material: Callable[[], Material]) -> None:
        self.material = material
        self.last: Material | None = None
        self.values: set[str] = set()

    def __call__(self) -> Iterable[str]:
        material = self.material()
        if material is not self.last:
            self.values |= set(material.secrets) | set(material.tokens or ())
            self.last = material
        return self.values


def open_sink(path: str, maxsize_mb: int, maxbackup: int) -> Any:
    """``-`` is standard output; otherwise a RotatingFile (maxsize 0: never rotated)."""
    if path == "-":
        return sys.stdout.buffer
    return RotatingFile(Path(path), maxsize_mb * 1024 * 1024, maxbackup)


class AuditMiddleware:
    """The outermost layer: one AuditRecord per HTTP request, submitted once the response is complete."""

    def __init__(self, app: ASGIApp, audit: AuditLog) -> None:
        self.app = app
        self.audit = audit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        record = AuditRecord(scope)
        scope[AUDIT_KEY] = record

        async def audited(message: Message) -> None:
            if message["type"] == "http.response.start":
                record.status = message["status"]
                record.response = message.get("headers") or ()  # read by the writer thread
            await send(message)

        try:
            await self.app(scope, receive, audited)
        finally:
            record.stage = time.time_ns()
            self.audit.submit(record)
