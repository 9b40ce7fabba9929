"""The request bodies of one HTTP/2 connection, handed to their streams without ever waiting.

hypercorn 0.18 puts each DATA frame on its stream's application queue (10 items) inline in the connection's
reader, and acknowledges it at once: a request whose body is never read (an application answering without
reading it) stopped the reader, so every stream of the connection, and its task then waited forever to queue
``http.disconnect``, keeping the request in ``in_flight_requests``. Here HTTP/2 streams get unbounded queues
(``serve.GatewayConfig.h2``) and flow control bounds them instead: a DATA frame is acknowledged (WINDOW_UPDATE)
only when the application takes it; when the stream ends, whatever it left unread is acknowledged at once, and
the stream is reset with NO_ERROR if the client is still sending (RFC 9113 section 8.1, as Go's server does).
The connection's window is raised to CONNECTION_RECEIVE_WINDOW so that one stream holding its window unread
does not stall the other streams' bodies.
"""

from __future__ import annotations

import contextlib
from collections import deque

import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.stream
from hypercorn.protocol.events import Body
from hypercorn.protocol.h2 import H2Protocol
from hypercorn.protocol.http_stream import HTTPStream
from hypercorn.typing import ASGIReceiveCallable, ASGIReceiveEvent, Scope

CONNECTION_RECEIVE_WINDOW = 2**20  # request-body bytes one HTTP/2 connection may hold unread (Go's net/http2
# server default, MaxUploadBufferPerConnection); one stream holds at most its own window (65,535 bytes)


def reset_if_still_sending(connection: h2.connection.H2Connection, stream_id: int) -> None:
    """Stop a client still sending a body after its complete response: RST_STREAM NO_ERROR (RFC 9113 section
    8.1, as Go's server does). Nothing for a stream the client already ended or reset."""
    stream = connection.streams.get(stream_id)
    if stream is not None and stream.state_machine.state is h2.stream.StreamState.HALF_CLOSED_LOCAL:
        with contextlib.suppress(h2.exceptions.ProtocolError):
            connection.reset_stream(stream_id, h2.errors.ErrorCodes.NO_ERROR)


class BodyFlow:
    """The request bodies of one HTTP/2 connection (see the module's docstring). A request is known by its
    ASGI scope, the one object the stream (``HTTPStream.scope``) and its application share."""

    def __init__(self, protocol: H2Protocol) -> None:
        self.protocol = protocol
        self.owed: dict[int, tuple[int, deque[int]]] = {}  # id(scope) -> stream, unread frame lengths
        self.scopes: dict[int, int] = {}  # stream -> id(scope), while the stream is open
        self.window_opened = False

    def open_window(self) -> None:
        """Once, after the server's preface: the connection window (not the streams') becomes 1 MiB."""
        if self.window_opened:
            return
        self.window_opened = True
        increment = CONNECTION_RECEIVE_WINDOW - self.protocol.connection.inbound_flow_control_window
        if increment > 0:
            with contextlib.suppress(h2.exceptions.ProtocolError):
                self.protocol.connection.increment_flow_control_window(increment)

    async def deliver(self, event: h2.events.DataReceived) -> bool:
        """Queue one DATA frame's bytes for its stream's application, unacknowledged; False (hypercorn's own
        handling) for a stream that has no application to take them: a WebSocket, or one already refused."""
        stream_id = event.stream_id
        stream = self.protocol.streams.get(stream_id)
        if not isinstance(stream, HTTPStream) or stream.closed:
            return False
        key = self.scopes.setdefault(stream_id, id(stream.scope))
        self.owed.setdefault(key, (stream_id, deque()))[1].append(event.flow_controlled_length)
        await stream.handle(Body(stream_id=stream_id, data=event.data or b""))
        return True

    def receiving(self, scope: Scope, receive: ASGIReceiveCallable) -> ASGIReceiveCallable:
        """``receive`` of the request ``scope``, acknowledging each body frame as the application takes it."""
        key = id(scope)  # the application holds its scope for as long as it may call receive

        async def taking() -> ASGIReceiveEvent:
            message = await receive()
            if message.get("more_body"):
                owed = self.owed.get(key)
                if owed and owed[1]:
                    self._acknowledge(owed[0], owed[1].popleft())
                    await self.protocol._flush()
            return message

        return taking

    def release(self, stream_id: int) -> None:
        """The stream ended: hand back what its application left unread, and stop a client still sending."""
        key = self.scopes.pop(stream_id, None)
        owed = self.owed.pop(key, None) if key is not None else None
        if owed and sum(owed[1]):
            self._acknowledge(stream_id, sum(owed[1]))
        reset_if_still_sending(self.protocol.connection, stream_id)

    def _acknowledge(self, stream_id: int, length: int) -> None:
        with contextlib.suppress(h2.exceptions.ProtocolError):
            self.protocol.connection.acknowledge_received_data(length, stream_id)
