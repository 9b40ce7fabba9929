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

On the event loop a request costs one small record: the fields its event needs, copied when the request
arrives (no ``scope``, no header list is kept), charged in bytes against a bounded queue. Events are built,
redacted and written by one writer thread. ``--audit-log-mode`` is kube's (``pkg/server/options/audit.go``,
``NewAuditOptions``, the log backend's default ``blocking``): in ``blocking`` the request whose event finds the
queue full awaits room before its response completes (the loop never blocks, no event is lost, the client that
floods is the one that waits) and a write error is counted and ignored; ``blocking-strict`` also refuses new
requests (500) while the log cannot be written, as kube fails a request whose RequestReceived event is not
stored; ``batch`` drops an event that finds the queue full, counts it and logs it (rate-limited).

No header value is written except the User-Agent. Redaction does a bounded amount of work per event whatever the
client sends: the configured secrets and tokens are one precompiled matcher (rebuilt only when they change), and
a client's own credential is what kube's parsing takes (``Authorization``: the scheme, then one token; the opt-in's
secret), so at most two values more. Every string is matched on its percent-decoded form, so no spelling of a
credential (``%2f`` or ``%2F``, a needless escape, ``+`` or ``%20`` for a space) is written.
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import contextlib
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
BATCH, BLOCKING, BLOCKING_STRICT = "batch", "blocking", "blocking-strict"
MODES = (BATCH, BLOCKING, BLOCKING_STRICT)  # kube's AllowedModes
ALLOWED = '"' + ",".join(MODES) + '"'  # as kube's validateBackendMode quotes them (%q)
DEFAULT_MODE = BLOCKING  # kube's NewAuditOptions: the log backend's mode
QUEUE_LIMIT = 10_000  # events (kube's defaultBatchBufferSize)
QUEUE_BYTES = 16 * 1024 * 1024  # and bytes, charged as each record's ``size``
RECORD_BYTES = 1024  # charged per record beyond its strings: the object, its slots, the fixed fields
ITEM_BYTES = 64  # charged per kept string or bytes object: its header
MIN_PRESENTED = 4  # a client's credential shorter than this is not searched for (it would redact most text)
DROP_LOG_INTERVAL = 10.0  # seconds between two "events dropped" log lines
_REPORT_NAME = REPORT.encode()
_USER_AGENT, _AUTHORIZATION = b"user-agent", b"authorization"
_FORWARDED_FOR, _REAL_IP = b"x-forwarded-for", b"x-real-ip"
_AUDIT_ID = b"audit-id"
_OPTIN_NAMES = frozenset({OPTIN_BYTES, OPTIN_BYTES.replace(b"-", b"_")})


class AuditRecord:
    """What the request path learns about one request; the writer thread turns it into an Event. The fields are
    copied from the scope when the request arrives (the scope itself is not kept), and ``size`` is what the record
    is charged in the queue: its strings plus a constant, an upper bound of the memory it keeps."""

    __slots__ = ("agent", "audit_id", "client", "decision", "forwarded", "front_proxy", "method", "path",
                 "presented", "query", "real", "received", "report", "size", "stage", "status", "user")  # fmt: skip

    def __init__(self, scope: Scope) -> None:
        self.received = time.time_ns()
        self.method = str(scope.get("method", ""))
        self.path: bytes = scope.get("raw_path") or scope.get("path", "").encode("utf-8", "surrogateescape")
        self.query: bytes = scope.get("query_string", b"")
        client = scope.get("client")
        self.client: str | None = client[0] if client else None
        agent = authorization = opt_in = None
        forwarded: list[bytes] = []
        real: list[bytes] = []
        for name, value in scope["headers"]:  # one pass; only references to immutable values are kept
            lowered = name.lower()
            if lowered == _USER_AGENT:
                agent = value if agent is None else agent
            elif lowered == _AUTHORIZATION:
                authorization = value if authorization is None else authorization
            elif lowered in _OPTIN_NAMES:
                opt_in = value if opt_in is None else opt_in
            elif lowered == _FORWARDED_FOR:
                forwarded.append(value)
            elif lowered == _REAL_IP:
                real.append(value)
        self.agent: bytes | None = agent
        self.forwarded, self.real = forwarded, real
        self.presented = presented(authorization, opt_in)
        size = RECORD_BYTES + len(self.method) + len(self.path) + len(self.query) + 3 * ITEM_BYTES
        if agent is not None:
            size += len(agent) + ITEM_BYTES
        if forwarded or real or self.presented:
            kept = [*forwarded, *real, *self.presented]
            size += sum(map(len, kept)) + ITEM_BYTES * len(kept)
        self.size = size
        self.stage = 0
        self.status = 0
        self.user: UserInfo | None = None
        self.front_proxy: x509.Certificate | None = None  # the verified front proxy that asserted ``user``
        self.decision = Reason.NO_OPT_IN
        self.report = NO_REPORT
        self.audit_id = b""  # the response's Audit-Id header, when it sent one

    def responded(self, status: int, headers: Iterable[tuple[bytes, bytes]]) -> None:
        """The response started: its status, how a report reached the caller, and its Audit-Id (kube's header:
        the event's auditID)."""
        self.status = status
        for index, (name, value) in enumerate(headers):
            if index == 0 and name == _REPORT_NAME:  # the middleware puts an attached report first
                self.report = IN_BAND
            elif name == _AUDIT_ID:
                self.audit_id = value[:64]
                break

    def charge_user(self) -> None:
        """Add the user's strings to ``size`` (the user is known once the request is answered)."""
        user = self.user
        if user is not None:
            size = len(user.name) + len(user.uid or "") + 2 * ITEM_BYTES
            if user.groups:
                size += sum(map(len, user.groups)) + ITEM_BYTES * len(user.groups)
            for key, values in user.extra.items():
                size += len(key) + sum(map(len, values)) + ITEM_BYTES * (1 + len(values))
            self.size += size


def record_of(scope: Scope) -> AuditRecord | None:
    record = scope.get(AUDIT_KEY)
    return record if isinstance(record, AuditRecord) else None


def mark_streamed(scope: Scope) -> None:
    """For the out-of-band stream: this request's reports went out on it (annotated ``out-of-band``)."""
    record = record_of(scope)
    if record is not None:
        record.report = OUT_OF_BAND


_second = (-1, "")
_quote: Callable[[str], str] = json.encoder.encode_basestring  # type: ignore[attr-defined]  # JSON string, UTF-8


def _timestamp(ns: int) -> str:
    """metav1.MicroTime: RFC 3339, microseconds, UTC (the seconds part formatted once per second)."""
    global _second
    seconds, rest = divmod(ns, 1_000_000_000)
    if _second[0] != seconds:
        _second = (seconds, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)))
    return f"{_second[1]}.{rest // 1000:06d}Z"


def presented(authorization: bytes | None, opt_in: bytes | None) -> tuple[str, ...]:
    """The credentials a client presented, as the server reads them: from the first ``Authorization`` the token
    kube's ``request/bearertoken`` parsing takes (trimmed, split on single spaces into at most 3 parts: the scheme,
    then the token; any scheme), and the opt-in's secret (parsed; should the value be malformed, what follows its
    first ``;``). At most two values, whatever the client sends; each as the header's bytes read as Latin-1."""
    found: list[str] = []
    if authorization is not None:
        parts = authorization.decode("latin-1").strip().split(" ", 2)
        if len(parts) >= 2:
            found.append(parts[1])
    if opt_in is not None and b";" in opt_in:
        try:
            secret = optin.parse([opt_in]).secret
        except optin.OptInError:
            secret = opt_in.decode("latin-1").split(";", 1)[1].strip().removeprefix("secret=")
        found.append(secret or "")
    return tuple(v for v in found if len(v) >= MIN_PRESENTED)


def _view(text: str) -> str:
    """A string as the bytes a client would send for it, read as Latin-1 (what the URI and headers are)."""
    return text if text.isascii() else text.encode("utf-8", "surrogatepass").decode("latin-1")


def _fold(text: str) -> str:
    """A space and ``+`` are one character to the matcher (``+`` is a space in a query)."""
    return text.replace(" ", "+")


_HEX = {a + b: chr(int(a + b, 16)) for a in "0123456789abcdefABCDEF" for b in "0123456789abcdefABCDEF"}


_NO_ESCAPES: list[int] = []


def _decode(view: str) -> tuple[str, list[int]]:
    """``view`` percent-decoded as ``urllib.parse.unquote_to_bytes`` does (a ``%`` not followed by two hex digits
    stays), and the decoded index of each escape (to map a match back onto ``view``)."""
    pieces = view.split("%")
    out = [pieces[0]]
    escapes: list[int] = []
    at = len(pieces[0])
    for piece in pieces[1:]:
        char = _HEX.get(piece[:2])
        if char is None:
            out += ("%", piece)
            at += 1 + len(piece)
        else:
            escapes.append(at)
            out += (char, piece[2:])
            at += len(piece) - 1
    return "".join(out), escapes


class Redactor:
    """Replaces every configured credential, and the few a client presented, in any percent-encoding of it.

    One regular expression over the configured values, compiled once; each string is matched on its decoded form
    (``_decode``, spaces folded to ``+``) and a match is redacted over the span of the original that spelled it.
    Per string: one search of the expression and one substring search per presented value (at most two)."""

    def __init__(self, values: Iterable[str] = ()) -> None:
        forms = {_fold(_view(v)) for v in values if v}
        self.pattern = re.compile("|".join(map(re.escape, sorted(forms, key=len, reverse=True)))) if forms else None

    def __call__(self, text: str, presented: tuple[str, ...] = ()) -> str:
        if not presented and text.isascii() and "%" not in text and " " not in text:  # the common case
            return text if self.pattern is None or self.pattern.search(text) is None else self.view(text)
        view = _view(text)
        redacted = self.view(view, presented)
        if redacted is view:
            return text
        try:
            return redacted.encode("latin-1").decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:
            return redacted.encode("latin-1").decode("utf-8", "replace")

    def view(self, view: str, presented: tuple[str, ...] = ()) -> str:
        """Redact a Latin-1 view (a URI, a header value); ``view`` itself when nothing matched."""
        pattern = self.pattern
        plain = not presented and "%" not in view and " " not in view
        if plain and (pattern is None or pattern.search(view) is None):  # the common case: one search
            return view
        if "%" in view:
            decoded, escapes = _decode(view)
        else:
            decoded, escapes = view, _NO_ESCAPES
        if " " in decoded:
            decoded = decoded.replace(" ", "+")  # ``_fold``
        first = pattern.search(decoded) if pattern is not None else None
        if first is None and not presented:
            return view
        spans = []
        if pattern is not None and first is not None:
            spans = [m.span() for m in pattern.finditer(decoded, first.start())]
        for value in presented:
            value = _fold(value)
            start = decoded.find(value)
            while start >= 0:
                spans.append((start, start + len(value)))
                start = decoded.find(value, start + len(value))
        if not spans:
            return view
        out: list[str] = []
        last = 0
        for start, end in sorted(spans):
            start, end = _raw(start, escapes), _raw(end, escapes)
            if start < last:  # overlaps the previous match: one redaction covers both
                last = max(last, end)
                continue
            out += (view[last:start], REDACTED)
            last = end
        out.append(view[last:])
        return "".join(out)


def _raw(index: int, escapes: list[int]) -> int:
    """The index in the original of decoded ``index``: each escape before it took two characters more."""
    return index + 2 * bisect.bisect_left(escapes, index)


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
    building a dict and encoding it) and through the redactor. Pure but for a fresh auditID when neither
    ``audit_id`` nor the response gives one."""
    redactor = known if isinstance(known, Redactor) else Redactor(known)
    given = record.presented

    def redact_given(text: str) -> str:
        return redactor(text, given)

    redact: Callable[[str], str] = redact_given if given else redactor

    uri = record.path.decode("latin-1") + ("?" + record.query.decode("latin-1") if record.query else "")
    forwarded = [ip for value in record.forwarded for ip in value.decode("latin-1").split(",")]
    ips = _source_ips(forwarded, [v.decode("latin-1") for v in record.real], record.client)
    annotations = f'"{REASON}":"{record.decision.value}","{REPORT_ANNOTATION}":"{record.report}"'
    if record.front_proxy is not None and record.user is not None and record.user.name != ANONYMOUS:
        annotations += f',"{FRONT_PROXY}":{_quote(redact(_proxy_name(record.front_proxy)))}'
    agent_field = ""
    if record.agent is not None:
        agent = redactor.view(record.agent.decode("latin-1"), given).encode("latin-1").decode("utf-8", "replace")
        agent_field = f',"userAgent":{_quote(agent)}'
    identifier = audit_id or _response_id(record.audit_id) or _audit_id()
    return (
        f'{{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":{_quote(identifier)},'
        f'"stage":"ResponseComplete","requestURI":{_quote(redactor.view(uri, given))},'
        f'"verb":{_quote(record.method.lower())},"user":{_user(record.user, redact)},'
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
    """The bounded queue and its writer thread. ``sink`` is a RotatingFile or any object with ``write(bytes)``.

    The queue holds at most ``limit`` records and ``max_bytes`` of them (``AuditRecord.size``; a batch being
    written still counts until it is written); an empty queue takes any one record. ``put`` is the request path's
    door, by ``mode``: ``batch`` drops a record that does not fit (``dropped``, logged at most once per
    DROP_LOG_INTERVAL); ``blocking`` and ``blocking-strict`` make the request await room, in arrival order.
    ``submit`` never waits: it queues or drops."""

    def __init__(
        self,
        sink: Any,
        known: Callable[[], Iterable[str]] = tuple,
        limit: int = QUEUE_LIMIT,
        period: float = 0.05,
        *,
        max_bytes: int = QUEUE_BYTES,
        mode: str = DEFAULT_MODE,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"invalid audit log mode {mode}, allowed modes are {ALLOWED}")
        self.sink, self.known, self.limit, self.period = sink, known, limit, period
        self.max_bytes, self.mode = max_bytes, mode
        self.queue: collections.deque[AuditRecord] = collections.deque()
        self.queued_bytes = 0  # the queue's records and the batch being written
        self.written = self.dropped = self.write_errors = 0
        self.broken = False  # the last write failed: the next one starts on a fresh line
        self._known: frozenset[str] = frozenset()
        self.redactor = Redactor()  # the matcher of the configured credentials in force
        self.redactors_built = 0
        self._lock = threading.Lock()  # the queue and its bytes: the loop adds, the writer thread removes
        self._waiters: collections.deque[tuple[asyncio.Future[None], AuditRecord]] = collections.deque()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._drop_logged = -DROP_LOG_INTERVAL
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def waiting(self) -> int:
        """Requests awaiting room (blocking modes)."""
        return len(self._waiters)

    def _fits(self, size: int) -> bool:
        return not self.queued_bytes or (len(self.queue) < self.limit and self.queued_bytes + size <= self.max_bytes)

    def _append(self, record: AuditRecord) -> None:
        self.queue.append(record)
        self.queued_bytes += record.size

    def submit(self, record: AuditRecord) -> bool:
        """Queue ``record`` now or drop it (counted); never waits. Called on the event loop."""
        record.charge_user()
        with self._lock:
            if not self._waiters and self._fits(record.size):
                self._append(record)
                return True
        self._drop()
        return False

    def offer(self, record: AuditRecord) -> bool:
        """Queue ``record`` if it fits (True); in ``batch`` mode drop it if not (True: done); False: the caller
        must ``put`` it (a blocking mode and no room)."""
        record.charge_user()
        with self._lock:
            if not self._waiters and self._fits(record.size):
                self._append(record)
                return True
        if self.mode == BATCH:
            self._drop()
            return True
        return False

    async def put(self, record: AuditRecord) -> None:
        """Queue ``record``: in ``batch`` mode as ``submit``; otherwise the caller awaits room, after every
        earlier waiter (a waiter cancelled before its turn loses its record, counted as dropped)."""
        if not self.offer(record):
            await self.wait(record)

    async def wait(self, record: AuditRecord) -> None:
        """After ``offer`` returned False: await room for ``record`` (charged already)."""
        with self._lock:
            if not self._waiters and self._fits(record.size):  # the writer freed room meanwhile
                self._append(record)
                return
            self._loop = asyncio.get_running_loop()
            future: asyncio.Future[None] = self._loop.create_future()
            self._waiters.append((future, record))
        try:
            await future
        except asyncio.CancelledError:
            with self._lock:
                waited = (future, record) in self._waiters
                if waited:
                    self._waiters.remove((future, record))
            if waited:
                self._drop()
            raise

    def _wake(self) -> None:
        """On the loop, after the writer freed room: queue the waiters' records that now fit, in order."""
        with self._lock:
            while self._waiters and self._fits(self._waiters[0][1].size):
                future, record = self._waiters.popleft()
                self._append(record)
                if not future.done():
                    future.set_result(None)

    def _drop(self) -> None:
        self.dropped += 1
        now = time.monotonic()
        if now - self._drop_logged >= DROP_LOG_INTERVAL:
            self._drop_logged = now
            log.warning("audit log: the queue is full; events are dropped (%d so far)", self.dropped)

    def _redactor(self) -> Redactor:
        known = frozenset(self.known())
        if known != self._known:  # a reload brought new values: the one matcher is rebuilt
            self._known, self.redactor = known, Redactor(known)
            self.redactors_built += 1
        return self.redactor

    def drain(self, batch: int = 256) -> int:
        """Write every queued event, ``batch`` at a time (the writer thread calls it; tests may too). Returns how
        many were written."""
        done = 0
        while True:
            with self._lock:
                records = [self.queue.popleft() for _ in range(min(batch, len(self.queue)))]
            if not records:
                return done
            try:
                done += self._write(records)
            finally:
                with self._lock:
                    self.queued_bytes -= sum(r.size for r in records)
                    loop = self._loop if self._waiters else None
                if loop is not None:
                    with contextlib.suppress(RuntimeError):  # the loop closed: no one waits any more
                        loop.call_soon_threadsafe(self._wake)

    def _write(self, records: list[AuditRecord]) -> int:
        redactor = self._redactor()
        lines = [(line(r, redactor) + "\n").encode("utf-8", "backslashreplace") for r in records]
        try:
            data = b"".join(lines)
            self.sink.write((b"\n" + data) if self.broken else data)
            flush = getattr(self.sink, "flush", None)
            if flush is not None:
                flush()
        except (OSError, ValueError) as error:
            self.write_errors += len(records)
            if not self.broken:
                log.warning("audit log: cannot write (%s); events are dropped until it can", _errno_text(error))
            self.broken = True
            return 0
        if self.broken:
            log.info("audit log: writing again")
        self.broken = False
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


_STORE_FAILED = b"Internal Server Error: failed to store audit event"  # kube's InternalError text


def _final(message: Message, trailers: bool) -> bool:
    """Whether ``message`` ends the response (its body, or its trailers when it announced some)."""
    kind = message["type"]
    if kind == "http.response.body":
        return not trailers and not message.get("more_body", False)
    return kind == "http.response.trailers" and not message.get("more_trailers", False)


class AuditMiddleware:
    """The outermost layer: one AuditRecord per HTTP request, queued as its response ends (in a blocking mode,
    the response's last message waits for room in the queue)."""

    def __init__(self, app: ASGIApp, audit: AuditLog) -> None:
        self.app = app
        self.audit = audit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        audit = self.audit
        record = AuditRecord(scope)
        scope[AUDIT_KEY] = record
        if audit.mode == BLOCKING_STRICT and audit.broken:  # kube: a request whose event is not stored fails
            await _refuse(send)
            record.status, record.stage = 500, time.time_ns()
            audit.submit(record)  # the writer tries the log again with it
            return
        queued = trailers = False

        async def audited(message: Message) -> None:
            nonlocal queued, trailers
            if message["type"] == "http.response.start":
                record.responded(message["status"], message.get("headers") or ())
                trailers = bool(message.get("trailers", False))
            elif not queued and _final(message, trailers):
                queued, record.stage = True, time.time_ns()
                if not audit.offer(record):
                    await audit.wait(record)  # blocking modes: the client waits for room, before its response ends
            await send(message)

        try:
            await self.app(scope, receive, audited)
        finally:
            if not queued:  # the response never ended (an error, a disconnect)
                record.stage = time.time_ns()
                if not audit.offer(record):
                    await audit.wait(record)


async def _refuse(send: Send) -> None:
    headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", b"%d" % len(_STORE_FAILED))]
    await send({"type": "http.response.start", "status": 500, "headers": headers})
    await send({"type": "http.response.body", "body": _STORE_FAILED, "more_body": False})
