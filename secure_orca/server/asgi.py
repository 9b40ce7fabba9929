"""Small ASGI helpers shared by the demo backend and the proxy."""

from __future__ import annotations

import json
from typing import Any

from secure_orca.server.middleware import Receive, Send

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


async def read_body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)
