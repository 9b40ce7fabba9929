"""The serve loop: our accept path, hypercorn's per-connection ``TCPServer`` as one subclass, the graceful
close of a rotating connection, and the end of connections still open at shutdown.

We own the accept path (``accept``: caps, deadlines and the handshake's own ``SSLProtocol``, ``handshake``; no
process-wide patching) and construct ``GatewayTCPServer`` per accepted connection, after the TLS handshake, with
the stream writer. It reads the peer's certificate chain once (``tls.tls_extension``), wraps the application so
that every request of the connection carries ``scope["extensions"]["tls"]`` (``ConnectionApp``), and serves the
connection with the gateway's protocol for the ALPN the handshake chose (``protocol.GatewayH2Protocol``,
``protocol.GatewayH11Protocol``). Any hypercorn other than 0.18.0 refuses to start: the package relies on the
internals ``tests/server/http/test_hypercorn_contract.py`` names and checks.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import importlib.metadata
import logging
import random
import socket
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, cast

import h2.connection
from h2.stream import StreamState
from hypercorn.app_wrappers import ASGIWrapper
from hypercorn.asyncio.task_group import TaskGroup
from hypercorn.asyncio.tcp_server import TCPServer
from hypercorn.asyncio.worker_context import WorkerContext
from hypercorn.config import Config
from hypercorn.events import Closed, Event, RawData
from hypercorn.typing import (
    AppWrapper,
    ASGIFramework,
    ASGIReceiveCallable,
    ASGISendCallable,
    ASGISendEvent,
    ConnectionState,
    Scope,
)
from hypercorn.utils import parse_socket_addr
from hyperframe.frame import GoAwayFrame

from secure_orca.authz.memo import ConnectionMemo
from secure_orca.errors import SecureOrcaError
from secure_orca.server.http.accept import SOLO, Balance, Connections, accept_in_turn
from secure_orca.server.http.control import STREAM_CONTROL_KEY, StreamControl
from secure_orca.server.http.flow import BodyFlow
from secure_orca.server.http.handshake import HandshakeStats
from secure_orca.server.http.pending import HandshakeLimits
from secure_orca.server.http.protocol import GatewayH2Protocol, GatewayH11Protocol
from secure_orca.server.http.rotation import (
    DRAIN_LIMIT,
    GOAWAY_GRACE,
    MAX_STREAM_ID,
    ROTATION_KEY,
    GracefulClose,
    Phase,
    Rotation,
    Step,
)
from secure_orca.server.http.tls import tls_extension
from secure_orca.server.listener import listen, raise_descriptor_limit
from secure_orca.server.trust import CONNECTION_KEY

log = logging.getLogger("secure_orca.server")
HYPERCORN_VERSION = "0.18.0"


class ConnectionApp:
    """hypercorn's app wrapper for one connection: adds the TLS extension to every request scope, and rotates
    the connection gracefully after ``max_requests`` requests or, per HTTP/2 request, with ``goaway_chance``
    (kube-apiserver's --goaway-chance), so that a load balancer can rebalance long-lived connections."""

    def __init__(self, inner: AppWrapper, tls: dict[str, Any] | None, server: GatewayTCPServer) -> None:
        self.inner = inner
        self.tls = tls
        self.server = server
        self.requests = 0
        self.memo = ConnectionMemo()
        self.rotation = Rotation()
        self.control = StreamControl(server._h2)

    async def __call__(
        self,
        scope: Scope,
        receive: ASGIReceiveCallable,
        send: ASGISendCallable,
        sync_spawn: Callable[..., Any],
        call_soon: Callable[..., Any],
    ) -> None:
        if scope["type"] != "http":
            return await self.inner(scope, receive, send, sync_spawn, call_soon)
        extensions: dict[str, Any] = {**(scope.get("extensions") or {}), CONNECTION_KEY: self.memo}
        extensions[ROTATION_KEY] = self.rotation
        extensions[STREAM_CONTROL_KEY] = self.control
        if self.tls is not None:
            extensions["tls"] = self.tls
        scope["extensions"] = extensions
        flow = self.server.body_flow
        if flow is not None:
            receive = flow.receiving(scope, receive)
        self.requests += 1
        limit = self.server.rotate_after_requests
        rotate = 0 < limit <= self.requests  # 0: never (the default, as kube-apiserver)
        if scope.get("http_version") == "2":
            chance = self.server.goaway_chance
            if rotate or (chance and random.random() < chance):
                await self.server.graceful_goaway()
                self.rotation.start()
        elif rotate:
            send = _closing(send)
        return await self.inner(scope, receive, send, sync_spawn, call_soon)


def _closing(send: ASGISendCallable) -> ASGISendCallable:
    """An HTTP/1.1 response that closes the connection after it is sent."""

    async def wrapped(message: ASGISendEvent) -> None:
        if message["type"] == "http.response.start":
            message = {
                "type": "http.response.start",
                "status": message["status"],
                "headers": [*message.get("headers", ()), (b"connection", b"close")],
                "trailers": message.get("trailers", False),
            }
        await send(message)

    return wrapped


class GatewayTCPServer(TCPServer):
    """hypercorn's per-connection TCPServer, reading the peer certificate once per connection (after the
    handshake), serving the gateway's protocols, and closing an HTTP/2 connection gracefully as the
    ``GracefulClose`` table says: a GOAWAY notice, one grace period for streams already on their way, a GOAWAY
    with the real last stream id (later streams are refused with REFUSED_STREAM, safe to retry), every accepted
    stream answered in full, and a final GOAWAY once the last frame is on the wire."""

    # Not hypercorn's ProtocolWrapper: the protocol itself (it only forwarded, and switched HTTP/1.1 to HTTP/2).
    protocol: GatewayH2Protocol | GatewayH11Protocol  # type: ignore[assignment]

    def __init__(
        self,
        app: AppWrapper,
        loop: asyncio.AbstractEventLoop,
        config: GatewayConfig,
        context: WorkerContext,
        state: dict[str, Any],
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        self.rotate_after_requests = config.rotate_after_requests
        self.goaway_chance = config.goaway_chance
        self.h2_config = config.h2
        try:
            tls = tls_extension(writer.get_extra_info("ssl_object"))
        except Exception as error:  # never fail a connection here: it just gets no identity
            log.warning("cannot read the client certificate (%s); treating it as absent", type(error).__name__)
            tls = {"client_cert_chain": [], "client_cert_error": type(error).__name__}
        super().__init__(ConnectionApp(app, tls, self), loop, config, context, state, reader, writer)
        self.body_flow: BodyFlow | None = None
        self.goaway_last_stream: int | None = None
        self.close_state = GracefulClose()
        self._goaway: asyncio.Task[None] | None = None

    async def run(self) -> None:
        """hypercorn's ``TCPServer.run`` (0.18.0), with the gateway's protocol for the ALPN the handshake chose
        where hypercorn builds its ``ProtocolWrapper`` (which would build hypercorn's own). A connection lost
        before it runs (the client vanished, or shutdown ended it, after the handshake) has no socket any more:
        it is closed with nothing served, where hypercorn's would raise AttributeError."""
        try:
            socket = self.writer.get_extra_info("socket")
            if socket is None:
                return
            client = parse_socket_addr(socket.family, socket.getpeername())
            server = parse_socket_addr(socket.family, socket.getsockname())
            ssl_object = self.writer.get_extra_info("ssl_object")
            alpn = ssl_object.selected_alpn_protocol() if ssl_object is not None else None
            async with TaskGroup(self.loop) as task_group:
                self._task_group = task_group
                h2 = alpn == "h2"
                parts = (
                    self.app,
                    self.h2_config if h2 else self.config,  # HTTP/2: unbounded stream queues, BodyFlow bounds them
                    self.context,
                    task_group,
                    ConnectionState(self.state),
                    ssl_object is not None,
                    client,
                    server,
                    self.protocol_send,
                )
                if h2:
                    self.protocol = GatewayH2Protocol(*parts)
                    self.body_flow = self.protocol.body_flow
                else:
                    self.protocol = GatewayH11Protocol(*parts)
                await self.protocol.initiate()
                await self.idle_task.restart(task_group, self._idle_timeout)
                await self._read_data()
        except OSError:
            pass
        finally:
            await self._close()

    def answering(self) -> bool:
        """Whether a request of this connection is being answered: HTTP/2, a stream whose request has arrived
        whole (half-closed by the client) and whose response has not ended; HTTP/1.1, as before (hypercorn
        closes an idle one itself at shutdown); False before a protocol runs."""
        protocol = getattr(self, "protocol", None)
        if not isinstance(protocol, GatewayH2Protocol):
            return protocol is not None
        streams = protocol.connection.streams.values()
        return any(s.state_machine.state is StreamState.HALF_CLOSED_REMOTE for s in streams)

    def _h2(self) -> GatewayH2Protocol | None:
        """The connection's HTTP/2 protocol, or None (HTTP/1.1, or not started yet)."""
        protocol = getattr(self, "protocol", None)  # set by run once the connection starts
        return protocol if isinstance(protocol, GatewayH2Protocol) else None

    async def protocol_send(self, event: Event) -> None:
        """hypercorn's, but a connection ended under its streams (aborted at shutdown: ``end_connections``) is
        closed for them rather than written to: asyncio's SSL transport raises AttributeError after an abort."""
        if isinstance(event, RawData) and self.writer.is_closing():
            await self.protocol.handle(Closed())
            return
        await super().protocol_send(event)

    async def _send_raw(self, data: bytes) -> None:
        if self.close_state.phase is Phase.CLOSED or self.writer.is_closing():
            return
        with contextlib.suppress(ConnectionError, RuntimeError):  # the transport closed meanwhile
            await self.protocol_send(RawData(data))

    async def graceful_goaway(self) -> None:
        """Start the graceful close (once per connection); returns after the notice is sent."""
        protocol = self._h2()
        if protocol is None or not self.close_state.advance(Step.ROTATE):
            return
        self._goaway = asyncio.get_running_loop().create_task(self._complete_goaway(protocol))
        await self._send_raw(GoAwayFrame(0, last_stream_id=MAX_STREAM_ID, error_code=0).serialize())

    async def _complete_goaway(self, protocol: GatewayH2Protocol) -> None:
        connection = protocol.connection
        await asyncio.sleep(GOAWAY_GRACE)
        if not self.close_state.advance(Step.GRACE_ELAPSED):
            return
        last = connection.highest_inbound_stream_id
        self.goaway_last_stream = protocol.last_stream_id = last  # later streams are refused from here on
        await self._send_raw(GoAwayFrame(0, last_stream_id=last, error_code=0).serialize())
        # Close only once every stream's last frame is on the wire (h2 counts it closed): sooner would cut
        # responses still being sent. Then the client closes, or hypercorn's idle timeout does.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + DRAIN_LIMIT
        while connection.open_inbound_streams and loop.time() < deadline:
            await asyncio.sleep(0.02)
        if connection.state_machine.state == h2.connection.ConnectionState.CLOSED or self.writer.is_closing():
            self.close_state.advance(Step.PEER_CLOSED)  # the client closed first, as it should
            return
        connection.close_connection(last_stream_id=last)
        await self._send_raw(connection.data_to_send())
        self.close_state.advance(Step.DRAINED)

    async def _read_data(self) -> None:
        """hypercorn's reader, then the end of the idle timer: once the client has gone, hypercorn 0.18 still
        waits for its keep-alive timeout (5 s) before the connection's task group, and its memory, can end."""
        await super()._read_data()
        await self.idle_task.stop()

    async def _close(self) -> None:
        self.close_state.advance(Step.PEER_CLOSED)
        if self._goaway is not None:
            self._goaway.cancel()
        # asyncio raises this when the peer sends after our close_notify; the connection is over either way.
        with contextlib.suppress(ssl.SSLError):
            await super()._close()


@dataclass
class ServerOptions:
    host: str
    port: int
    context: ssl.SSLContext
    max_requests_per_connection: int = 0  # 0: never rotate
    goaway_chance: float = 0.0
    graceful_timeout: float = 10.0
    access_log: bool = False
    sock: socket.socket | None = None  # a listening socket bound by the supervisor of ``serve --workers``
    balance: Balance | None = None  # with ``sock``: where a worker and its siblings share connection counts
    handshake: HandshakeLimits = field(default_factory=HandshakeLimits)  # below HTTP: deadlines, caps, threads
    handshake_stats: HandshakeStats = field(default_factory=HandshakeStats)
    h2_max_streams: int = 0  # SETTINGS_MAX_CONCURRENT_STREAMS; 0: hypercorn's default


class GatewayConfig(Config):
    """hypercorn Config serving our prepared SSLContext."""

    def __init__(self, context: ssl.SSLContext, rotate_after_requests: int, goaway_chance: float) -> None:
        super().__init__()
        self._context = context
        self.rotate_after_requests = rotate_after_requests
        self.goaway_chance = goaway_chance
        self.keep_alive_max_requests = 2**62  # rotation is ours: graceful, unlike hypercorn's own
        self.certfile = "unused"  # marks TLS as enabled; the context comes from create_ssl_context
        self.keyfile = "unused"

    def create_ssl_context(self) -> ssl.SSLContext:
        return self._context

    @functools.cached_property
    def h2(self) -> Config:
        """This configuration for HTTP/2 connections: unbounded application queues (``BodyFlow`` bounds them
        with flow control). Read once the server is configured, on the first connection."""
        config = copy.copy(self)
        config.max_app_queue_size = 0
        return config


def bind_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class HypercornVersionError(SecureOrcaError):
    """The installed hypercorn is not the one whose internals this package was written against."""


def check_hypercorn() -> None:
    """Refuse to run on any hypercorn but the pinned one: this package relies on its internals."""
    installed = importlib.metadata.version("hypercorn")
    if installed != HYPERCORN_VERSION:
        raise HypercornVersionError(
            f"hypercorn {installed} is installed; secure-orca needs exactly {HYPERCORN_VERSION} "
            f"(pip install hypercorn=={HYPERCORN_VERSION})"
        )


async def end_connections(pending: dict[asyncio.Task[Any], tuple[asyncio.StreamReader, asyncio.StreamWriter]]) -> None:
    """End connections still open after the graceful period. Cancelling their tasks is not enough: hypercorn
    0.18's ``TCPServer._close`` swallows CancelledError while waiting for the TLS close, which a silent client
    never completes, and the streams' tasks stay blocked. The transport is aborted and the reader ended instead
    (a transport already closing may never report its loss): every stream gets ``http.disconnect`` and its
    buffers are released (``BodyFlow``), and the tasks finish by themselves; a task still running a second
    later is cancelled."""
    for reader, writer in pending.values():
        writer.transport.abort()
        reader.feed_eof()
    if not pending:
        return
    _, stuck = await asyncio.wait(set(pending), timeout=1.0)
    for task in stuck:
        task.cancel()
    if stuck:
        await asyncio.wait(stuck, timeout=1.0)


async def serve(
    app: Callable[..., Awaitable[None]],
    options: ServerOptions,
    shutdown_trigger: Callable[[], Awaitable[Any]],
) -> None:
    """Serve ``app`` until ``shutdown_trigger`` returns, then let open connections finish for up to
    ``options.graceful_timeout`` seconds. We own the accept path (``accept``) and construct our
    TCPServer per connection; nothing in hypercorn is replaced process-wide."""
    check_hypercorn()
    raise_descriptor_limit()  # each process serving: alone, or every worker of ``serve --workers``
    config = GatewayConfig(options.context, options.max_requests_per_connection, options.goaway_chance)
    config.alpn_protocols = ["h2", "http/1.1"]
    config.graceful_timeout = options.graceful_timeout
    config.accesslog = logging.getLogger("secure_orca.access") if options.access_log else None
    config.errorlog = logging.getLogger("hypercorn.error")
    if options.h2_max_streams:
        config.h2_max_concurrent_streams = options.h2_max_streams
    loop = asyncio.get_running_loop()
    wrapped = ASGIWrapper(cast(ASGIFramework, app))  # our apps use the generic ASGI mapping types
    context = WorkerContext(None)
    state: dict[str, Any] = {}
    connections: dict[asyncio.Task[Any], tuple[asyncio.StreamReader, asyncio.StreamWriter]] = {}
    servers: dict[asyncio.Task[Any], GatewayTCPServer] = {}

    async def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        server = GatewayTCPServer(wrapped, loop, config, context, state, reader, writer)
        if task is not None:
            connections[task], servers[task] = (reader, writer), server
            task.add_done_callback(lambda done: (connections.pop(done, None), servers.pop(done, None)))
        await server

    # A worker accepts in turn with its siblings from the supervisor's socket; a process alone, from its own.
    sock = options.sock or listen(options.host, options.port)
    connections_in = Connections(
        options.context, options.handshake, options.handshake_stats, on_connection, options.balance or SOLO
    )
    accepting = loop.create_task(accept_in_turn(sock, connections_in))
    stop_accepting = _stopper(accepting, sock, connections_in)
    if options.sock is None:  # a supervisor announces its shared socket itself, once
        port = sock.getsockname()[1]
        log.info("Running on https://%s (CTRL + C to quit)", bind_address(options.host, port))
    try:
        await shutdown_trigger()
    finally:
        await context.terminated.set()  # idle connections close at once
        await stop_accepting()
        await drain(connections, lambda task: task in servers and servers[task].answering(), options.graceful_timeout)


async def drain(
    connections: dict[asyncio.Task[Any], tuple[asyncio.StreamReader, asyncio.StreamWriter]],
    answering: Callable[[asyncio.Task[Any]], bool],
    timeout: float,
) -> None:
    """At shutdown: connections answering a request get up to ``timeout`` to finish; every other one is ended
    at once (a client that sent nothing, or only part of a request, e.g. a body it never sends, holds no
    request the server is answering: h2spec's sessions left such connections, and the whole grace period was
    waited). Ends when the last answered request does."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    ended = 0
    while connections and loop.time() < deadline:
        idle = {task: ends for task, ends in connections.items() if not answering(task)}
        if idle:
            ended += len(idle)
            await end_connections(idle)
        if connections:
            await asyncio.wait(set(connections), timeout=min(0.05, max(0.0, deadline - loop.time())))
    if ended:
        log.info("at shutdown, %d connections held no request being answered; ended them", ended)
    await end_connections(dict(connections))


def _stopper(
    accepting: asyncio.Task[None], sock: socket.socket, connections: Connections
) -> Callable[[], Awaitable[None]]:
    async def stop() -> None:
        accepting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await accepting
        sock.close()  # this worker's descriptor; its siblings keep theirs
        connections.close()

    return stop
