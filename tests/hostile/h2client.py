"""A small HTTP/2 client on the h2 library over real TLS, for tests that must send frames in orders ordinary
clients do not: a body after the response, trailers after the response, a reset in the middle of a body."""

from __future__ import annotations

import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings

from secure_orca.lab import replicas as launch


@dataclass
class Stream:
    status: int | None = None
    body: bytes = b""
    ended: bool = False
    reset: int | None = None


@dataclass
class H2Client:
    """One connection; ``pump`` reads frames until a condition holds or the connection ends."""

    sock: ssl.SSLSocket
    conn: h2.connection.H2Connection
    streams: dict[int, Stream] = field(default_factory=dict)
    closed: bool = False  # the server ended the connection (GOAWAY, EOF or a TLS error)

    @classmethod
    def connect(
        cls, replica: launch.Replica, ca: Path, cert: tuple[Path, Path] | None = None, window: int | None = None
    ) -> H2Client:
        """``window``: the stream flow-control window announced (SETTINGS_INITIAL_WINDOW_SIZE; 0: the server can
        send no DATA on any stream)."""
        context = ssl.create_default_context(cafile=str(ca))
        context.set_alpn_protocols(["h2"])
        if cert is not None:
            context.load_cert_chain(*cert)
        raw = socket.create_connection((replica.host, replica.port), timeout=10)
        sock = context.wrap_socket(raw, server_hostname="localhost")
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        if window is not None:
            conn.local_settings = h2.settings.Settings(
                client=True, initial_values={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: window}
            )
        conn.initiate_connection()
        client = cls(sock, conn)
        client.flush()
        return client

    def flush(self) -> None:
        data = self.conn.data_to_send()
        if data and not self.closed:
            try:
                self.sock.sendall(data)
            except OSError:
                self.closed = True

    def start(self, method: str, path: str, headers: list[tuple[str, str]] | None = None, end: bool = False) -> int:
        stream = self.conn.get_next_available_stream_id()
        base = [(":method", method), (":path", path), (":scheme", "https"), (":authority", "localhost")]
        self.conn.send_headers(stream, base + (headers or []), end_stream=end)
        self.streams[stream] = Stream()
        self.flush()
        return stream

    def data(self, stream: int, body: bytes, end: bool = True) -> None:
        """Send body bytes; a stream the server has reset meanwhile gets nothing more, as with real clients."""
        try:
            self.conn.send_data(stream, body, end_stream=end)
        except h2.exceptions.StreamClosedError:
            return
        self.flush()

    def trailers(self, stream: int, headers: list[tuple[str, str]]) -> None:
        self.conn.send_headers(stream, headers, end_stream=True)
        self.flush()

    def reset(self, stream: int) -> None:
        self.conn.reset_stream(stream, h2.errors.ErrorCodes.CANCEL)
        self.flush()

    def pump_until_ended(self, *streams: int) -> bool:
        """Read until every stream in ``streams`` ended or was reset; False if the connection ended first."""
        return self.pump_until(lambda: all(self.streams[s].ended or self.streams[s].reset is not None for s in streams))

    def pump_until(self, condition: Callable[[], bool]) -> bool:
        """Read until ``condition`` holds; False if the connection ended first."""
        while not condition():
            if self.closed or not self._read():
                return False
        return True

    def _read(self) -> bool:
        try:
            data = self.sock.recv(65536)
        except (OSError, ssl.SSLError):
            data = b""
        if not data:
            self.closed = True
            return False
        try:
            events = self.conn.receive_data(data)
        except h2.exceptions.ProtocolError:
            self.closed = True
            return False
        for event in events:
            if isinstance(event, h2.events.ResponseReceived):
                headers = cast(list[tuple[str, str]], event.headers)  # str: the connection decodes them as utf-8
                self.streams[event.stream_id].status = int(dict(headers)[":status"])
            elif isinstance(event, h2.events.DataReceived):
                self.streams[event.stream_id].body += event.data
                self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2.events.StreamEnded):
                self.streams[event.stream_id].ended = True
            elif isinstance(event, h2.events.StreamReset):
                if event.stream_id in self.streams:
                    self.streams[event.stream_id].reset = event.error_code
            elif isinstance(event, h2.events.ConnectionTerminated):
                self.closed = True
        self.flush()
        return not self.closed

    def close(self) -> None:
        self.sock.close()
