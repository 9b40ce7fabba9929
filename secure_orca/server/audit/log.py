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
stored; ``batch`` drops an event that finds the queue full, counts it and logs it (rate-limited). In
``blocking-strict`` a response sent whole is held until its event is written, and is a 500 when it is not; with a
writer process (``serve --workers``) both blocking modes hand the event to it before the response's last message
(``AuditLog.deliver``), so a worker that dies after answering cannot take the event with it.

No header value is written except the User-Agent. Redaction does a bounded amount of work per event whatever the
client sends: the configured secrets and tokens are one precompiled matcher (rebuilt only when they change), and
a client's own credential is what kube's parsing takes (``Authorization``: the scheme, then one token; the opt-in's
secret), so at most two values more. Every string is matched on its percent-decoded form, so no spelling of a
credential (``%2f`` or ``%2F``, a needless escape, ``+`` or ``%20`` for a space) is written.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import operator
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Protocol

from secure_orca.credentials.loader import Material
from secure_orca.server.asgi import ASGIApp, Message, Receive, Scope, Send
from secure_orca.server.audit.event import (
    AUDIT_KEY,
    FRONT_PROXY,
    IN_BAND,
    NO_REPORT,
    OUT_OF_BAND,
    REASON,
    REPORT_ANNOTATION,
    AuditRecord,
    event,
    line,
    mark_streamed,
    record_of,
)
from secure_orca.server.audit.file import RotatingFile, append, open_sink
from secure_orca.server.audit.redaction import Redactor

__all__ = [  # the audit's names, wherever they are defined
    "AUDIT_KEY",
    "FRONT_PROXY",
    "IN_BAND",
    "NO_REPORT",
    "OUT_OF_BAND",
    "REASON",
    "REPORT_ANNOTATION",
    "AuditLog",
    "AuditMiddleware",
    "AuditRecord",
    "KnownSecrets",
    "RotatingFile",
    "event",
    "line",
    "mark_streamed",
    "open_sink",
    "record_of",
]

log = logging.getLogger("secure_orca.audit")
DEFAULT_MAXSIZE_MB, DEFAULT_MAXBACKUP = 100, 100  # kube's defaults
BATCH, BLOCKING, BLOCKING_STRICT = "batch", "blocking", "blocking-strict"
MODES = (BATCH, BLOCKING, BLOCKING_STRICT)  # kube's AllowedModes
ALLOWED = '"' + ",".join(MODES) + '"'  # as kube's validateBackendMode quotes them (%q)
DEFAULT_MODE = BLOCKING  # kube's NewAuditOptions: the log backend's mode
QUEUE_LIMIT = 10_000  # events (kube's defaultBatchBufferSize)
QUEUE_BYTES = 16 * 1024 * 1024  # and bytes, charged as each record's ``size``
DROP_LOG_INTERVAL = 10.0  # seconds between two "events dropped" log lines
_SIZE = operator.attrgetter("size")


class Relay(Protocol):
    """Where the writer thread hands its finished lines when another process owns the file (``serve --workers``:
    workers.auditwriter). ``send`` returns how many lines it refused; ``update`` brings that process's counts of
    this worker's events and whether its last write failed into the AuditLog (``AuditLog.relayed``)."""

    def send(self, lines: list[bytes]) -> int: ...

    async def deliver(self, data: bytes, acknowledged: bool) -> bool:
        """On the event loop: one line handed to the writer process before this returns (False: it could not
        be); with ``acknowledged``, only once that process wrote it (True) or lost it (False)."""
        ...

    def update(self, audit: AuditLog) -> None: ...


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
        self.added_bytes = 0  # charged by the loop thread alone, as it queues
        self.removed_bytes = 0  # freed by the writer thread alone, once written
        self.written = self.dropped = self.write_errors = 0
        self.broken = False  # the last write failed: the next one starts on a fresh line
        self.relay: Relay | None = None  # serve --workers: the lines go to the one writer process instead
        self.promises = mode == BLOCKING_STRICT  # a response's end awaits ``deliver`` (see ``attach``)
        self._known: frozenset[str] = frozenset()
        self.redactor = Redactor()  # the matcher of the configured credentials in force
        self.redactors_built = 0
        # The loop appends and the writer pops (each atomic on a deque) and each moves only its own counter, so
        # queueing when there is room takes no lock. The lock orders the slow path: a waiter is registered, or
        # queued, only against a settled count, and the writer wakes waiters after freeing room.
        self._lock = threading.Lock()
        self._waiters: collections.deque[tuple[asyncio.Future[None], AuditRecord]] = collections.deque()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._drop_logged = -DROP_LOG_INTERVAL
        self._stop = threading.Event()
        self._kick = threading.Event()  # wakes the writer thread before its period (blocking-strict)
        self._thread: threading.Thread | None = None

    def attach(self, relay: Relay) -> None:
        """``serve --workers``: lines go to the writer process; in both blocking modes a response's end awaits
        its event's hand-over, so a worker killed after it answered cannot take the event with it."""
        self.relay, self.promises = relay, self.mode != BATCH

    async def deliver(self, record: AuditRecord) -> bool:
        """A blocking mode's promise, as the response ends (``promises``); returns whether it may end normally.

        With a writer process, the line is built here and handed to that process before this returns (awaiting
        the socket's room): kube's blocking backend writes before the response is sent. In ``blocking`` this
        returns True whatever became of the event (kube ignores the error, it is counted); in
        ``blocking-strict`` only once the event is written (True) or known lost (False). One process in
        ``blocking-strict``: the record is queued, the writer thread woken, and its write awaited."""
        strict = self.mode == BLOCKING_STRICT
        if self.relay is not None:
            data = (line(record, self._redactor()) + "\n").encode("utf-8", "backslashreplace")
            return await self.relay.deliver(data, strict) or not strict
        self._loop = loop = asyncio.get_running_loop()
        record.fate = fate = loop.create_future()
        if not self.offer(record):
            await self.wait(record)
        self._kick.set()
        return await fate

    @property
    def waiting(self) -> int:
        """Requests awaiting room (blocking modes)."""
        return len(self._waiters)

    @property
    def queued_bytes(self) -> int:
        """The bytes charged for the queue's records and the batch being written."""
        return self.added_bytes - self.removed_bytes

    def _fits(self, size: int) -> bool:
        queued = self.added_bytes - self.removed_bytes  # read twice by the loop: the writer may only lower it
        return not queued or (len(self.queue) < self.limit and queued + size <= self.max_bytes)

    def _append(self, record: AuditRecord) -> None:
        self.added_bytes += record.size  # before the writer can see it: the count never goes below zero
        self.queue.append(record)

    def submit(self, record: AuditRecord) -> bool:
        """Queue ``record`` now or drop it (counted); never waits. Called on the event loop."""
        record.charge_user()
        if not self._waiters and self._fits(record.size):
            self._append(record)
            return True
        self._drop()
        return False

    def offer(self, record: AuditRecord) -> bool:
        """Queue ``record`` if it fits (True); in ``batch`` mode drop it if not (True: done); False: the caller
        must ``put`` it (a blocking mode and no room)."""
        record.charge_user()
        size = record.size
        queued = self.added_bytes - self.removed_bytes
        if not self._waiters and (not queued or (len(self.queue) < self.limit and queued + size <= self.max_bytes)):
            self.added_bytes += size  # ``_append``, inline: this is every audited request's path
            self.queue.append(record)
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
        while self.queue:  # read without the lock (only this thread removes): most wake-ups find nothing
            pop = self.queue.popleft  # never ``clear``: the loop may append meanwhile, without the lock
            records = [pop() for _ in range(min(len(self.queue), batch))]
            if not records:
                return done
            written = 0
            try:
                written = self._write(records)
                done += written
            finally:
                with self._lock:
                    self.removed_bytes += sum(map(_SIZE, records))
                    loop = self._loop if self._waiters else None
                fates = [r.fate for r in records if r.fate is not None]
                with contextlib.suppress(RuntimeError):  # the loop closed: no one waits any more
                    if loop is not None:
                        loop.call_soon_threadsafe(self._wake)
                    if fates and self._loop is not None:
                        self._loop.call_soon_threadsafe(_settle, fates, written == len(records))
        return done

    def _write(self, records: list[AuditRecord]) -> int:
        redactor = self._redactor()
        lines = [(line(r, redactor) + "\n").encode("utf-8", "backslashreplace") for r in records]
        if self.relay is not None:  # another process writes the file: it counts, and says whether it is broken
            refused = self.relay.send(lines)
            self.write_errors += refused
            self.relay.update(self)
            return len(records) - refused
        self.broken = append(self.sink, b"".join(lines), self.broken)
        if self.broken:
            self.write_errors += len(records)
            return 0
        self.written += len(records)
        return len(records)

    def relayed(self, written: int, lost: int, broken: bool) -> None:
        """The writer process's news of this worker's events (its relay's ``update``): written and lost since its
        last news, and whether its last write failed."""
        self.written += written
        self.write_errors += lost
        self.broken = broken

    def _run(self) -> None:
        while not self._stop.is_set():
            self._kick.wait(self.period)
            self._kick.clear()  # a record queued before it was set is drained now, one queued after wakes again
            self._drain_safely()
        self._drain_safely()

    def _drain_safely(self) -> None:
        try:
            self.drain()
        except Exception:  # never let the writer die: count and go on
            self.write_errors += 1
            log.exception("audit log: event dropped")
        if self.relay is not None:
            self.relay.update(self)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="audit-log", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._kick.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        close = getattr(self.sink, "close", None)
        if close is not None and self.sink is not sys.stdout.buffer:
            close()


def _settle(fates: list[asyncio.Future[bool]], written: bool) -> None:
    for fate in fates:
        if not fate.done():  # its request may have been cancelled
            fate.set_result(written)


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


_STORE_FAILED = b"Internal Server Error: failed to store audit event"  # kube's InternalError text


def _final(message: Message, trailers: bool) -> bool:
    """Whether ``message`` ends the response (its body, or its trailers when it announced some)."""
    kind = message["type"]
    if kind == "http.response.body":
        return not trailers and not message.get("more_body", False)
    return kind == "http.response.trailers" and not message.get("more_trailers", False)


class AuditMiddleware:
    """The outermost layer: one AuditRecord per HTTP request, queued as its response ends (in a blocking mode,
    the response's last message waits for room in the queue, or, when the log ``promises``, for ``deliver``).

    In ``blocking-strict`` a response's start is held until its first body: a response sent whole (start, then
    one last body: every response but a stream's) goes out only once its event is written, and is a 500 instead
    when it is not. A streamed response's status went out before its event existed: as kube's ResponseComplete
    stage, a failure then is counted and the response ends."""

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
        hold = audit.mode == BLOCKING_STRICT
        held: Message | None = None

        def audited(message: Message) -> Awaitable[None]:
            """Not a coroutine: it returns ``send``'s own awaitable (one coroutine less per message), or, when the
            queue has no room in a blocking mode, one that first waits for room (the client waits, before its
            response ends)."""
            nonlocal queued, trailers, held
            kind = message["type"]
            if kind == "http.response.start":
                record.responded(message["status"], message.get("headers") or ())
                trailers = bool(message.get("trailers", False))
                if hold and not trailers:
                    held = message
                    return _nothing()
            elif not queued and (
                not (trailers or message.get("more_body", False))
                if kind == "http.response.body"
                else _final(message, trailers)
            ):  # the common last body inline; ``_final`` says the rest
                queued, record.stage = True, time.time_ns()
                if audit.promises:
                    start, held = held, None
                    return _promised(audit, record, send, start, message)
                if not audit.offer(record):
                    return _after_room(audit, record, send, message)
            if held is not None:  # a streamed body: its start goes first
                start, held = held, None
                return _in_turn(send, start, message)
            return send(message)

        try:
            await self.app(scope, receive, audited)
        finally:
            if not queued:  # the response never ended (an error, a disconnect)
                record.stage = time.time_ns()
                if not audit.offer(record):
                    await audit.wait(record)


async def _nothing() -> None:
    return None


async def _in_turn(send: Send, *messages: Message) -> None:
    for message in messages:
        await send(message)


async def _promised(audit: AuditLog, record: AuditRecord, send: Send, start: Message | None, last: Message) -> None:
    """The response's last message once ``deliver`` allows it; a response held whole is a 500 when not."""
    if await audit.deliver(record):
        await _in_turn(send, start, last) if start is not None else await send(last)
    elif start is not None:
        await _refuse(send)
    else:
        await send(last)


async def _after_room(audit: AuditLog, record: AuditRecord, send: Send, message: Message) -> None:
    await audit.wait(record)
    await send(message)


async def _refuse(send: Send) -> None:
    headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", b"%d" % len(_STORE_FAILED))]
    await send({"type": "http.response.start", "status": 500, "headers": headers})
    await send({"type": "http.response.body", "body": _STORE_FAILED, "more_body": False})
