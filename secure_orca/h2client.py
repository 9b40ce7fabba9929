"""The one client-side HTTP/2 loop: an ``h2`` client connection over a connected socket (TLS or not), every whole
frame sent and received shown to a hook, the bytes counted. The probe, the HPACK measurement, the lab, the
benchmarks and the tests drive HTTP/2 through it; the server side is ``secure_orca.server.http``.

Received bytes go to h2 as they arrive, unless ``admit`` is given: it sees every whole frame received, and only
those it admits go to h2 (a client can read the frames h2's state machine would refuse, as those after a GOAWAY,
or parse every frame itself).
"""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import h2.config
import h2.connection
import h2.events
import h2.settings
from hyperframe.frame import Frame

FRAME_HEADER = 9  # RFC 9113 section 4.1
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"  # the client's connection preface: not a frame
READ_SIZE = 65536


class Transport(Protocol):
    """What the loop needs of a socket (an ``ssl.SSLSocket``, a ``socket.socket`` or a counting wrapper)."""

    def sendall(self, data: bytes, /) -> Any: ...
    def recv(self, size: int, /) -> bytes: ...
    def gettimeout(self) -> float | None: ...
    def settimeout(self, value: float | None, /) -> None: ...


class ReadDeadline(TimeoutError):
    """The deadline of :meth:`H2Loop.read_until` passed before its condition held."""


@dataclass(frozen=True, slots=True)
class WireFrame:
    """One whole frame as it crossed the wire: its 9-byte header and payload."""

    outbound: bool
    raw: bytes

    @property
    def type(self) -> int:
        return self.raw[3]

    @property
    def flags(self) -> int:
        return self.raw[4]

    @property
    def stream_id(self) -> int:
        return int.from_bytes(self.raw[5:FRAME_HEADER], "big") & 0x7FFF_FFFF

    def parse(self) -> Frame:
        """The frame parsed by hyperframe (raises hyperframe's errors on a malformed one)."""
        frame, length = Frame.parse_frame_header(memoryview(self.raw[:FRAME_HEADER]))
        frame.parse_body(memoryview(self.raw[FRAME_HEADER : FRAME_HEADER + length]))
        return frame


def connect(
    host: str, port: int, context: ssl.SSLContext, timeout: float = 10.0, server_hostname: str = "localhost"
) -> ssl.SSLSocket:
    """A TLS connection (ALPN as ``context`` offers it); the TCP socket is closed when the handshake fails."""
    raw = socket.create_connection((host, port), timeout=timeout)
    try:
        return context.wrap_socket(raw, server_hostname=server_hostname)
    except BaseException:
        raw.close()
        raise


def client_connection(**config: Any) -> h2.connection.H2Connection:
    """An h2 client connection, headers as bytes unless ``config`` says otherwise (``H2Configuration``'s keywords)."""
    return h2.connection.H2Connection(
        h2.config.H2Configuration(**{"header_encoding": None, **config, "client_side": True})
    )


class H2Loop:
    """An h2 client connection over ``sock``. ``on_frame`` sees every whole frame sent and received, ``on_event``
    every h2 event; ``closes_on``: exceptions of a read that end the connection (``eof``) rather than propagate."""

    def __init__(
        self,
        sock: Transport,
        conn: h2.connection.H2Connection | None = None,
        *,
        on_frame: Callable[[WireFrame], None] | None = None,
        on_event: Callable[[h2.events.Event], None] | None = None,
        admit: Callable[[WireFrame], bool] | None = None,
        closes_on: tuple[type[BaseException], ...] = (),
    ) -> None:
        self.sock = sock
        self.conn = conn if conn is not None else client_connection()
        self.on_frame, self.on_event, self.admit, self.closes_on = on_frame, on_event, admit, closes_on
        self.bytes_sent = 0
        self.bytes_received = 0
        self.eof = False  # the transport ended: EOF, or an error of ``closes_on``
        self.terminated = False  # h2 saw the peer's GOAWAY (ConnectionTerminated)
        self._inbound = bytearray()  # the start of a frame not yet whole

    @property
    def closed(self) -> bool:
        """The connection ended: the transport did, or the server sent GOAWAY."""
        return self.eof or self.terminated

    def open(self, settings: dict[h2.settings.SettingCodes, int] | None = None) -> H2Loop:
        """Send the preface and SETTINGS (``settings`` in the first SETTINGS frame, as SettingCodes: values)."""
        if settings:
            self.conn.local_settings = h2.settings.Settings(client=True, initial_values=settings)
        self.conn.initiate_connection()
        self.flush()
        return self

    # --- sending ---------------------------------------------------------------------------------------------

    def flush(self) -> None:
        """Send what h2 has queued (nothing once the transport ended)."""
        data = self.conn.data_to_send()
        if data and not self.eof:
            self._send(data, frames=True)

    def send_raw(self, data: bytes) -> None:
        """Send ``data`` exactly as given, past h2 (counted in ``bytes_sent``; not shown to ``on_frame``)."""
        self._send(data, frames=False)

    def request(self, headers: Sequence[Any], body: bytes | None = None, end: bool = True) -> int:
        """Open the next stream with ``headers`` (and ``body``); ``end``: end the stream with the last of them."""
        stream_id = self.conn.get_next_available_stream_id()
        self.conn.send_headers(stream_id, headers, end_stream=end and body is None)
        if body is not None:
            self.conn.send_data(stream_id, body, end_stream=end)
        self.flush()
        return stream_id

    def _send(self, data: bytes, frames: bool) -> None:
        if frames and self.on_frame is not None:
            start = len(PREFACE) if data.startswith(PREFACE) else 0
            for raw in _split(data[start:]):
                self.on_frame(WireFrame(True, raw))
        self.sock.sendall(data)
        self.bytes_sent += len(data)

    # --- receiving -------------------------------------------------------------------------------------------

    def read(self, deadline: float | None = None) -> list[h2.events.Event]:
        """One read off the socket: its frames shown, its events dispatched and returned, h2's answers sent.
        ``deadline`` (monotonic): :class:`ReadDeadline` when nothing arrives before it."""
        data = self._recv(deadline)
        if not data:
            self.eof = True
            return []
        self.bytes_received += len(data)
        try:
            events = self._receive(data)
        except self.closes_on:
            self.eof = True
            return []
        for event in events:
            self.terminated |= isinstance(event, h2.events.ConnectionTerminated)
            if self.on_event is not None:
                self.on_event(event)
        self.flush()
        return events

    def read_until(self, done: Callable[[], bool], timeout: float | None = None) -> bool:
        """Read until ``done()`` holds (True) or the connection ends first (False); :class:`ReadDeadline` when
        ``timeout`` seconds pass first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not done():
            if self.closed:
                return False
            self.read(deadline)
        return True

    def _recv(self, deadline: float | None) -> bytes:
        before = self.sock.gettimeout()
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ReadDeadline(self._late())
            self.sock.settimeout(left if before is None else min(left, before))
        try:
            return self.sock.recv(READ_SIZE)
        except TimeoutError as error:
            if deadline is not None and time.monotonic() >= deadline:
                raise ReadDeadline(self._late()) from None
            if isinstance(error, self.closes_on):
                return b""
            raise
        except self.closes_on:
            return b""
        finally:
            if deadline is not None:
                self.sock.settimeout(before)

    def _late(self) -> str:
        return f"HTTP/2 read deadline passed before the condition held ({self.bytes_received} bytes received)"

    def _receive(self, data: bytes) -> list[h2.events.Event]:
        if self.on_frame is None and self.admit is None:
            return self.conn.receive_data(data)
        self._inbound += data
        whole = 0
        admitted = bytearray()
        for raw in _split(bytes(self._inbound)):
            whole += len(raw)
            frame = WireFrame(False, raw)
            if self.on_frame is not None:
                self.on_frame(frame)
            if self.admit is not None and self.admit(frame):
                admitted += raw
        del self._inbound[:whole]
        if self.admit is None:
            return self.conn.receive_data(data)
        return self.conn.receive_data(bytes(admitted)) if admitted else []


def _split(data: bytes) -> list[bytes]:
    """The whole frames at the start of ``data``."""
    frames, at = [], 0
    while len(data) - at >= FRAME_HEADER:
        end = at + FRAME_HEADER + int.from_bytes(data[at : at + 3], "big")
        if end > len(data):
            break
        frames.append(bytes(data[at:end]))
        at = end
    return frames
