"""The handshake pool with real handshakes (trustme) on a real loop: one thread, many connections at once, half of
them gone after their first bytes. Every connection still there completes; the steps of those gone are skipped or
end quietly; the pool ends idle; nothing reaches the loop's exception handler."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from typing import Any

import trustme

from secure_orca.server.http.handshake import GatewaySSLProtocol, HandshakePool, HandshakeStats, ReadBuffer

CONNECTIONS = 24


async def burst() -> tuple[int, int, list[dict[str, Any]], HandshakePool]:
    ca = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost").configure_cert(server_context)
    client_context = ssl.create_default_context()
    ca.configure_trust(client_context)
    loop = asyncio.get_running_loop()
    errors: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: errors.append(context))
    pool = HandshakePool(loop, 1)
    buffer = ReadBuffer()
    served = 0

    async def connected(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal served
        served += 1
        writer.write(await reader.readexactly(2))
        await writer.drain()
        writer.close()

    def factory() -> GatewaySSLProtocol:
        app = asyncio.StreamReaderProtocol(asyncio.StreamReader(), connected)
        return GatewaySSLProtocol(
            loop, app, server_context, None, buffer, pool, 10.0, 5.0, HandshakeStats(), lambda p: None
        )

    server = await loop.create_server(factory, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]

    async def complete() -> bytes:
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=client_context, server_hostname="localhost"
        )
        writer.write(b"ok")
        echoed = await reader.readexactly(2)
        writer.close()
        return echoed

    async def leave() -> None:
        """A ClientHello, then gone before the server's answer."""
        hello_in, hello_out = ssl.MemoryBIO(), ssl.MemoryBIO()
        client = client_context.wrap_bio(hello_in, hello_out, server_hostname="localhost")
        with contextlib.suppress(ssl.SSLWantReadError):
            client.do_handshake()
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(hello_out.read())
        await writer.drain()
        writer.transport.abort()

    try:
        results = await asyncio.gather(*(complete() if i % 2 else leave() for i in range(CONNECTIONS)))
        for _ in range(100):  # the steps of those gone may still be on their way back
            if pool.busy == 0 and not pool.waiting:
                break
            await asyncio.sleep(0.01)
    finally:
        server.close()
        pool.close()
    return sum(1 for r in results if r == b"ok"), served, errors, pool


def test_one_thread_serves_a_burst_with_half_of_it_gone() -> None:
    completed, served, errors, pool = asyncio.run(burst())
    assert completed == served == CONNECTIONS // 2
    assert pool.busy == 0 and not pool.waiting
    assert errors == []
