"""``StreamCoreMetrics`` on the serving port: out-of-band ORCA load reports over one gRPC stream (the ASGI shell
around ``secure_orca.orca.oob``).

Mounted in front of the load-report middleware, so the stream is neither a request of the sampler's rates nor
seen by the application. The entitlement is the in-band path's verified decision (``TrustService.checks`` under
the Authority in force: the same caches, the same reload, the chain verified off the loop and charged to the
client's address), re-checked at every report and whenever a reload swaps the Authority (``reloaded``), so a
revoked or expired certificate's stream ends at once with PERMISSION_DENIED. Refusals are trailers-only and read
nothing of the request body. Server shutdown and connection rotation (GOAWAY) end a stream with UNAVAILABLE.

Slots and deadlines are decided by ``secure_orca.authz.streams``: capacity per connection, per
certificate and in total, with a share only the front proxy may use; a stream's slot is given back before
anything more is sent on it. A stream whose report has not left the server within the write deadline (its
reader announced no flow-control window, or stopped reading) is reset. Reports never queue behind an unread one.
A stream that must end while bytes are still unsent (withdrawn, expired, rotated, shut down, stuck) is reset at
once (RST_STREAM CANCEL, through server/http's ``StreamControl``): a status trailer would wait behind those bytes.
A stream with nothing unsent ends with its status trailer, which is sent without waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from secure_orca.authz.authority import Authority
from secure_orca.authz.memo import Checks, at
from secure_orca.authz.reasons import Reason
from secure_orca.authz.streams import Full, Kind, Limits, Slot, Slots, WriteDeadline
from secure_orca.orca import oob
from secure_orca.orca.oob import GrpcError, Status
from secure_orca.orca.report import LoadReport
from secure_orca.server.asgi import ASGIApp, Receive, Scope, Send, respond
from secure_orca.server.http.control import STREAM_CONTROL_KEY, StreamControl
from secure_orca.server.http.rotation import ROTATION_KEY
from secure_orca.server.sampler import Sampler
from secure_orca.server.trust import CONNECTION_KEY, TrustService, now_us, peer

log = logging.getLogger("secure_orca.oob")
READ_TIMEOUT = 10.0  # seconds an entitled caller has to send its one request message
WRITE_DEADLINE = 10.0  # default --endpoint-load-metrics-oob-write-deadline


class End(StrEnum):
    """Why an open stream ended (a closed set: metrics count ends and resets by it)."""

    CLIENT = "client"  # the client reset the stream or closed its connection
    SHUTDOWN = "shutdown"
    ROTATION = "rotation"  # its connection rotates (GOAWAY)
    WITHDRAWN = "withdrawn"  # a reload withdrew the certificate's entitlement
    EXPIRED = "expired"  # the certificate or its chain lapsed
    WRITE_DEADLINE = "write-deadline"  # a report stayed unsent for the write deadline


NOT_GRPC = "not-grpc"  # refusal reasons beyond Reason and Full
BAD_REQUEST = "bad-request"
SHUTTING_DOWN = "shutting-down"
NO_KIND = "none"  # a refusal before any identity kind was established


@dataclass
class StreamStats:
    """What happened to streams, by identity kind (never by name), each key from a closed set: read by
    ``server/metrics.py`` at scrape time."""

    opened: Counter[Kind] = field(default_factory=Counter)
    reports: Counter[Kind] = field(default_factory=Counter)  # report messages handed to the transport
    skipped: Counter[Kind] = field(default_factory=Counter)  # reports not sent: the previous one was still unsent
    refused: Counter[tuple[str, str, str]] = field(default_factory=Counter)  # (kind, status, reason)
    ended: Counter[tuple[Kind, End]] = field(default_factory=Counter)
    resets: Counter[tuple[Kind, End]] = field(default_factory=Counter)  # the ends that were RST_STREAM


class _Stream:
    """One open stream's state, woken by its timer, a reload, a rotation, shutdown or the client's reset."""

    __slots__ = ("address", "authority", "checks", "extensions", "gone", "kind", "slot", "wake")

    def __init__(
        self, authority: Authority, checks: Checks, extensions: Scope, slot: Slot, address: str | None
    ) -> None:
        self.authority = authority
        self.checks = checks
        self.extensions = extensions  # the connection's TLS extension, to identify it again after a reload
        self.address = address  # the client's, charged for verifying its chain again after a reload
        self.slot = slot
        self.kind = slot.kind
        self.gone = False
        self.wake = asyncio.Event()


class OobService:
    """The ASGI app serving ``oob.PATH``; everything else goes to ``app`` unchanged. ``enabled`` is the
    load-report feature (as the middleware's)."""

    def __init__(
        self,
        app: ASGIApp,
        trust: TrustService,
        sampler: Sampler,
        *,
        enabled: bool,
        decimals: int,
        min_interval: float,
        limits: Limits,
        write_deadline: float = WRITE_DEADLINE,
    ) -> None:
        self.app = app
        self.trust = trust
        self.enabled = enabled
        self.sampler = sampler
        self.decimals = decimals
        self.min_interval = min_interval
        self.slots = Slots(limits)
        self.write_deadline = write_deadline
        self.streams: set[_Stream] = set()
        self.closing = False
        self.stats = StreamStats()
        self._frame: tuple[LoadReport | None, bytes] = (None, b"")

    # --- events from the server ---

    def reloaded(self, *_: Any) -> None:
        """A credential reload happened: every stream re-checks its entitlement now, not at its next report."""
        for stream in self.streams:
            stream.wake.set()

    def shutdown(self) -> None:
        """The server is stopping: every stream ends with UNAVAILABLE, new ones are refused with it."""
        self.closing = True
        for stream in self.streams:
            stream.wake.set()

    # --- the request ---

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != oob.PATH:
            await self.app(scope, receive, send)
            return
        refusal = oob.check_transport(scope.get("http_version", ""), scope["method"], scope["headers"])
        if refusal is not None:
            self.stats.refused[(NO_KIND, f"http-{refusal.http_status}", NOT_GRPC)] += 1
            await respond(
                send, refusal.http_status, refusal.message.encode() + b"\n", [(b"content-type", b"text/plain")]
            )
            return
        extensions = scope.get("extensions") or {}
        address = peer(scope)
        authority = self.trust.authority
        checks = await self.trust.checks(extensions, authority, address)
        reason = self._entitled(authority, checks)
        if not reason.grants:
            presented = reason is not Reason.NO_CERTIFICATE
            status = oob.refusal_status(presented)
            await self._trailers_only(send, status, "not entitled to load reports", NO_KIND, reason.value)
            return
        kind = Kind.FRONT_PROXY if reason is Reason.FRONT_PROXY else Kind.LOAD_READER
        if self.closing:
            await self._trailers_only(send, Status.UNAVAILABLE, "server shutting down", kind, SHUTTING_DOWN)
            return
        connection = id(extensions.get(CONNECTION_KEY) or scope)
        slot = self.slots.take(kind, _certificate(extensions), connection)
        if isinstance(slot, Full):
            await self._trailers_only(send, Status.RESOURCE_EXHAUSTED, "too many load report streams", kind, slot)
            return
        stream = _Stream(authority, checks, extensions, slot, address)
        self.streams.add(stream)
        try:
            try:
                async with asyncio.timeout(READ_TIMEOUT):
                    request = oob.parse_request(oob.unframe(await _read_message(receive)))
            except GrpcError as error:
                await self._trailers_only(send, error.status, error.message, kind, BAD_REQUEST)
                return
            except TimeoutError:
                message = "request message not received in time"
                await self._trailers_only(send, Status.INVALID_ARGUMENT, message, kind, BAD_REQUEST)
                return
            self.stats.opened[kind] += 1
            control = extensions.get(STREAM_CONTROL_KEY)
            await self._stream(stream, request, scope, extensions.get(ROTATION_KEY), control, receive, send)
        finally:
            self._release(stream)

    def _release(self, stream: _Stream) -> None:
        """Give the stream's slot back (once): when the client resets it, at once, so that a new stream opened
        right behind the reset is counted without it; when it must end, before anything more is sent on it;
        otherwise when the stream ends."""
        self.streams.discard(stream)
        self.slots.release(stream.slot)

    def _entitled(self, authority: Authority, checks: Checks) -> Reason:
        if not self.enabled:
            return Reason.FEATURE_OFF
        return authority.policy.entitles_stream(checks.identity, at(now_us()), checks.reader)

    async def _trailers_only(self, send: Send, status: Status, message: str, kind: str, reason: str) -> None:
        self.stats.refused[(kind, status.name, reason)] += 1
        headers = [*oob.status_trailers(status, message), *oob.RESPONSE_HEADERS]  # grpc-status first: trailers-only
        await send({"type": "http.response.trailers", "headers": headers, "more_trailers": False})

    def _current_frame(self) -> bytes:
        """The framed report of the sampler's latest sample, serialized once per sample for every stream."""
        report = self.sampler.report
        cached, framed = self._frame
        if report is not cached:
            framed = oob.report_frame(report, self.decimals) if report is not None else b""
            self._frame = (report, framed)
        return framed

    async def _verdict(self, stream: _Stream, rotation: Any) -> tuple[End, Status, str] | None:
        """Why the stream must end now, or None."""
        if self.closing:
            return End.SHUTDOWN, Status.UNAVAILABLE, "server shutting down"
        if rotation is not None and rotation.started:
            return End.ROTATION, Status.UNAVAILABLE, "connection rotating (GOAWAY)"
        authority = self.trust.authority
        if authority is not stream.authority:
            if await self._recheck(stream, authority):
                return None
            return End.WITHDRAWN, Status.PERMISSION_DENIED, "entitlement withdrawn"
        if not self._entitled(authority, stream.checks).grants:
            return End.EXPIRED, Status.PERMISSION_DENIED, "entitlement expired"
        return None

    async def _recheck(self, stream: _Stream, authority: Authority) -> bool:
        """Under a reloaded Authority, the stream's certificate is checked afresh (its chain cache is new): verified
        off the loop and charged to the stream's address, as in band."""
        stream.authority = authority
        stream.checks = await self.trust.checks(stream.extensions, authority, stream.address)
        return self._entitled(authority, stream.checks).grants

    async def _stream(
        self,
        stream: _Stream,
        request: oob.StreamRequest,
        scope: Scope,
        rotation: Any,
        control: StreamControl | None,
        receive: Receive,
        send: Send,
    ) -> None:
        interval = oob.floor_interval(request.interval, self.min_interval)
        loop = asyncio.get_running_loop()
        watcher = loop.create_task(_watch(receive, stream, self._release))
        if rotation is not None:
            rotation.listeners.add(stream.wake.set)
        timer: asyncio.TimerHandle | None = None
        writes = WriteDeadline(self.write_deadline)
        try:
            await send(
                {"type": "http.response.start", "status": 200, "headers": list(oob.RESPONSE_HEADERS), "trailers": True}
            )
            due = loop.time()
            while True:
                verdict = await self._verdict(stream, rotation)
                if stream.gone:
                    self.stats.ended[(stream.kind, End.CLIENT)] += 1
                    return
                if verdict is not None:
                    await self._end(stream, scope, control, send, *verdict)
                    return
                now = loop.time()
                unsent = await _unsent(control, scope)
                if writes.check(unsent, now):
                    await self._end(stream, scope, control, send, End.WRITE_DEADLINE, Status.UNAVAILABLE, "")
                    return
                if now >= due:
                    framed = self._current_frame()
                    if framed and writes.may_send(unsent):
                        await send({"type": "http.response.body", "body": framed, "more_body": True})
                        writes.sent(now)
                        self.stats.reports[stream.kind] += 1
                    elif framed:
                        self.stats.skipped[stream.kind] += 1
                    due = now + interval
                wake = min(due, writes.due() or math.inf) if control is not None else due
                if timer is not None:
                    timer.cancel()
                timer = loop.call_at(wake, stream.wake.set)
                await stream.wake.wait()
                stream.wake.clear()
        finally:
            if timer is not None:
                timer.cancel()
            if rotation is not None:
                rotation.listeners.discard(stream.wake.set)
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher

    async def _end(
        self,
        stream: _Stream,
        scope: Scope,
        control: StreamControl | None,
        send: Send,
        end: End,
        status: Status,
        message: str,
    ) -> None:
        """End the stream now: its slot first, then its status trailer if nothing is left unsent (it goes out
        without waiting), else RST_STREAM (a trailer would wait behind the unsent bytes, for ever with a zero
        window). The write deadline always resets: its stream is stuck by definition."""
        self._release(stream)
        self.stats.ended[(stream.kind, end)] += 1
        if control is not None and (end is End.WRITE_DEADLINE or await _unsent(control, scope)):
            self.stats.resets[(stream.kind, end)] += 1
            await control.reset(scope)
            return
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        await send(
            {"type": "http.response.trailers", "headers": oob.status_trailers(status, message), "more_trailers": False}
        )


def _certificate(extensions: Scope) -> str:
    """The identity slots are counted by: the client's leaf certificate (PEM, as the connection holds it)."""
    tls = extensions.get("tls") or {}
    chain = tls.get("client_cert_chain") or [""]
    return str(chain[0])


async def _unsent(control: StreamControl | None, scope: Scope) -> int:
    """Bytes of the stream the server still holds unsent (0 without server/http's control: in-process tests)."""
    unsent = await control.unsent(scope) if control is not None else None
    return unsent or 0


async def _read_message(receive: Receive) -> bytes:
    """The request body, read no further than the one message its prefix announces (bounded by MAX_REQUEST)."""
    body = b""
    while True:
        message = await receive()
        if message["type"] != "http.request":
            raise GrpcError(Status.INVALID_ARGUMENT, "request ended before its message")
        body += message.get("body", b"")
        if len(body) >= oob.PREFIX_SIZE:
            need = oob.expected_length(body)
            if len(body) >= need or need > oob.PREFIX_SIZE + oob.MAX_REQUEST:  # unframe refuses the oversized
                return body
        if not message.get("more_body", False):
            return body


async def _watch(receive: Receive, stream: _Stream, release: Callable[[_Stream], None]) -> None:
    """When the client goes away (reset, or the connection closed): release the stream's slot and wake it."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            stream.gone = True
            release(stream)
            stream.wake.set()
            return
