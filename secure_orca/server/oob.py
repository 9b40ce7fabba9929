"""``StreamCoreMetrics`` on the serving port: out-of-band ORCA load reports over one gRPC stream (the ASGI shell
around ``secure_orca.orca.oob``).

Mounted in front of the load-report middleware, so the stream is neither a request of the sampler's rates nor
seen by the application. The entitlement is the in-band path's verified decision (``TrustService.checks`` under
the Authority in force: the same caches, the same reload, the chain verified off the loop and charged to the
client's address), re-checked at every report and whenever a reload swaps the Authority (``reloaded``), so a
revoked or expired certificate's stream ends at once with PERMISSION_DENIED. Refusals are trailers-only and read
nothing of the request body. Every stream ends with a status: server shutdown and connection rotation (GOAWAY) end
it with UNAVAILABLE.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import Callable
from typing import Any

from secure_orca.authz.authority import Authority
from secure_orca.authz.memo import Checks, at
from secure_orca.authz.reasons import Reason
from secure_orca.orca import oob
from secure_orca.orca.oob import GrpcError, Status
from secure_orca.orca.report import LoadReport
from secure_orca.server.adapter import ROTATION_KEY
from secure_orca.server.asgi import ASGIApp, Receive, Scope, Send, respond
from secure_orca.server.sampler import Sampler
from secure_orca.server.trust import CONNECTION_KEY, TrustService, now_us, peer

log = logging.getLogger("secure_orca.oob")
READ_TIMEOUT = 10.0  # seconds an entitled caller has to send its one request message


class _Stream:
    """One open stream's state, woken by its timer, a reload, a rotation, shutdown or the client's reset."""

    __slots__ = ("address", "authority", "checks", "connection", "extensions", "gone", "wake")

    def __init__(
        self, authority: Authority, checks: Checks, extensions: Scope, connection: int, address: str | None
    ) -> None:
        self.authority = authority
        self.checks = checks
        self.extensions = extensions  # the connection's TLS extension, to identify it again after a reload
        self.address = address  # the client's, charged for verifying its chain again after a reload
        self.connection = connection  # the key of its connection's count
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
        max_streams: int,
        max_per_connection: int,
    ) -> None:
        self.app = app
        self.trust = trust
        self.enabled = enabled
        self.sampler = sampler
        self.decimals = decimals
        self.min_interval = min_interval
        self.max_streams = max_streams
        self.max_per_connection = max_per_connection
        self.streams: set[_Stream] = set()
        self.per_connection: Counter[int] = Counter()
        self.closing = False
        self.reports = 0  # report messages sent, all streams
        self.outcomes: Counter[str] = Counter()  # opened, and each refusal or end by status name
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
            self.outcomes[f"http-{refusal.http_status}"] += 1
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
            await self._trailers_only(send, oob.refusal_status(presented), "not entitled to load reports")
            return
        if self.closing:
            await self._trailers_only(send, Status.UNAVAILABLE, "server shutting down")
            return
        connection = id(extensions.get(CONNECTION_KEY) or scope)
        if len(self.streams) >= self.max_streams or self.per_connection[connection] >= self.max_per_connection:
            await self._trailers_only(send, Status.RESOURCE_EXHAUSTED, "too many load report streams")
            return
        stream = _Stream(authority, checks, extensions, connection, address)
        self.streams.add(stream)
        self.per_connection[connection] += 1
        try:
            try:
                async with asyncio.timeout(READ_TIMEOUT):
                    request = oob.parse_request(oob.unframe(await _read_message(receive)))
            except GrpcError as error:
                await self._trailers_only(send, error.status, error.message)
                return
            except TimeoutError:
                await self._trailers_only(send, Status.INVALID_ARGUMENT, "request message not received in time")
                return
            self.outcomes["opened"] += 1
            await self._stream(stream, request, extensions.get(ROTATION_KEY), receive, send)
        finally:
            self._release(stream)

    def _release(self, stream: _Stream) -> None:
        """Give the stream's slot back (once): when the client resets it, at once, so that a new stream opened
        right behind the reset is counted without it; otherwise when the stream ends."""
        if stream not in self.streams:
            return
        self.streams.discard(stream)
        self.per_connection[stream.connection] -= 1
        if not self.per_connection[stream.connection]:
            del self.per_connection[stream.connection]

    def _entitled(self, authority: Authority, checks: Checks) -> Reason:
        if not self.enabled:
            return Reason.FEATURE_OFF
        return authority.policy.entitles_stream(checks.identity, at(now_us()), checks.reader)

    async def _trailers_only(self, send: Send, status: Status, message: str) -> None:
        self.outcomes[status.name] += 1
        headers = [*oob.status_trailers(status, message), *oob.RESPONSE_HEADERS]  # grpc-status first: adapter
        await send({"type": "http.response.trailers", "headers": headers, "more_trailers": False})

    def _current_frame(self) -> bytes:
        """The framed report of the sampler's latest sample, serialized once per sample for every stream."""
        report = self.sampler.report
        cached, framed = self._frame
        if report is not cached:
            framed = oob.report_frame(report, self.decimals) if report is not None else b""
            self._frame = (report, framed)
        return framed

    async def _verdict(self, stream: _Stream, rotation: Any) -> tuple[Status, str] | None:
        """Why the stream must end now, or None."""
        if self.closing:
            return Status.UNAVAILABLE, "server shutting down"
        if rotation is not None and rotation.started:
            return Status.UNAVAILABLE, "connection rotating (GOAWAY)"
        authority = self.trust.authority
        if authority is not stream.authority:
            if not await self._recheck(stream, authority):
                return Status.PERMISSION_DENIED, "entitlement withdrawn"
            return None
        if not self._entitled(authority, stream.checks).grants:
            return Status.PERMISSION_DENIED, "entitlement expired"
        return None

    async def _recheck(self, stream: _Stream, authority: Authority) -> bool:
        """Under a reloaded Authority, the stream's certificate is checked afresh (its chain cache is new): verified
        off the loop and charged to the stream's address, as in band."""
        stream.authority = authority
        stream.checks = await self.trust.checks(stream.extensions, authority, stream.address)
        return self._entitled(authority, stream.checks).grants

    async def _stream(
        self, stream: _Stream, request: oob.StreamRequest, rotation: Any, receive: Receive, send: Send
    ) -> None:
        interval = oob.floor_interval(request.interval, self.min_interval)
        loop = asyncio.get_running_loop()
        watcher = loop.create_task(_watch(receive, stream, self._release))
        if rotation is not None:
            rotation.listeners.add(stream.wake.set)
        timer: asyncio.TimerHandle | None = None
        try:
            await send({"type": "http.response.start", "status": 200, "headers": list(oob.RESPONSE_HEADERS),
                        "trailers": True})  # fmt: skip
            due = loop.time()
            while True:
                verdict = await self._verdict(stream, rotation)
                if stream.gone:
                    return
                if verdict is not None:
                    await self._end(send, *verdict)
                    return
                now = loop.time()
                if now >= due:
                    framed = self._current_frame()
                    if framed:
                        await send({"type": "http.response.body", "body": framed, "more_body": True})
                        self.reports += 1
                    due = now + interval
                    if timer is not None:
                        timer.cancel()
                    timer = loop.call_at(due, stream.wake.set)
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

    async def _end(self, send: Send, status: Status, message: str) -> None:
        self.outcomes[status.name] += 1
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        await send({"type": "http.response.trailers", "headers": oob.status_trailers(status, message),
                    "more_trailers": False})  # fmt: skip


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
