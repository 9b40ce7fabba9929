"""What an application may do to its own HTTP/2 stream beyond ASGI (the out-of-band service, server/oob.py, uses
it): ask how many response bytes the server still holds unsent for it (flow control keeps them), and reset it
(RST_STREAM CANCEL) at once, without waiting for those bytes.

One per connection, in every request's ``scope["extensions"][STREAM_CONTROL_KEY]``; a stream is named by its scope
(hypercorn's ``HTTPStream.scope`` is the very dict the application receives), so nothing is allocated per request.
For an HTTP/1.1 request, or a stream already gone, ``unsent`` is None and ``reset`` False.

hypercorn 0.18 names used: ``H2Protocol.streams``, ``stream_buffers`` (``StreamBuffer.buffer``, ``_is_empty``,
``close``), ``priority``, ``has_data``, ``_flush``. A ``StreamBuffer`` holds a stream's body until flow control lets
it out; when ``unsent`` is 0, a trailers send returns without waiting.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import h2.errors
import h2.exceptions

from secure_orca.server.http.protocol import GatewayH2Protocol

STREAM_CONTROL_KEY = "secure_orca.stream_control"  # scope["extensions"] key of the connection's StreamControl


class StreamControl:
    """See the module's docstring. ``protocol``: the connection's HTTP/2 protocol, or None (HTTP/1.1, or not
    started yet)."""

    def __init__(self, protocol: Callable[[], GatewayH2Protocol | None]) -> None:
        self.protocol = protocol

    def _find(self, scope: object) -> tuple[GatewayH2Protocol, int] | None:
        protocol = self.protocol()
        if protocol is None:
            return None
        extensions = scope.get("extensions") if isinstance(scope, dict) else None
        for stream_id, stream in protocol.streams.items():
            own = getattr(stream, "scope", None)
            # the very scope, or a middleware's copy of it (serve's ConnectionApp gives each request its own
            # extensions dict, which copies share)
            if own is scope or (
                extensions is not None and isinstance(own, dict) and own.get("extensions") is extensions
            ):
                return protocol, stream_id
        return None

    async def unsent(self, scope: object) -> int | None:
        """Response body bytes of the stream still held by the server (not yet handed to h2), or None. An empty
        buffer is marked drained: hypercorn 0.18 marks it only when its sender empties it, so trailers after a
        response without body bytes would wait for ever (``StreamBuffer._is_empty``)."""
        found = self._find(scope)
        if found is None:
            return None
        protocol, stream_id = found
        buffer = protocol.stream_buffers.get(stream_id)
        if buffer is None:
            return 0
        if not buffer.buffer and not buffer._is_empty.is_set():
            await buffer._is_empty.set()
        return len(buffer.buffer)

    async def reset(self, scope: object) -> bool:
        """Reset the stream now (RST_STREAM CANCEL: gRPC's PROTOCOL-HTTP2.md maps it to CANCELLED, for a server
        that must end a call whose payload cannot be completed); its unsent bytes are dropped, and a send of the
        application waiting for flow control returns. False if the stream is not found."""
        found = self._find(scope)
        if found is None:
            return False
        protocol, stream_id = found
        with contextlib.suppress(h2.exceptions.ProtocolError):  # the client may have reset it meanwhile
            protocol.connection.reset_stream(stream_id, h2.errors.ErrorCodes.CANCEL)
        buffer = protocol.stream_buffers.get(stream_id)
        if buffer is not None:
            await buffer.close()
            # hypercorn's sender visits the stream, finds it closed in h2 and drops its buffer (hypercorn adds and
            # removes a stream's buffer and its priority entry together)
            protocol.priority.unblock(stream_id)
            await protocol.has_data.set()
        await protocol._flush()
        return True
