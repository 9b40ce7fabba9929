"""ASGI types and small helpers shared by the middleware, the demo backend and the proxy."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from secure_orca.server.refusals import KUBE_ONLY, RouteDialects, error_body

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

Headers = list[tuple[bytes, bytes]]


NO_BODY_STATUSES = frozenset({204, 304})
REQUEST_TIMEOUT = 60.0  # kube-apiserver's --request-timeout default (k8s.io/apiserver pkg/server/config.go)
# Requests of one connection that may wait for their body at once, when their caller is anonymous. An
# authenticated caller's requests may all wait: at most the connection's SETTINGS_MAX_CONCURRENT_STREAMS
# (--http2-max-streams-per-connection), each within --request-timeout, each body bounded by its stream's
# flow-control window. A load balancer multiplexes its clients' uploads on a few connections (issue 39: 200
# concurrent completions from one load balancer); an anonymous client gets no such room.
MAX_PENDING_BODIES = 32
log = logging.getLogger("secure_orca.server")


async def respond(send: Send, status: int, body: bytes, headers: Headers) -> None:
    """Send a whole response (headers with content-length, then the body); 204 and 304 carry neither
    (RFC 9110 sections 8.6 and 15.4.5)."""
    if status in NO_BODY_STATUSES:
        body = b""
        headers = [h for h in headers if h[0].lower() != b"content-type"]
    else:
        headers = [*headers, (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def respond_json(send: Send, status: int, payload: Any, headers: Headers | None = None) -> None:
    body = json.dumps(payload, separators=(",", ":")).encode() + b"\n"
    await respond(send, status, body, [(b"content-type", b"application/json"), *(headers or [])])


async def read_body(receive: Receive, limit: int | None = None) -> bytes | None:
    """The request body, or None when the client left (or its body was refused) before the end: a partial
    body is never handed on. With ``limit``, reading stops once more than ``limit`` bytes arrived (the caller
    sees a body longer than the limit and refuses it)."""
    chunks = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunk = message.get("body", b"")
        chunks.append(chunk)
        size += len(chunk)
        if not message.get("more_body", False) or (limit is not None and size > limit):
            return b"".join(chunks)


TIMED_OUT = ("Timeout", "the request body did not arrive within the request timeout")
TOO_MANY_PENDING = ("TooManyPendingBodies", "too many request bodies pending on this connection")
_DISCONNECT: Message = {"type": "http.disconnect"}


class BodyDeadline:
    """Every request body, on every route, must be complete within ``timeout`` of the application's first
    read of it (at once, for every route here), as kube-apiserver's ``--request-timeout`` bounds every
    non-long-running request (k8s.io/apiserver pkg/server/filters/timeout.go,
    WithTimeoutForNonLongRunningRequests; kube answers its handler's overrun with 504, a body that does not
    come gets 408 here). And at most ``max_pending`` requests of one connection may wait for their body at
    once, unless ``authenticated(scope)`` holds for the request: then ``streams`` (the connection's stream
    limit), so an authenticated load balancer may upload on every stream it is allowed. Either refusal is a
    408 (HTTP/1.1: ``Connection: close``, the unread body must not be read as a request) in the route's
    dialect (``errors``); the application then receives ``http.disconnect``, as when a client leaves, and
    whatever it still sends goes nowhere. 408 is not an error in the load report (only 429 and 5xx are): no client can
    raise ``eps`` by stalling."""

    def __init__(
        self,
        app: ASGIApp,
        timeout: float = REQUEST_TIMEOUT,
        max_pending: int = MAX_PENDING_BODIES,
        errors: RouteDialects = KUBE_ONLY,
        authenticated: Callable[[Scope], bool] | None = None,
        streams: int = MAX_PENDING_BODIES,
    ) -> None:
        self.app = app
        self.authenticated = authenticated
        self.streams = max(streams, max_pending)
        self.errors = errors  # the 408's dialect per route (server.refusals)
        self.timeout = timeout
        self.max_pending = max_pending
        self.pending: dict[Any, int] = {}  # per connection (the client's address and port)

    def may_wait(self, scope: Scope, held: int) -> bool:
        """Past ``max_pending``: whether this request may still wait (an authenticated caller, below ``streams``)."""
        return self.authenticated is not None and held < self.streams and self.authenticated(scope)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        body = _Body(self, scope, receive, send)
        await self.app(scope, body.receive, body.send)


class _Body:
    """One request's side of BodyDeadline (slots and bound methods: a GET that never reads costs little)."""

    __slots__ = ("complete", "deadline", "guard", "refused", "scope", "started", "upstream_receive", "upstream_send")

    def __init__(self, guard: BodyDeadline, scope: Scope, receive: Receive, send: Send) -> None:
        self.guard = guard
        self.scope = scope
        self.upstream_receive = receive
        self.upstream_send = send
        self.deadline: float | None = None
        self.complete = self.refused = self.started = False

    async def refuse(self, why: tuple[str, str]) -> Message:
        self.refused = True
        if not self.started:
            closing = [(b"connection", b"close")] if self.scope.get("http_version", "1.1") != "2" else []
            reason, message = why
            payload = error_body(self.guard.errors.of(self.scope.get("path", "")), 408, message, reason)
            await respond_json(self.upstream_send, 408, payload, closing)
        return _DISCONNECT

    async def receive(self) -> Message:
        if self.refused:
            return _DISCONNECT
        if self.complete:
            return await self.upstream_receive()  # after the body, only a disconnect can come: not bounded
        guard, loop = self.guard, asyncio.get_running_loop()
        if self.deadline is None:
            self.deadline = loop.time() + guard.timeout
        connection = tuple(self.scope.get("client") or ())
        held = guard.pending.get(connection, 0)
        if held >= guard.max_pending and not guard.may_wait(self.scope, held):  # identity read only past the cap
            log.info("request refused: %d request bodies already pending on its connection", held)
            return await self.refuse(TOO_MANY_PENDING)
        guard.pending[connection] = held + 1
        try:
            async with asyncio.timeout_at(self.deadline):  # no task per read, unlike wait_for
                message = await self.upstream_receive()
        except TimeoutError:
            return await self.refuse(TIMED_OUT)
        finally:
            guard.pending[connection] -= 1
            if not guard.pending[connection]:
                del guard.pending[connection]
        if message["type"] != "http.request" or not message.get("more_body", False):
            self.complete = True
        return message

    async def send(self, message: Message) -> None:
        if self.refused:
            return
        if message["type"] == "http.response.start":
            self.started = True
        await self.upstream_send(message)
