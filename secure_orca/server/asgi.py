"""ASGI types and small helpers shared by the middleware, the demo backend and the proxy."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

Headers = list[tuple[bytes, bytes]]


NO_BODY_STATUSES = frozenset({204, 304})


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


async def read_body(receive: Receive, limit: int | None = None) -> bytes:
    """The request body; with ``limit``, reading stops once more than ``limit`` bytes arrived (the caller
    sees a body longer than the limit and refuses it)."""
    chunks = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunk = message.get("body", b"")
        chunks.append(chunk)
        size += len(chunk)
        if not message.get("more_body", False) or (limit is not None and size > limit):
            break
    return b"".join(chunks)
