"""A sibling worker that holds fewer connections but does not accept (kept busy by a heavy client, or stuck) must
not slow this worker's accepts by a deferral per connection. Before the fix each of a burst's connections waited
the whole ``MAX_DEFER`` for the sibling here (11 looks at the siblings per connection); now the first one does,
and the rest of the burst is accepted without deferring. Counted (looks at the siblings), never timed."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl

import trustme

from secure_orca.server.http.accept import DEFER_STEP, MAX_DEFER, Connections, accept_in_turn
from secure_orca.server.http.handshake import HandshakeStats
from secure_orca.server.http.pending import HandshakeLimits
from secure_orca.server.listener import listen

CONNECTIONS = 30


class BusySibling:
    """One live sibling with no connections, which never takes one."""

    def __init__(self) -> None:
        self.looks = 0
        self.held = 0
        self.most = 0

    def publish(self, held: int) -> None:
        self.held = held
        self.most = max(self.most, held)

    def siblings(self) -> list[int]:
        self.looks += 1
        return [0]


async def accepted(balance: BusySibling) -> int:
    ca = trustme.CA()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost").configure_cert(context)
    sock = listen("127.0.0.1", 0)
    port = sock.getsockname()[1]
    seen: list[int] = []

    async def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    connections = Connections(context, HandshakeLimits(), HandshakeStats(), on_connection, balance)
    task = asyncio.get_running_loop().create_task(accept_in_turn(sock, connections))
    clients = []
    try:
        for _ in range(CONNECTIONS):
            client = socket.create_connection(("127.0.0.1", port))
            clients.append(client)
            while balance.most < len(clients) and len(seen) < 10_000:  # until this one is accepted
                seen.append(balance.looks)
                await asyncio.sleep(0.001)
        return balance.looks
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        for client in clients:
            client.close()
        sock.close()
        connections.close()


def test_a_busy_sibling_costs_one_deferral_not_one_per_connection() -> None:
    balance = BusySibling()
    looks = asyncio.run(accepted(balance))
    per_deferral = round(MAX_DEFER / DEFER_STEP) + 1
    assert balance.most == CONNECTIONS  # every connection was accepted here
    assert looks <= 3 * per_deferral, looks  # before the fix: about CONNECTIONS * per_deferral
