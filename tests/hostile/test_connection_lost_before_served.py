"""A connection whose TLS handshake completed but which was lost before its task ran (the client vanished, or
shutdown ended it in that instant) ends quietly: nothing served, no traceback, the transport closed. Before the fix
``GatewayTCPServer.run`` read the peer's address from ``get_extra_info("socket")``, which asyncio's SSL transport
gives as None once the connection is lost: ``AttributeError: 'NoneType' object has no attribute 'family'``, logged
as "Unhandled exception in client_connected_cb". Real TLS on loopback, the server's own accept path."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from typing import Any

import trustme
from hypercorn.app_wrappers import ASGIWrapper
from hypercorn.asyncio.worker_context import WorkerContext

from secure_orca.server.http.accept import Connections, accept_in_turn
from secure_orca.server.http.handshake import HandshakeStats
from secure_orca.server.http.pending import HandshakeLimits
from secure_orca.server.http.serve import GatewayConfig, GatewayTCPServer
from secure_orca.server.listener import listen


async def lost_then_served(ca: trustme.CA) -> tuple[list[dict[str, Any]], list[str], list[tuple[bool, bool]]]:
    """One client that completes the handshake; the server's connection is lost (aborted, as shutdown ends one)
    before ``GatewayTCPServer`` runs. Returns what the loop reported as unhandled, what the app was asked, and
    per connection: whether its socket was gone when it was handed over, and whether its transport ended closed."""
    loop = asyncio.get_running_loop()
    unhandled: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _, context: unhandled.append(context))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost").configure_cert(context)
    context.set_alpn_protocols(["h2", "http/1.1"])
    asked: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        asked.append(scope["type"])

    config = GatewayConfig(context, 0, 0.0)
    wrapped = ASGIWrapper(app)
    ended = loop.create_future()
    seen: list[tuple[bool, bool]] = []

    async def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            writer.transport.abort()
            with contextlib.suppress(Exception):
                await writer.wait_closed()  # the connection is lost: asyncio's SSL transport has let its socket go
            gone = writer.get_extra_info("socket") is None
            await GatewayTCPServer(wrapped, loop, config, WorkerContext(None), {}, reader, writer)
        finally:
            seen.append((gone, writer.transport.is_closing()))
            ended.set_result(None)

    sock = listen("127.0.0.1", 0)
    connections = Connections(context, HandshakeLimits(), HandshakeStats(), on_connection)
    accepting = loop.create_task(accept_in_turn(sock, connections))
    client_context = ssl.create_default_context()
    ca.configure_trust(client_context)
    client_context.set_alpn_protocols(["h2"])
    try:
        _, writer = await asyncio.open_connection(
            "127.0.0.1", sock.getsockname()[1], ssl=client_context, server_hostname="localhost"
        )
        await asyncio.wait_for(ended, 30)
        for _ in range(10):  # the connection task's end, and what the loop reports of it
            await asyncio.sleep(0)
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()
    finally:
        accepting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await accepting
        sock.close()
        connections.close()
    return unhandled, asked, seen


def test_a_connection_lost_before_it_is_served_ends_quietly() -> None:
    unhandled, asked, seen = asyncio.run(lost_then_served(trustme.CA()))
    assert seen == [(True, True)]  # handed over without its socket (the state the fix meets), and left closed
    assert unhandled == []  # before the fix: "Unhandled exception in client_connected_cb", AttributeError
    assert asked == []  # nothing served
