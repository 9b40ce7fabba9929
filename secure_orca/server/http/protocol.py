"""hypercorn's HTTP/2 and HTTP/1.1 protocols, as the gateway serves them (one subclass each).

``GatewayH2Protocol`` hands h2's events to hypercorn's one dispatch (``H2Protocol._handle_events``) through one
pipeline, in this order:

1. **malformed**: a malformed request is a stream error (RST_STREAM PROTOCOL_ERROR), never the connection's.
   h2 validates inbound headers inside ``receive_data`` and raises a connection error, and hypercorn 0.18
   raises on a non-ASCII ``:method`` or ``:path`` or a missing ``:path``: either ended every stream of the
   connection. h2's validation is off for this connection (``connection.GatewayH2Connection``) and runs here per
   header block instead (``malformed``, h2's own functions), before hypercorn sees the block; a stream refused
   this way is never created, and its later frames are late frames. PRIORITY signals are ignored, as RFC 9113
   section 5.3.2 allows (they are deprecated): hypercorn 0.18 put every stream a PRIORITY frame named into its
   priority tree, which raised TooManyStreamsError, with a traceback and the connection's end, at the 1,001st
   idle stream. Streams are then scheduled with equal weights.
2. **late DATA**: a request body that arrives after its response (a client POSTs, the application answers
   without reading the body, as kube-apiserver does for a 401) would end the whole connection: hypercorn 0.18
   looks the frame's stream up in ``streams``, raises KeyError, and the connection ends with every stream on it
   (pgjones/hypercorn issue 329; PRs 312 and 334 skip the frame without returning its bytes to the
   flow-control window, PR 365 also acknowledges them; none is released). Its bytes are acknowledged (the
   connection's window is not lost) and the stream is reset with NO_ERROR if the client's side is still open
   (RFC 9113 section 8.1, as Go's server does), so nothing else on the connection notices. Trailers and
   END_STREAM after a response, and resets, hypercorn already ignores.
3. **BodyFlow**: DATA for a live stream goes to ``flow.BodyFlow``, which never waits.
4. ``super()``: hypercorn's dispatch, for everything else, in the order received; events before a DATA frame
   are handed over first, since they may create its stream.

After the connection's real GOAWAY (``serve.GatewayTCPServer``), streams above ``last_stream_id`` are refused
with REFUSED_STREAM (safe to retry). A stream's end releases what its application left unread (``BodyFlow``).

``GatewayH11Protocol`` serves ``Upgrade: h2c`` and the cleartext HTTP/2 preface as what they are over TLS:
HTTP/1.1 requests (ALPN chose the protocol). hypercorn would answer 101 and switch.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterable
from typing import cast

import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.utilities
import h11
from hypercorn.config import Config
from hypercorn.events import Event
from hypercorn.protocol.h2 import H2Protocol
from hypercorn.protocol.h11 import H11Protocol
from hypercorn.typing import AppWrapper, ConnectionState, TaskGroup, WorkerContext

from secure_orca.server.http.connection import GatewayH2Connection
from secure_orca.server.http.flow import BodyFlow, reset_if_still_sending

Events = list[h2.events.Event]

_TOKEN = frozenset(b"!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")  # RFC 9110 5.6.2
_REQUEST = h2.utilities.HeaderValidationFlags(
    is_client=False, is_trailer=False, is_response_header=False, is_push_promise=False
)
_TRAILERS = _REQUEST._replace(is_trailer=True)


# RFC 9113 section 8.2.1 as h2 4.4's ``_reject_illegal_characters`` reads it: a name is 0x21-0x7e without
# upper case (and a colon only first); a value holds no NUL, LF or CR and neither starts nor ends with SP or HTAB.
_NAME_OCTETS = bytes(c for c in range(0x21, 0x7F) if not 0x41 <= c <= 0x5A)
_EDGE_WHITESPACE = (0x20, 0x09)
# h2's ``validate_headers`` without its first stage, in its order (tests/server/http/test_inbound_validation.py checks
# that ``validate_headers`` is these stages after ``_reject_illegal_characters``)
_STAGES = (
    h2.utilities._reject_empty_header_names,
    h2.utilities._reject_te,
    h2.utilities._reject_connection_header,
    h2.utilities._reject_pseudo_header_fields,
    h2.utilities._check_host_authority_header,
    h2.utilities._check_path_header,
)


def illegal_characters(headers: list[tuple[bytes, bytes]]) -> bool:
    """Whether h2's ``_reject_illegal_characters`` would refuse ``headers``: its verdict, reached by C-level scans
    (``bytes.translate``, ``in``) where h2 runs a Python loop per character. Pure."""
    for name, value in headers:
        if name.translate(None, _NAME_OCTETS) or name.find(b":", 1) != -1:
            return True
        if value and (
            b"\0" in value
            or b"\n" in value
            or b"\r" in value
            or value[0] in _EDGE_WHITESPACE
            or value[-1] in _EDGE_WHITESPACE
        ):
            return True
    return False


def refused_by_h2(headers: list[tuple[bytes, bytes]], trailers: bool = False) -> bool:
    """Whether h2's inbound validation (``validate_headers``) raises ``ProtocolError`` on a received block: its
    character check is ``illegal_characters`` (the same verdict at C speed: h2's loop cost about 6 ms per
    request of the 58 KB flood in issue 26's profile), its other stages are h2's own, run in its order. Every
    stage either raises ``ProtocolError`` or passes the field on, so checking the characters of the whole block
    first reaches h2's verdict (tests/server/http/test_inbound_validation.py compares them). Pure."""
    if illegal_characters(headers):
        return True
    checked: Iterable[tuple[bytes, bytes]] = headers
    for stage in _STAGES:
        checked = stage(checked, _TRAILERS if trailers else _REQUEST)
    try:
        for _ in checked:
            pass
    except h2.exceptions.ProtocolError:
        return True
    return False


def malformed(headers: list[tuple[bytes, bytes]], trailers: bool = False) -> bool:
    """Whether a received header block is malformed (RFC 9113 section 8.1.1): h2's own inbound validation
    (``refused_by_h2``: illegal characters, upper-case or non-token names, connection-specific fields,
    pseudo-header order and set, ``host`` naming another authority than ``:authority``, pseudo-headers in
    trailers), plus what hypercorn cannot turn into a scope: a request without exactly one ``:path`` (a plain
    CONNECT) or a non-ASCII or empty one, and a ``:method`` that is not one token. Pure."""
    if refused_by_h2(headers, trailers):
        return True
    if trailers:
        return False
    paths = [value for name, value in headers if name == b":path"]
    methods = [value for name, value in headers if name == b":method"]
    return (
        len(paths) != 1
        or not paths[0]
        or not paths[0].isascii()
        or len(methods) != 1
        or not methods[0]
        or not set(methods[0]) <= _TOKEN
    )


_CLOSED = h2.connection.ConnectionState.CLOSED


class GatewayH2Protocol(H2Protocol):
    """hypercorn's HTTP/2 protocol with the gateway's inbound pipeline (see the module's docstring). ``config``
    gives streams unbounded application queues (``serve.GatewayConfig.h2``): ``BodyFlow`` bounds them."""

    connection: GatewayH2Connection

    def __init__(
        self,
        app: AppWrapper,
        config: Config,
        context: WorkerContext,
        task_group: TaskGroup,
        connection_state: ConnectionState,
        ssl: bool,
        client: tuple[str, int] | None,
        server: tuple[str, int] | None,
        send: Callable[[Event], Awaitable[None]],
    ) -> None:
        super().__init__(app, config, context, task_group, connection_state, ssl, client, server, send)
        built = self.connection  # hypercorn builds h2's inline; ours takes its settings before the preface
        self.connection = GatewayH2Connection(built.local_settings)
        self.body_flow = BodyFlow(self)
        self.last_stream_id: int | None = None  # set with the real GOAWAY: later streams are refused

    async def handle(self, event: Event) -> None:
        self.body_flow.open_window()  # once, after the server's preface (sent by initiate)
        await super().handle(event)

    async def _handle_events(self, events: Events) -> None:
        kept: Events = []
        for event in events:
            if isinstance(event, h2.events.DataReceived):
                if kept:  # earlier events may create this stream: let hypercorn see them first
                    await super()._handle_events(kept)
                    kept = []
                if event.stream_id not in self.streams:
                    self._late_body(event)
                elif not await self.body_flow.deliver(event):
                    kept.append(event)
            elif isinstance(event, h2.events.PriorityUpdated):
                continue  # ignored: see the module's docstring
            elif isinstance(event, h2.events.RequestReceived) and malformed(event.headers or []):
                self._refuse(cast(int, event.stream_id))
            elif isinstance(event, h2.events.TrailersReceived) and malformed(event.headers or [], trailers=True):
                self._refuse(cast(int, event.stream_id))
                # hypercorn closes its stream as for a client's reset
                reset = h2.events.StreamReset(stream_id=cast(int, event.stream_id), remote_reset=False)
                reset.error_code = h2.errors.ErrorCodes.PROTOCOL_ERROR
                kept.append(reset)
            else:
                kept.append(event)
        try:
            await super()._handle_events(kept)  # also sends what skipped frames queued (hypercorn flushes at the end)
        except h2.exceptions.ProtocolError:
            # At shutdown hypercorn resets each new stream, and the connection may close between two of them (its
            # last stream ended): h2 refuses the reset. Nothing is left to send on a closed connection.
            if not (self.context.terminated.is_set() and self.connection.state_machine.state is _CLOSED):
                raise

    def _late_body(self, data: h2.events.DataReceived) -> None:
        """DATA for a stream whose response hypercorn already completed (it dropped the stream), or that was
        refused: acknowledged, and the client stopped if it is still sending."""
        self.connection.acknowledge_received_data(data.flow_controlled_length, data.stream_id)
        reset_if_still_sending(self.connection, data.stream_id)

    def _refuse(self, stream_id: int, code: h2.errors.ErrorCodes = h2.errors.ErrorCodes.PROTOCOL_ERROR) -> None:
        with contextlib.suppress(h2.exceptions.ProtocolError):  # the client may have reset it already
            self.connection.reset_stream(stream_id, code)

    async def _create_stream(self, request: h2.events.RequestReceived) -> None:
        last = self.last_stream_id
        if last is not None and request.stream_id > last:
            self._refuse(request.stream_id, h2.errors.ErrorCodes.REFUSED_STREAM)
        else:
            await super()._create_stream(request)

    async def _close_stream(self, stream_id: int) -> None:
        self.body_flow.release(stream_id)
        await super()._close_stream(stream_id)  # queues http.disconnect: never waits, the queue is unbounded
        if not self.closed:
            await self._flush()
            return
        # The connection is gone (hypercorn may hold its send lock: no flush). A response still waiting for
        # flow control would wait forever, its task with it (h2spec http2/6.9.1/1): release its buffer.
        buffer = self.stream_buffers.get(stream_id)
        if buffer is not None:
            await buffer.close()


class GatewayH11Protocol(H11Protocol):
    """hypercorn's HTTP/1.1 protocol, never switching to HTTP/2 (see the module's docstring)."""

    async def _check_protocol(self, event: h11.Request) -> None:
        return None
