"""One request through an ASGI app in memory, with an empty body: the messages the app sent (no sockets)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

App = Callable[[MutableMapping[str, Any], Any, Any], Awaitable[None]]


async def run_asgi(app: App, scope: MutableMapping[str, Any]) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b""}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(dict(message))

    await app(scope, receive, send)
    return sent
