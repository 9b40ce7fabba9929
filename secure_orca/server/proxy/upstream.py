"""The proxy's upstream client: HTTP/1.1 on h11 over asyncio streams, one small pool per route.

httpx did the same with far more machinery per request (its request and response models, httpcore's pool, which
scans every connection for every connection on each request, anyio's wrappers): benchmarks/proxy_cost.py. This
client does what the proxy needs and no more: one request at a time per connection, kept alive when both sides
finished cleanly, closed otherwise (a cancelled or timed-out exchange closes its connection, which is how a
backend learns that its client left); no redirects followed, no cookies, no decompression. A connection taken
from the idle list that fails before any response byte is retried once on a fresh one when the body can be sent
again (a backend may close an idle connection as we reuse it). Timeouts are the proxy's; connecting has its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from urllib.parse import urlsplit

import h11

Headers = list[tuple[bytes, bytes]]
READ_SIZE = 65536


class UpstreamError(Exception):
    """The backend could not be reached, or broke the exchange; ``kind`` says which (unavailable, broken)."""

    def __init__(self, kind: str, detail: str, answered: bool = False) -> None:
        super().__init__(detail)
        self.kind = kind
        self.answered = answered  # the backend answered (never retried: it may have acted on the request)


@dataclass(frozen=True)
class Origin:
    scheme: str
    host: str
    port: int

    @classmethod
    def of(cls, url: str) -> Origin:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        return cls(parts.scheme, parts.hostname or "", port)

    @property
    def authority(self) -> bytes:
        default = 443 if self.scheme == "https" else 80
        host = f"[{self.host}]" if ":" in self.host else self.host
        return (host if self.port == default else f"{host}:{self.port}").encode()


class _Connection:
    __slots__ = ("conn", "reader", "received", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.conn = h11.Connection(h11.CLIENT)
        self.received = False  # any byte of this exchange's response yet

    def usable(self) -> bool:
        return not self.writer.is_closing() and not self.reader.at_eof() and self.conn.our_state is h11.IDLE

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()

    async def send(self, event: h11.Event) -> None:
        data = self.conn.send(event)
        if data:
            self.writer.write(data)
            await self.writer.drain()

    async def next_event(self) -> object:
        """The next h11 event (never NEED_DATA: it reads until there is one)."""
        while True:
            event = self.conn.next_event()
            if event is not h11.NEED_DATA:
                return event
            data = await self.reader.read(READ_SIZE)
            self.received = self.received or bool(data)
            self.conn.receive_data(data)  # b"": end of stream, which h11 turns into an event or an error


class Response:
    """A response whose body is read as it comes (``chunks``); ``aclose`` returns the connection to its pool
    when the exchange ended cleanly, and closes it otherwise."""

    def __init__(self, pool: UpstreamPool, connection: _Connection, status: int, headers: Headers) -> None:
        self.pool = pool
        self.connection: _Connection | None = connection
        self.status = status
        self.headers = headers
        self.complete = False

    async def chunks(self) -> AsyncIterator[bytes]:
        connection = self.connection
        assert connection is not None
        while True:
            try:
                event = await connection.next_event()
            except (h11.RemoteProtocolError, OSError) as error:
                raise UpstreamError("broken", type(error).__name__) from None
            if isinstance(event, h11.Data):
                yield bytes(event.data)
            elif isinstance(event, h11.EndOfMessage):
                self.complete = True
                return
            elif isinstance(event, h11.ConnectionClosed):
                raise UpstreamError("broken", "the backend closed the connection mid-response")

    async def aclose(self) -> None:
        connection, self.connection = self.connection, None
        if connection is not None:
            self.pool.release(connection, reusable=self.complete)


class UpstreamPool:
    """Connections to one origin: at most ``max_connections`` at once (a request waits for one to free), at
    most ``max_idle`` kept open between requests."""

    def __init__(
        self, url: str, tls: ssl.SSLContext | None, max_connections: int, max_idle: int, connect_timeout: float
    ) -> None:
        self.origin = Origin.of(url)
        self.tls = tls if self.origin.scheme == "https" else None
        self.max_connections = max_connections
        self.max_idle = max_idle
        self.connect_timeout = connect_timeout
        self.idle: list[_Connection] = []
        self.open = 0
        self.waiters: list[asyncio.Future[None]] = []

    async def _acquire(self) -> tuple[_Connection, bool]:
        """A connection and whether it was reused."""
        while self.idle:
            connection = self.idle.pop()
            if connection.usable():
                return connection, True
            connection.close()
            self.open -= 1
        while self.open >= self.max_connections:
            waiter = asyncio.get_running_loop().create_future()
            self.waiters.append(waiter)
            try:
                await waiter
            finally:
                if waiter in self.waiters:
                    self.waiters.remove(waiter)
            if self.idle:
                return await self._acquire()
        self.open += 1
        try:
            async with asyncio.timeout(self.connect_timeout):
                reader, writer = await asyncio.open_connection(
                    self.origin.host,
                    self.origin.port,
                    ssl=self.tls,
                    server_hostname=self.origin.host if self.tls else None,
                    limit=READ_SIZE * 4,
                )
        except BaseException as error:
            self._freed()
            if isinstance(error, (OSError, TimeoutError, ssl.SSLError)):
                raise UpstreamError("unavailable", type(error).__name__) from None
            raise
        return _Connection(reader, writer), False

    def _freed(self) -> None:
        self.open -= 1
        self._wake()

    def _wake(self) -> None:
        for waiter in self.waiters:
            if not waiter.done():
                waiter.set_result(None)
                return

    def release(self, connection: _Connection, reusable: bool) -> None:
        if reusable and connection.conn.our_state is h11.DONE and connection.conn.their_state is h11.DONE:
            with contextlib.suppress(h11.LocalProtocolError):
                connection.conn.start_next_cycle()
                connection.received = False
                if len(self.idle) < self.max_idle and connection.usable():
                    self.idle.append(connection)
                    self._wake()
                    return
        connection.close()
        self._freed()

    async def request(
        self, method: bytes, target: bytes, headers: Headers, body: bytes | AsyncIterator[bytes] | None
    ) -> Response:
        """Send the request and read the response's head; UpstreamError when the backend cannot be reached or
        breaks the exchange before its head."""
        replayable = not isinstance(body, AsyncIterator)
        for attempt in (1, 2):
            connection, reused = await self._acquire()
            try:
                return await self._exchange(connection, method, target, headers, body)
            except UpstreamError as error:
                connection.close()
                self._freed()
                if not (reused and replayable and attempt == 1) or error.answered:
                    raise
            except BaseException:
                connection.close()
                self._freed()
                raise
        raise AssertionError("unreachable")

    async def _exchange(
        self,
        connection: _Connection,
        method: bytes,
        target: bytes,
        headers: Headers,
        body: bytes | AsyncIterator[bytes] | None,
    ) -> Response:
        names = {name.lower() for name, _ in headers}
        framing: Headers = []
        if isinstance(body, bytes) and b"content-length" not in names:
            framing.append((b"content-length", str(len(body)).encode()))
        elif isinstance(body, AsyncIterator) and b"content-length" not in names:
            framing.append((b"transfer-encoding", b"chunked"))
        try:
            request = h11.Request(
                method=method, target=target, headers=[(b"host", self.origin.authority), *headers, *framing]
            )
            await connection.send(request)
            if isinstance(body, bytes):
                await connection.send(h11.Data(data=body))
            elif body is not None:
                async for part in body:
                    if part:
                        await connection.send(h11.Data(data=part))
            await connection.send(h11.EndOfMessage())
            while True:
                event = await connection.next_event()
                if isinstance(event, h11.InformationalResponse):
                    if event.status_code == 101:
                        raise UpstreamError("broken", "the backend switched protocols unasked", answered=True)
                    continue  # 100 Continue, 103 Early Hints: not relayed
                break
        except (h11.ProtocolError, OSError) as error:
            raise UpstreamError("broken", type(error).__name__, answered=connection.received) from None
        if not isinstance(event, h11.Response):
            raise UpstreamError("broken", "the backend closed the connection before its response", connection.received)
        return Response(self, connection, event.status_code, list(event.headers.raw_items()))

    async def aclose(self) -> None:
        for connection in self.idle:
            connection.close()
        self.idle.clear()
