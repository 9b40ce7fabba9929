"""Accepting connections, alone or in turn with sibling workers that share the listening socket, and starting
each one's TLS handshake with the caps and deadlines of ``pending`` and ``handshake``.

A load balancer keeps few long-lived connections (Envoy: about one per Envoy worker to each host) and opens them
together. Workers that each accept whatever is queued when they wake let the first one awake take them all, and
the others then idle while it serves every request. Here a worker publishes how many connections it holds
(handshakes included) and leaves a queued connection to a live sibling that holds fewer, for at most
``MAX_DEFER`` seconds: few connections spread one by one, and a sibling that is busy or stuck never stops the
accepts. Once the siblings have left a connection waiting that long, this worker accepts without deferring for
``BUSY_SIBLINGS`` seconds, so a sibling kept busy (by a heavy client, say) slows this worker's accepts by one
``MAX_DEFER`` a second at most, not by one per connection. nginx's ``ngx_accept_disabled`` answers the same
question (a worker with fewer free connections skips accepting for a while). A process serving alone accepts
with no sibling (``SOLO``).

Up to ``ACCEPT_BATCH`` connections are accepted per wake (asyncio's own batch). When descriptors run short
(EMFILE, ENFILE), the newest connection whose handshake has not completed is given up, so the one waiting in the
queue (a load balancer's, say) can be accepted; with none such, a reserve descriptor is spent to accept and close
the next queued connection (libuv's ``uv__emfile_trick``), so the queue moves instead of the loop spinning on a
readable socket. Each connection's handshake, then ``on_connection(reader, writer)``, runs in a task of its own, as
``asyncio.start_server`` would run them.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import resource
import socket
import ssl
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from secure_orca.server.http.handshake import GatewaySSLProtocol, HandshakePool, HandshakeStats, ReadBuffer
from secure_orca.server.http.pending import HandshakeLimits, PendingHandshakes

log = logging.getLogger("secure_orca.server")
DEFER_STEP = 0.002  # seconds between two looks at the siblings while leaving them a connection
MAX_DEFER = 0.02  # then the connection is accepted here whatever the siblings hold
BUSY_SIBLINGS = 1.0  # after a connection the siblings left waiting that long, accept without deferring for this
ACCEPT_BATCH = 100  # connections accepted per wake (asyncio's default backlog, which it accepts per turn)
_ACCEPT_ERROR_PAUSE = 0.1  # after another accept error: the queue keeps the connection meanwhile
_SHORT_OF_DESCRIPTORS = {errno.EMFILE, errno.ENFILE}
_LOG_EVERY = 10.0  # seconds between two warnings about accept errors

OnConnection = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class Balance(Protocol):
    """Where a worker publishes the connections it holds and learns whether a sibling should take the next."""

    def publish(self, held: int) -> None: ...

    def siblings(self) -> Sequence[int]:
        """Connections held by each live sibling."""
        ...


class _Solo:
    """A process serving alone: no sibling to leave a connection to."""

    def publish(self, held: int) -> None:
        pass

    def siblings(self) -> Sequence[int]:
        return ()


SOLO: Balance = _Solo()


def defer(held: int, siblings: Sequence[int]) -> bool:
    """Leave the next connection to a sibling: one is live and holds fewer than this worker."""
    return bool(siblings) and held > min(siblings)


class Connections:
    """This loop's connections from accept to close: the TLS handshake (``handshake.GatewaySSLProtocol`` on
    asyncio's loop, ``ssl=context`` on another), the pending caps, and ``on_connection`` once it completes."""

    def __init__(
        self,
        context: ssl.SSLContext,
        limits: HandshakeLimits,
        stats: HandshakeStats,
        on_connection: OnConnection,
        balance: Balance = SOLO,
    ) -> None:
        self.loop = asyncio.get_running_loop()
        self.context = context
        self.limits = limits
        self.stats = stats
        self.on_connection = on_connection
        self.balance = balance
        self.held = 0
        # asyncio's own loop (uvloop's SSLProtocol is Cython, its transports differ): see handshake's docstring
        self.ours = isinstance(self.loop, asyncio.SelectorEventLoop)
        self.pending: PendingHandshakes[GatewaySSLProtocol] = PendingHandshakes(
            limits.effective_total(_descriptor_limit()), limits.max_pending_per_address
        )
        stats.pending = self.pending.__len__
        self.pool = HandshakePool(self.loop, limits.threads if self.ours else 0)
        self.buffer = ReadBuffer() if self.ours else None
        self._reserve: int | None = os.open(os.devnull, os.O_RDONLY)
        self._errors = 0
        self._logged_at = -_LOG_EVERY

    def close(self) -> None:
        self.pool.close()
        if self._reserve is not None:
            os.close(self._reserve)
            self._reserve = None

    def start(self, conn: socket.socket, address: object) -> None:
        conn.setblocking(False)
        self.held += 1
        self.balance.publish(self.held)
        host = address[0] if isinstance(address, tuple) else ""
        task = self.loop.create_task(self._connection(conn, str(host)))
        task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[None]) -> None:
        self.held -= 1
        self.balance.publish(self.held)

    async def _connection(self, conn: socket.socket, host: str) -> None:
        """The handshake, then ``on_connection``; returns when the connection has ended. A failed handshake ends
        it quietly, as ``asyncio.start_server`` does."""
        loop = self.loop
        finished = loop.create_future()

        async def connected(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                await self.on_connection(reader, writer)
            except asyncio.CancelledError:
                # Ended at shutdown: it returns rather than ends cancelled, since asyncio 3.11's
                # StreamReaderProtocol calls exception() on this task, which raises on a cancelled one (a traceback).
                pass
            finally:
                if not finished.done():
                    finished.set_result(None)

        reader = asyncio.StreamReader()
        app = asyncio.StreamReaderProtocol(reader, connected)
        if not self.ours:
            try:
                await loop.connect_accepted_socket(
                    lambda: app, conn, ssl=self.context, ssl_handshake_timeout=self.limits.handshake_timeout
                )
            except Exception:  # the handshake failed or timed out, the peer went away: quietly
                conn.close()
                return
            await finished
            return
        assert self.buffer is not None
        waiter: asyncio.Future[None] = loop.create_future()
        protocol = GatewaySSLProtocol(
            loop,
            app,
            self.context,
            waiter,
            self.buffer,
            self.pool,
            self.limits.handshake_timeout,
            self.limits.hello_timeout,
            self.stats,
            self.pending.release,
        )
        for given_up, cap in self.pending.admit(host, protocol):
            given_up.give_up(cap.value)
        try:
            transport, _ = await loop.connect_accepted_socket(lambda: protocol, conn)
        except Exception:
            self.pending.release(protocol)
            conn.close()
            return
        try:
            await waiter
        except Exception:  # the handshake failed, timed out or was given up: its transport is closed
            transport.abort()
            return
        except asyncio.CancelledError:
            transport.abort()
            raise
        await finished

    async def short_of_descriptors(self, sock: socket.socket) -> None:
        """EMFILE or ENFILE on accept: give up the newest pending handshake (its descriptor is free once the loop
        has turned), else refuse the next queued connection with the reserve descriptor."""
        youngest = self.pending.youngest()
        if youngest is not None:
            youngest.give_up("descriptors")
            await asyncio.sleep(0)
            return
        if self._reserve is None:
            await asyncio.sleep(_ACCEPT_ERROR_PAUSE)
            return
        os.close(self._reserve)
        self._reserve = None
        try:
            conn, _ = sock.accept()
            conn.close()
            self.stats.given_up["refused_descriptors"] += 1
        except OSError:
            await asyncio.sleep(_ACCEPT_ERROR_PAUSE)
        finally:
            try:
                self._reserve = os.open(os.devnull, os.O_RDONLY)
            except OSError:
                self._reserve = None

    def accept_error(self, error: OSError) -> None:
        """Warn about accept errors at most once per ``_LOG_EVERY`` seconds, with how many there were."""
        self._errors += 1
        now = self.loop.time()
        if now - self._logged_at >= _LOG_EVERY:
            log.warning(
                "cannot accept a connection: %s (%d such errors since the last warning)",
                error.strerror or type(error).__name__,
                self._errors,
            )
            self._errors = 0
            self._logged_at = now


def _descriptor_limit() -> int:
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


async def accept_in_turn(sock: socket.socket, connections: Connections) -> None:
    """Accept from ``sock`` until cancelled."""
    loop = asyncio.get_running_loop()
    balance = connections.balance
    balance.publish(connections.held)
    eager_until = 0.0  # the siblings looked busy: no deferring until then (the loop's clock)
    while True:
        await _readable(loop, sock)
        waited = 0.0
        while loop.time() >= eager_until and defer(connections.held, balance.siblings()):
            if waited >= MAX_DEFER:
                eager_until = loop.time() + BUSY_SIBLINGS
                break
            await asyncio.sleep(DEFER_STEP)
            waited += DEFER_STEP
        for _ in range(ACCEPT_BATCH):
            try:
                conn, address = sock.accept()
            except (BlockingIOError, InterruptedError):
                break  # none left, or a sibling took it
            except OSError as error:
                connections.accept_error(error)
                if error.errno in _SHORT_OF_DESCRIPTORS:
                    await connections.short_of_descriptors(sock)
                else:  # out of memory and the like: the connection waits in the queue
                    await asyncio.sleep(_ACCEPT_ERROR_PAUSE)
                break
            connections.start(conn, address)
            if loop.time() >= eager_until and defer(connections.held, balance.siblings()):
                break  # the next one is a sibling's to take first


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
