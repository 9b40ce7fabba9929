"""The server side of TLS below hypercorn: asyncio's own ``SSLProtocol`` (CPython 3.11), one subclass.

Two of asyncio's costs are a client's to choose, before it has said a word:

- memory: ``SSLProtocol.__init__`` allocates a 256 KiB receive buffer (``bytearray(max_size)``, zeroed, so
  resident) and makes the ``SSLObject`` (``SSL_new``) for every accepted connection. Here every connection of a
  loop receives into the loop's one buffer (``ReadBuffer``: asyncio's selector transport calls ``get_buffer``,
  ``recv_into`` and ``buffer_updated`` in one go, and ``buffer_updated`` copies the bytes into the memory BIO at
  once), and the ``SSLObject`` is made only once the first bytes have come. A silent connection holds a socket and
  a few small Python objects;
- time on the loop: every handshake step (``SSL_do_handshake``: the key exchange, both signatures, the chain's
  verification) ran on the worker's one loop, so a burst of new connections delayed every request in flight. With
  a ``HandshakePool`` each step, and ``SSL_new``, runs in one of a few threads (CPython releases the GIL in both,
  ``Modules/_ssl.c``). The loop keeps every socket read and write; while a step is in flight nothing on the loop
  touches the ``SSLObject`` or its BIOs: bytes that arrive meanwhile are held (reading pauses past
  ``HELD_LIMIT``), and the connection's loss waits for the step's end. A connection that timed out or closed while
  its step waited is skipped; the steps waiting are at most the connections pending (``pending``'s caps).

Deadlines: the ClientHello must have come (the server's first flight is written) within ``hello_timeout``; the
whole handshake within ``handshake_timeout`` (asyncio's own timer, as ``ssl_handshake_timeout``).

hypercorn, h2, the ASGI TLS extension and the gate see what they saw with ``ssl=context``: the same transport
(``_SSLProtocolTransport``) and extra info, the same ``StreamReaderProtocol`` on top. asyncio's private members
this class relies on are checked in ``tests/server/http/test_sslproto_contract.py``. uvloop's ``SSLProtocol`` is
Cython and its transports differ: under ``--event-loop uvloop`` none of this is used (``serve`` passes
``ssl=context`` as before; the caps still hold, the deadlines are uvloop's handshake timeout).
"""

from __future__ import annotations

import asyncio
import collections
import queue
import ssl
import threading
from asyncio import sslproto
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

READ_SIZE = sslproto.SSLProtocol.max_size  # asyncio's receive size (256 KiB), kept once the handshake is done
# During the handshake: one TLS record at most per read (TLS 1.2's largest, RFC 5246 6.2.3: 2^14 + 2048 bytes of
# ciphertext, and the 5-byte header), and at most one more held while a step is in flight: then reading pauses.
HANDSHAKE_READ = 2**14 + 2048 + 5
HELD_LIMIT = HANDSHAKE_READ
_AGAIN = (ssl.SSLWantReadError, ssl.SSLSyscallError)  # asyncio's SSLAgainErrors
_WAITING, _STEPPING = 1, 2
_DO_HANDSHAKE, _WRAPPED = sslproto.SSLProtocolState.DO_HANDSHAKE, sslproto.SSLProtocolState.WRAPPED
_FLUSHING, _SHUTDOWN = sslproto.SSLProtocolState.FLUSHING, sslproto.SSLProtocolState.SHUTDOWN


# Why a connection was closed before its handshake completed (the metric's closed set of labels): a cap
# (``pending.Cap``), descriptors running short (the youngest pending given up; with none, a queued connection
# refused), or a deadline.
GIVE_UP_CAUSES = (
    "per_address",
    "total",
    "descriptors",
    "refused_descriptors",
    "client_hello_timeout",
    "handshake_timeout",
)


@dataclass
class HandshakeStats:
    """Counters for /metrics: connections given up before their handshake completed, by cause."""

    given_up: collections.Counter[str] = field(default_factory=collections.Counter)
    pending: Callable[[], int] = lambda: 0


class ReadBuffer:
    """One loop's receive buffer, lent to every connection of the loop for one ``recv_into`` at a time."""

    def __init__(self) -> None:
        self.array = bytearray(READ_SIZE)
        self.view = memoryview(self.array)
        self.handshake_view = self.view[:HANDSHAKE_READ]


class HandshakePool:
    """``threads`` threads running handshake steps in arrival order; connections beyond them wait on the loop,
    where one that has closed meanwhile is skipped. ``threads`` 0: steps run on the loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, threads: int) -> None:
        self.loop = loop
        self.threads = threads
        self.busy = 0
        self.waiting: collections.deque[GatewaySSLProtocol] = collections.deque()
        self._work: queue.SimpleQueue[GatewaySSLProtocol | None] = queue.SimpleQueue()
        self._started: list[threading.Thread] = []

    def submit(self, protocol: GatewaySSLProtocol) -> None:
        if self.busy < self.threads:
            self._start(protocol)
        else:
            self.waiting.append(protocol)

    def _start(self, protocol: GatewaySSLProtocol) -> None:
        self.busy += 1
        protocol._step_state = _STEPPING
        if len(self._started) < self.busy:  # threads start on first need
            thread = threading.Thread(target=self._run, name=f"tls-handshake-{len(self._started)}", daemon=True)
            self._started.append(thread)
            thread.start()
        self._work.put(protocol)

    def _run(self) -> None:
        deliver = self.loop.call_soon_threadsafe
        while (protocol := self._work.get()) is not None:
            outcome = protocol._step()
            try:
                deliver(self._finished, protocol, outcome)
            except RuntimeError:  # the loop has closed: nothing left to deliver to
                return

    def _finished(self, protocol: GatewaySSLProtocol, outcome: BaseException | bool) -> None:
        self.busy -= 1
        while self.waiting and self.busy < self.threads:
            waiting = self.waiting.popleft()
            if waiting._wants_step():
                self._start(waiting)
            else:
                waiting._step_state = 0
        protocol._step_done(outcome)

    def close(self) -> None:
        for _ in self._started:
            self._work.put(None)


# typeshed describes a part of asyncio's private SSLProtocol; the members used are checked by the contract test
_SSLProtocol: Any = sslproto.SSLProtocol


class GatewaySSLProtocol(_SSLProtocol):  # type: ignore[misc]
    """asyncio's server-side ``SSLProtocol`` without a buffer or an ``SSLObject`` of its own before the first
    bytes, with a ClientHello deadline, and with its handshake steps in a ``HandshakePool``."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        app_protocol: asyncio.BaseProtocol,
        context: ssl.SSLContext,
        waiter: asyncio.Future[None] | None,
        buffer: ReadBuffer,
        pool: HandshakePool,
        handshake_timeout: float,
        hello_timeout: float,
        stats: HandshakeStats,
        settled: Callable[[GatewaySSLProtocol], None],
    ) -> None:
        # asyncio's SSLProtocol.__init__ (3.11.7) for server_side=True, call_connection_made=True, less the
        # 256 KiB bytearray (``buffer`` is the loop's) and ``wrap_bio`` (the first step calls it).
        self._ssl_buffer = buffer.array
        self._ssl_buffer_view = buffer.view
        self._handshake_view = buffer.handshake_view
        self._ssl_handshake_timeout = handshake_timeout
        self._ssl_shutdown_timeout = asyncio.constants.SSL_SHUTDOWN_TIMEOUT
        self._server_side = True
        self._server_hostname = None
        self._sslcontext = context
        self._extra = {"sslcontext": context}
        self._write_backlog: collections.deque[Any] = collections.deque()
        self._write_buffer_size = 0
        self._waiter = waiter
        self._loop = loop
        self._set_app_protocol(app_protocol)
        self._app_transport = None
        self._app_transport_created = False
        self._transport = None
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._state = sslproto.SSLProtocolState.UNWRAPPED
        self._conn_lost = 0
        self._app_state = sslproto.AppProtocolState.STATE_INIT
        self._sslobj: ssl.SSLObject | None = None
        self._ssl_writing_paused = False
        self._app_reading_paused = False
        self._ssl_reading_paused = False
        self._incoming_high_water = 0
        self._incoming_low_water = 0
        self._set_read_buffer_limits()
        self._eof_received = False
        self._app_writing_paused = False
        self._outgoing_high_water = 0
        self._outgoing_low_water = 0
        self._set_write_buffer_limits()
        self._get_app_transport()
        # ours
        self._pool = pool
        self._hello_timeout = hello_timeout
        self._hello_handle: asyncio.TimerHandle | None = None
        self._stats = stats
        self._settled: Callable[[GatewaySSLProtocol], None] | None = settled
        self._step_state = 0
        self._held: list[bytes] = []
        self._held_size = 0
        self._held_paused = False
        self._lost: tuple[BaseException | None] | None = None  # connection_lost during a step, delivered after it

    # -- receiving: the loop's buffer; bytes held while a step is in flight

    def get_buffer(self, n: int) -> memoryview:
        if self._state is _DO_HANDSHAKE:
            return self._handshake_view
        return self._ssl_buffer_view

    def buffer_updated(self, nbytes: int) -> None:
        """asyncio's ``buffer_updated`` (the bytes into the BIO, then on by state), unless a step holds the BIO."""
        step = self._step_state
        if step and (step == _STEPPING or self._incoming.pending >= HELD_LIMIT):
            self._held.append(bytes(self._ssl_buffer_view[:nbytes]))
            self._held_size += nbytes
            if self._held_size >= HELD_LIMIT and not self._held_paused and self._transport is not None:
                self._held_paused = True
                self._transport.pause_reading()
            return
        self._incoming.write(self._ssl_buffer_view[:nbytes])
        state = self._state
        if state is _WRAPPED:
            self._do_read()
        elif state is _DO_HANDSHAKE:
            self._do_handshake()
        elif state is _FLUSHING:
            self._do_flush()
        elif state is _SHUTDOWN:
            self._do_shutdown()

    # -- the handshake

    def _start_handshake(self) -> None:
        self._hello_handle = self._loop.call_later(self._hello_timeout, self._check_hello)
        super()._start_handshake()

    def _do_handshake(self) -> None:
        if self._sslobj is None and not self._incoming.pending:
            return  # nothing has come yet: no SSLObject, no work
        if self._pool.threads == 0:
            self._step_done(self._step())  # on the loop
        elif not self._step_state:  # a step waiting will read what came; one in flight is followed by another
            self._step_state = _WAITING
            self._pool.submit(self)

    def _new_ssl_object(self) -> ssl.SSLObject:
        return self._sslcontext.wrap_bio(self._incoming, self._outgoing, server_side=True)

    def _wants_step(self) -> bool:
        transport = self._transport
        return (
            self._state == sslproto.SSLProtocolState.DO_HANDSHAKE
            and transport is not None
            and not transport.is_closing()
        )

    def _step(self) -> BaseException | bool:
        """One handshake step, in a pool thread: True once complete, False when it needs more bytes."""
        try:
            if self._sslobj is None:
                self._sslobj = self._new_ssl_object()
            self._sslobj.do_handshake()
        except _AGAIN:
            return False
        except Exception as error:
            return error
        return True

    def _step_done(self, outcome: BaseException | bool) -> None:
        """Back on the loop (or still on it, without a pool): the held bytes into the BIO, then what asyncio's
        ``_do_handshake`` does with the outcome."""
        self._step_state = 0
        for chunk in self._held:
            self._incoming.write(chunk)
        self._held.clear()
        self._held_size = 0
        if self._held_paused:
            self._held_paused = False
            if self._transport is not None:
                self._transport.resume_reading()
        if self._lost is not None:
            (error,) = self._lost
            self._lost = None
            super().connection_lost(error)
            return
        if self._state != sslproto.SSLProtocolState.DO_HANDSHAKE:
            return  # timed out, given up or reset meanwhile
        if outcome is True:
            self._on_handshake_complete(None)
        elif outcome is False:
            if self._hello_handle is not None and self._outgoing.pending:
                self._hello_handle.cancel()  # the server's first flight: the ClientHello has come
                self._hello_handle = None
            self._process_outgoing()
            if self._incoming.pending:
                self._do_handshake()
        else:
            self._on_handshake_complete(outcome)

    def resume_writing(self) -> None:
        if self._step_state == _STEPPING:
            self._ssl_writing_paused = False  # the step writes the BIO; its end sends what it wrote
            return
        super().resume_writing()

    def _check_hello(self) -> None:
        self._hello_handle = None
        if self._state == sslproto.SSLProtocolState.DO_HANDSHAKE:
            self._stats.given_up["client_hello_timeout"] += 1
            self._fatal_error(ConnectionAbortedError(f"no ClientHello within {self._hello_timeout:g}s"))

    def _check_handshake_timeout(self) -> None:
        if self._state == sslproto.SSLProtocolState.DO_HANDSHAKE:
            self._stats.given_up["handshake_timeout"] += 1
        super()._check_handshake_timeout()

    def _on_handshake_complete(self, handshake_exc: BaseException | None) -> None:
        self._settle()
        super()._on_handshake_complete(handshake_exc)

    def give_up(self, cause: str) -> None:
        """Close a connection whose handshake has not completed (a cap, or descriptors running short)."""
        self._stats.given_up[cause] += 1
        self._settle()
        if self._transport is not None:
            self._fatal_error(ConnectionAbortedError(f"handshake given up: {cause}"))

    def _settle(self) -> None:
        if self._hello_handle is not None:
            self._hello_handle.cancel()
            self._hello_handle = None
        settled, self._settled = self._settled, None
        if settled is not None:
            settled(self)

    def connection_lost(self, exc: BaseException | None) -> None:
        self._settle()
        if self._step_state == _STEPPING:
            self._lost = (exc,)  # the step still uses the BIOs that asyncio's connection_lost reads
            return
        super().connection_lost(exc)
