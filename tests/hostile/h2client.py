"""A small HTTP/2 client on the h2 library over real TLS, for tests that must send frames in orders ordinary
clients do not: a body after the response, trailers after the response, a reset in the middle of a body."""

from __future__ import annotations

import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import h2.errors
import h2.events
import h2.exceptions
import h2.settings

from secure_orca.h2client import H2Loop, client_connection, connect
from secure_orca.lab import replicas as launch


@dataclass
class Stream:
    status: int | None = None
    body: bytes = b""
    ended: bool = False
    reset: int | None = None
    fields: dict[str, str] = field(default_factory=dict)  # the response's headers, then its trailers


class H2Client(H2Loop):
    """One connection (``secure_orca.h2client.H2Loop``), its responses kept per stream; ``pump_until`` reads
    until a condition holds or the connection ends (GOAWAY, EOF, a TLS or protocol error: ``closed``)."""

    def __init__(self, sock: ssl.SSLSocket) -> None:
        conn = client_connection(header_encoding="utf-8")
        super().__init__(sock, conn, on_event=self._event, closes_on=(OSError, h2.exceptions.ProtocolError))
        self.streams: dict[int, Stream] = {}
        self.tls = sock
        self.reads_past_goaway = False  # a GOAWAY ends no stream it allowed: a client may read on

    @property
    def closed(self) -> bool:
        """The server ended the connection (GOAWAY, unless reading past it; EOF; a TLS or protocol error)."""
        return self.eof or (self.terminated and not self.reads_past_goaway)

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
        client = cls(connect(replica.host, replica.port, context))
        client.open(None if window is None else {h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: window})
        return client

    def flush(self) -> None:
        if not self.closed:
            try:
                super().flush()
            except OSError:
                self.eof = True

    def start(self, method: str, path: str, headers: list[tuple[str, str]] | None = None, end: bool = False) -> int:
        base = [(":method", method), (":path", path), (":scheme", "https"), (":authority", "localhost")]
        stream = self.request(base + (headers or []), end=end)
        self.streams[stream] = Stream()
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
        """Read until ``condition`` holds; False if the connection ended first (or in the read that made it hold)."""
        while not condition():
            if self.closed:
                return False
            self.read()
            if self.closed:
                return False
        return True

    def _event(self, event: h2.events.Event) -> None:
        if isinstance(event, h2.events.ResponseReceived):
            headers = cast(list[tuple[str, str]], event.headers)  # str: the connection decodes them as utf-8
            self.streams[event.stream_id].status = int(dict(headers)[":status"])
            self.streams[event.stream_id].fields.update(headers)
        elif isinstance(event, h2.events.TrailersReceived):
            self.streams[event.stream_id].fields.update(cast(list[tuple[str, str]], event.headers))
        elif isinstance(event, h2.events.DataReceived):
            self.streams[event.stream_id].body += event.data
            self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        elif isinstance(event, h2.events.StreamEnded):
            self.streams[event.stream_id].ended = True
        elif isinstance(event, h2.events.StreamReset) and event.stream_id in self.streams:
            self.streams[event.stream_id].reset = event.error_code

    def close(self) -> None:
        self.tls.close()
