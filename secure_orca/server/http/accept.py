"""Accepting from a listening socket that sibling workers share: one connection at a time, in turn.

A load balancer keeps few long-lived connections (Envoy: about one per Envoy worker to each host) and opens them
together. Workers that each accept whatever is queued when they wake let the first one awake take them all, and
the others then idle while it serves every request. Here a worker publishes how many connections it holds
(handshakes included) and leaves a queued connection to a live sibling that holds fewer, for at most
``MAX_DEFER`` seconds: few connections spread one by one, and a sibling that is busy or stuck never stops the
accepts. Once the siblings have left a connection waiting that long, this worker accepts without deferring for
``BUSY_SIBLINGS`` seconds, so a sibling kept busy (by a heavy client, say) slows this worker's accepts by one
``MAX_DEFER`` a second at most, not by one per connection. nginx's ``ngx_accept_disabled`` answers the same
question (a worker with fewer free connections skips accepting for a while).

Each accepted connection's TLS handshake, then ``on_connection(reader, writer)``, runs in a task of its own, as
``asyncio.start_server`` would run them (``loop.connect_accepted_socket`` with a ``StreamReaderProtocol``).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

log = logging.getLogger("secure_orca.server")
DEFER_STEP = 0.002  # seconds between two looks at the siblings while leaving them a connection
MAX_DEFER = 0.02  # then the connection is accepted here whatever the siblings hold
BUSY_SIBLINGS = 1.0  # after a connection the siblings left waiting that long, accept without deferring for this
_ACCEPT_ERROR_PAUSE = 0.1  # after EMFILE and the like: the queue keeps the connection meanwhile

OnConnection = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class Balance(Protocol):
    """Where a worker publishes the connections it holds and learns whether a sibling should take the next."""

    def publish(self, held: int) -> None: ...

    def siblings(self) -> Sequence[int]:
        """Connections held by each live sibling."""
        ...


def defer(held: int, siblings: Sequence[int]) -> bool:
    """Leave the next connection to a sibling: one is live and holds fewer than this worker."""
    return bool(siblings) and held > min(siblings)


async def accept_in_turn(
    sock: socket.socket,
    context: ssl.SSLContext,
    handshake_timeout: float,
    on_connection: OnConnection,
    balance: Balance,
) -> None:
    """Accept from ``sock`` until cancelled."""
    loop = asyncio.get_running_loop()
    held = 0
    starting: set[asyncio.Task[None]] = set()

    def ended(task: asyncio.Task[None]) -> None:
        nonlocal held
        held -= 1
        starting.discard(task)
        balance.publish(held)

    balance.publish(held)
    eager_until = 0.0  # the siblings looked busy: no deferring until then (the loop's clock)
    while True:
        await _readable(loop, sock)
        waited = 0.0
        while loop.time() >= eager_until and defer(held, balance.siblings()):
            if waited >= MAX_DEFER:
                eager_until = loop.time() + BUSY_SIBLINGS
                break
            await asyncio.sleep(DEFER_STEP)
            waited += DEFER_STEP
        try:
            conn, _ = sock.accept()
        except (BlockingIOError, InterruptedError):
            continue  # a sibling took it
        except OSError as error:  # out of descriptors or memory: the connection waits in the queue
            log.warning("cannot accept a connection: %s", error.strerror or type(error).__name__)
            await asyncio.sleep(_ACCEPT_ERROR_PAUSE)
            continue
        conn.setblocking(False)
        held += 1
        balance.publish(held)
        task = loop.create_task(_connection(loop, conn, context, handshake_timeout, on_connection))
        starting.add(task)
        task.add_done_callback(ended)


async def _readable(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> None:
    """Return once a connection is queued (or a sibling is about to take it)."""
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:  # called on every loop turn while readable, until removed below
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(sock.fileno(), wake)
    try:
        await ready
    finally:
        loop.remove_reader(sock.fileno())


async def _connection(
    loop: asyncio.AbstractEventLoop,
    conn: socket.socket,
    context: ssl.SSLContext,
    handshake_timeout: float,
    on_connection: OnConnection,
) -> None:
    """The handshake, then ``on_connection``; returns when the connection has ended. A failed handshake ends it
    quietly, as ``asyncio.start_server`` does."""
    finished = loop.create_future()

    async def connected(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await on_connection(reader, writer)
        finally:
            if not finished.done():
                finished.set_result(None)

    reader = asyncio.StreamReader()
    protocol = asyncio.StreamReaderProtocol(reader, connected)
    try:
        await loop.connect_accepted_socket(lambda: protocol, conn, ssl=context, ssl_handshake_timeout=handshake_timeout)
    except Exception:  # the handshake failed or timed out, the peer went away: as start_server, quietly
        conn.close()
        return
    await finished
