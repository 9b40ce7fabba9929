"""HTTP/2 and HTTP/1.1 over TLS on hypercorn, with the ASGI TLS extension hypercorn lacks.

The integration is one subclass: hypercorn's asyncio ``TCPServer`` is constructed once per accepted
connection, after the TLS handshake, with the stream writer. Our subclass reads the peer's certificate chain
there and wraps the application so every request of that connection carries
``scope["extensions"]["tls"]``. We own the accept path (no process-wide patching), the graceful close is an
explicit state machine (``TRANSITIONS``), and any hypercorn other than 0.18.0 refuses to start.

Request bodies that arrive after their response (a client POSTs, the application answers without reading
the body, as kube-apiserver does for a 401) would end the whole HTTP/2 connection: hypercorn 0.18's
``H2Protocol._handle_events`` raises KeyError for DATA on a stream it already dropped (pgjones/hypercorn
issue 329; PRs 312 and 334 skip the frame without returning its bytes to the flow-control window, PR 365
also acknowledges them; none is released). ``guard_early_responses`` wraps that method per connection: it
acknowledges the bytes and resets the stream with NO_ERROR (RFC 9113 section 8.1, as Go's server does), so
nothing else on the connection notices. The fix is here, not in the application, because any application
(and our own 401) may answer before reading, and the other streams of the connection are the adapter's care.

hypercorn 0.18.0 names this module relies on (any other version refuses to start): ``TCPServer``
(``__init__(app, loop, config, context, state, reader, writer)``, ``run`` assigning ``self.protocol``,
``protocol_send``, ``_close``, ``writer``), ``ProtocolWrapper`` (``protocol``, ``handle``), ``H2Protocol``
(``connection``, ``streams``, ``_handle_events``, ``_create_stream``), ``Config`` (``create_ssl_context``,
``keep_alive_max_requests``, ``graceful_timeout``), ``WorkerContext`` (``terminated``), ``ASGIWrapper``,
``RawData``, ``Event``; and from h2 4.x ``H2Connection`` (``acknowledge_received_data``, ``reset_stream``,
``streams``, ``open_inbound_streams``, ``highest_inbound_stream_id``) and ``StreamState``.

The handshake follows kube-apiserver where Python's ssl allows: a client certificate is requested (with the
union of --client-ca-file and --requestheader-client-ca-file as trust anchors) but not required, and its
validity period is not checked in the handshake (the front-proxy check does that per request). Unlike Go,
OpenSSL cannot be told to accept a certificate from an unknown CA or one whose ExtKeyUsage excludes
clientAuth: such handshakes fail, which refuses the report all the same. The key exchange is Go's
(``tls_policy``: X25519, P-256, P-384, P-521, ECDHE suites only), so no client can choose a costly handshake.
"""

from __future__ import annotations

import _ssl
import asyncio
import contextlib
import copy
import functools
import importlib.metadata
import logging
import random
import ssl
import warnings
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any, cast

import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.stream
import h2.utilities
import h11
import hpack
from cryptography import x509
from hypercorn.app_wrappers import ASGIWrapper
from hypercorn.asyncio.tcp_server import TCPServer
from hypercorn.asyncio.worker_context import WorkerContext
from hypercorn.config import Config
from hypercorn.events import Event, RawData
from hypercorn.protocol import ProtocolWrapper
from hypercorn.protocol.events import Body
from hypercorn.protocol.h2 import H2Protocol
from hypercorn.protocol.h11 import H11Protocol
from hypercorn.protocol.http_stream import HTTPStream
from hypercorn.typing import (
    AppWrapper,
    ASGIFramework,
    ASGIReceiveCallable,
    ASGIReceiveEvent,
    ASGISendCallable,
    ASGISendEvent,
    Scope,
)
from hyperframe.frame import GoAwayFrame

from secure_orca.authz.memo import ConnectionMemo
from secure_orca.credentials.kinds import KeyPair
from secure_orca.errors import SecureOrcaError
from secure_orca.server import tls_policy
from secure_orca.server.h2_headers import REPORT_FIELD_NAME, IndexedEncoder, passes_unchanged, remember
from secure_orca.server.trust import CONNECTION_KEY

log = logging.getLogger("secure_orca.server")
HYPERCORN_VERSION = "0.18.0"
# OpenSSL's X509_V_FLAG_NO_CHECK_TIME: leave validity to the per-request front-proxy check, as Go does.
_NO_CHECK_TIME = 0x200000
_ENCODING_DER = _ssl.ENCODING_DER
MAX_STREAM_ID = 2**31 - 1
GOAWAY_GRACE = 1.0  # seconds between the GOAWAY notice and the real one: well over a round trip, as Go's server
DRAIN_LIMIT = 60.0  # seconds accepted streams may take to finish after the real GOAWAY
_TLS_VERSIONS = {"TLSv1.2": 0x0303, "TLSv1.3": 0x0304}


def peer_chain_der(ssl_object: ssl.SSLObject) -> list[bytes]:
    """The chain the client presented, leaf first. Python 3.11 exposes only the leaf publicly; the
    private ``get_unverified_chain`` (public from 3.13) adds the intermediates where present."""
    leaf = ssl_object.getpeercert(binary_form=True)
    if not leaf:
        return []
    inner = getattr(ssl_object, "_sslobj", None)
    getter = getattr(ssl_object, "get_unverified_chain", None) or getattr(inner, "get_unverified_chain", None)
    if getter is not None:
        chain = getter() or []
        ders = [c if isinstance(c, bytes) else c.public_bytes(_ENCODING_DER) for c in chain]
        if ders and ders[0] == leaf:
            return ders
    return [leaf]


def subject_name(leaf: bytes) -> str | None:
    """The leaf's subject as RFC 4514 text, or None where cryptography cannot read the certificate: the chain
    is passed on all the same, for the front-proxy verifier reads certificates as Go does, not as cryptography."""
    with warnings.catch_warnings():  # a client's odd certificate must not write warnings to our log
        warnings.simplefilter("ignore")
        try:
            return x509.load_der_x509_certificate(leaf).subject.rfc4514_string()
        except (ValueError, x509.InvalidVersion):
            return None


def tls_extension(ssl_object: ssl.SSLObject | None) -> dict[str, Any] | None:
    """The ASGI TLS extension (asgiref specs/tls.rst v0.2) for one connection."""
    if ssl_object is None:
        return None
    chain = peer_chain_der(ssl_object)
    pems = [ssl.DER_cert_to_PEM_cert(der) for der in chain]
    cipher = ssl_object.cipher()
    return {
        "server_cert": None,
        "client_cert_chain": pems,
        "client_cert_name": subject_name(chain[0]) if chain else None,
        "client_cert_error": None,
        "tls_version": _TLS_VERSIONS.get(ssl_object.version() or ""),
        "cipher_suite": None,
        "cipher_name": cipher[0] if cipher else None,  # not in the spec: hypercorn cannot give the IANA id
    }


ROTATION_KEY = "secure_orca.rotation"  # scope["extensions"] key of the connection's Rotation
STREAM_CONTROL_KEY = "secure_orca.stream_control"  # scope["extensions"] key of the connection's StreamControl


class Rotation:
    """Tells a connection's long-lived streams (out-of-band load reports) that it rotates (GOAWAY): they end
    with a status instead of holding the drain until it cuts them. ``started`` for a stream opened after."""

    def __init__(self) -> None:
        self.started = False
        self.listeners: set[Callable[[], None]] = set()

    def start(self) -> None:
        self.started = True
        for listener in list(self.listeners):
            listener()


class StreamControl:
    """What an application may do to its own HTTP/2 stream beyond ASGI (the out-of-band service, server/oob.py,
    uses it): ask how many response bytes the server still holds unsent for it (flow control keeps them), and
    reset it (RST_STREAM CANCEL) at once, without waiting for those bytes. One per connection, in every request's
    ``scope["extensions"][STREAM_CONTROL_KEY]``; a stream is named by its scope (hypercorn's ``HTTPStream.scope``
    is the very dict the application receives), so nothing is allocated per request. For an HTTP/1.1 request, or
    a stream already gone, ``unsent`` is None and ``reset`` False.

    hypercorn 0.18 names used: ``H2Protocol.streams``, ``stream_buffers`` (``StreamBuffer.buffer``, ``close``),
    ``priority``, ``has_data``, ``_flush``. A ``StreamBuffer`` holds a stream's body until flow control lets it
    out; when ``unsent`` is 0, a trailers send returns without waiting."""

    def __init__(self, server: TLSAwareTCPServer) -> None:
        self.server = server

    def _find(self, scope: object) -> tuple[H2Protocol, int] | None:
        protocol = self.server._h2()
        if protocol is None:
            return None
        for stream_id, stream in protocol.streams.items():
            if getattr(stream, "scope", None) is scope:
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


class ConnectionApp:
    """Hypercorn's app wrapper for one connection: adds the TLS extension to every request scope, and rotates
    the connection gracefully after ``max_requests`` requests or, per HTTP/2 request, with ``goaway_chance``
    (kube-apiserver's --goaway-chance), so that a load balancer can rebalance long-lived connections."""

    def __init__(self, inner: AppWrapper, tls: dict[str, Any] | None, server: TLSAwareTCPServer) -> None:
        self.inner = inner
        self.tls = tls
        self.server = server
        self.requests = 0
        self.memo = ConnectionMemo()
        self.rotation = Rotation()
        self.control = StreamControl(server)

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
            receive = flow.receiving(receive)
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


Events = list[h2.events.Event]


def _late_body(protocol: H2Protocol, event: h2.events.Event) -> bool:
    """A DATA frame for a stream whose response hypercorn already completed (it dropped the stream)."""
    return isinstance(event, h2.events.DataReceived) and event.stream_id not in protocol.streams


def guard_early_responses(protocol: H2Protocol, flow: BodyFlow | None = None) -> None:
    """Make one connection survive request bodies that arrive after their response (hypercorn issue 329,
    unmerged PRs 312, 334, 365): hypercorn 0.18's ``H2Protocol._handle_events`` looks such a DATA frame's
    stream up in ``streams``, raises KeyError, and the whole connection ends with every stream on it.

    Events are handed to hypercorn in order; a late DATA frame is taken out: its bytes are acknowledged (so the
    connection's flow-control window is not lost), and the stream is reset with NO_ERROR if the client's side
    is still open, which RFC 9113 section 8.1 allows after a complete response and Go's server does, so the
    client stops sending. Trailers and END_STREAM after a response, and resets, hypercorn already ignores. DATA
    for a live stream goes to ``flow`` (``BodyFlow``), which never waits."""
    if protocol.__dict__.get("_early_response_guard"):
        return
    handle_events = protocol._handle_events
    connection = protocol.connection

    async def guarded(events: Events) -> None:
        pending: Events = []
        for event in events:
            if not isinstance(event, h2.events.DataReceived):
                pending.append(event)
                continue
            if pending:  # earlier events may create this stream: let hypercorn see them first
                await handle_events(pending)
                pending = []
            data = cast(h2.events.DataReceived, event)
            if not _late_body(protocol, event):
                if flow is None or not await flow.deliver(data):
                    pending.append(event)
                continue
            connection.acknowledge_received_data(data.flow_controlled_length, data.stream_id)
            stream = connection.streams.get(data.stream_id)
            if stream is not None and stream.state_machine.state is h2.stream.StreamState.HALF_CLOSED_LOCAL:
                with contextlib.suppress(h2.exceptions.ProtocolError):
                    connection.reset_stream(data.stream_id, h2.errors.ErrorCodes.NO_ERROR)
        await handle_events(pending)  # also sends what the skipped frames queued (hypercorn flushes at the end)

    protocol.__dict__["_early_response_guard"] = True
    protocol.__dict__["_handle_events"] = guarded  # this connection's instance only, not the class


CONNECTION_RECEIVE_WINDOW = 2**20  # request-body bytes one HTTP/2 connection may hold unread (Go's net/http2
# server default, MaxUploadBufferPerConnection); one stream holds at most its own window (65,535 bytes)


class BodyFlow:
    """The request bodies of one HTTP/2 connection, handed to their streams without ever waiting.

    hypercorn 0.18 puts each DATA frame on its stream's application queue (10 items) inline in the connection's
    reader, and acknowledges it at once: a request whose body is never read (an application answering without
    reading it) stopped the reader, so every stream of the connection, and its task then waited forever to
    queue ``http.disconnect``, keeping the request in ``in_flight_requests``. Here HTTP/2 streams get unbounded
    queues (``_Config.h2``) and flow control bounds them instead: a DATA frame is acknowledged (WINDOW_UPDATE)
    only when the application takes it; when the stream ends, whatever it left unread is acknowledged at once,
    and the stream is reset with NO_ERROR if the client is still sending (RFC 9113 section 8.1, as Go's server
    does). The connection's window is raised to CONNECTION_RECEIVE_WINDOW so that one stream holding its window
    unread does not stall the other streams' bodies."""

    def __init__(self, protocol: H2Protocol) -> None:
        self.protocol = protocol
        self.owed: dict[asyncio.Queue[Any], tuple[int, deque[int]]] = {}  # queue -> stream, unread frame lengths
        self.queues: dict[int, asyncio.Queue[Any]] = {}
        self.window_opened = False
        close_stream = protocol._close_stream

        async def closing(stream_id: int) -> None:
            self.release(stream_id)
            await close_stream(stream_id)  # queues http.disconnect: never waits, the queue is unbounded
            if not protocol.closed:
                await protocol._flush()
                return
            # The connection is gone (hypercorn may hold its send lock: no flush). A response still waiting for
            # flow control would wait forever, its task with it (h2spec http2/6.9.1/1): release its buffer.
            buffer = protocol.stream_buffers.get(stream_id)
            if buffer is not None:
                await buffer.close()

        protocol.__dict__["_close_stream"] = closing  # this connection's protocol only

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
        handling) for a stream without an unbounded application queue: a WebSocket, or one already refused."""
        stream = self.protocol.streams.get(event.stream_id)
        queue = getattr(getattr(stream, "app_put", None), "__self__", None)
        if not isinstance(stream, HTTPStream) or stream.closed or not isinstance(queue, asyncio.Queue):
            return False
        if queue.maxsize != 0:
            return False
        self.queues[event.stream_id] = queue
        self.owed.setdefault(queue, (event.stream_id, deque()))[1].append(event.flow_controlled_length)
        await stream.handle(Body(stream_id=event.stream_id, data=event.data or b""))
        return True

    def receiving(self, receive: ASGIReceiveCallable) -> ASGIReceiveCallable:
        """``receive`` of one request, acknowledging each body frame as the application takes it."""
        queue = getattr(receive, "__self__", None)

        async def taking() -> ASGIReceiveEvent:
            message = await receive()
            if message.get("more_body"):
                owed = self.owed.get(queue) if queue is not None else None
                if owed and owed[1]:
                    self._acknowledge(owed[0], owed[1].popleft())
                    await self.protocol._flush()
            return message

        return taking

    def release(self, stream_id: int) -> None:
        """The stream ended: hand back what its application left unread, and stop a client still sending."""
        queue = self.queues.pop(stream_id, None)
        owed = self.owed.pop(queue, None) if queue is not None else None
        if owed and sum(owed[1]):
            self._acknowledge(stream_id, sum(owed[1]))
        connection = self.protocol.connection
        stream = connection.streams.get(stream_id)
        if stream is not None and stream.state_machine.state is h2.stream.StreamState.HALF_CLOSED_LOCAL:
            with contextlib.suppress(h2.exceptions.ProtocolError):
                connection.reset_stream(stream_id, h2.errors.ErrorCodes.NO_ERROR)

    def _acknowledge(self, stream_id: int, length: int) -> None:
        with contextlib.suppress(h2.exceptions.ProtocolError):
            self.protocol.connection.acknowledge_received_data(length, stream_id)


class Phase(Enum):
    """Where a connection is in its graceful close (RFC 9113 section 6.8)."""

    OPEN = "open"
    NOTICE_SENT = "notice-sent"  # GOAWAY with last stream id 2^31-1: no new streams, please
    LAST_STREAM_SENT = "last-stream-sent"  # GOAWAY with the real last stream id; later streams refused
    CLOSED = "closed"  # final GOAWAY sent once every accepted stream was answered, or the peer closed first


class Step(Enum):
    ROTATE = "rotate"  # the request limit or --goaway-chance asked for a new connection
    GRACE_ELAPSED = "grace-elapsed"  # GOAWAY_GRACE after the notice: streams on their way have arrived
    DRAINED = "drained"  # every accepted stream's last frame is on the wire (or DRAIN_LIMIT passed)
    PEER_CLOSED = "peer-closed"  # the client or the transport ended the connection


# Every allowed transition, in one place; any other (phase, step) pair is ignored.
TRANSITIONS: dict[tuple[Phase, Step], Phase] = {
    (Phase.OPEN, Step.ROTATE): Phase.NOTICE_SENT,
    (Phase.NOTICE_SENT, Step.GRACE_ELAPSED): Phase.LAST_STREAM_SENT,
    (Phase.LAST_STREAM_SENT, Step.DRAINED): Phase.CLOSED,
    (Phase.OPEN, Step.PEER_CLOSED): Phase.CLOSED,
    (Phase.NOTICE_SENT, Step.PEER_CLOSED): Phase.CLOSED,
    (Phase.LAST_STREAM_SENT, Step.PEER_CLOSED): Phase.CLOSED,
}


class GracefulClose:
    """The graceful-close state machine of one HTTP/2 connection (pure: the adapter performs the actions)."""

    def __init__(self) -> None:
        self.phase = Phase.OPEN

    def advance(self, step: Step) -> bool:
        """Take ``step`` if the table allows it from the current phase; returns whether it was taken."""
        following = TRANSITIONS.get((self.phase, step))
        if following is None:
            return False
        self.phase = following
        return True


_TOKEN = frozenset(b"!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")  # RFC 9110 5.6.2
_REQUEST = h2.utilities.HeaderValidationFlags(
    is_client=False, is_trailer=False, is_response_header=False, is_push_promise=False
)
_TRAILERS = _REQUEST._replace(is_trailer=True)


def malformed(headers: list[tuple[bytes, bytes]], trailers: bool = False) -> bool:
    """Whether a received header block is malformed (RFC 9113 section 8.1.1): h2's own inbound validation
    (upper-case or non-token names, connection-specific fields, pseudo-header order and set, ``host`` naming
    another authority than ``:authority``, pseudo-headers in trailers), plus what hypercorn cannot turn into a
    scope: a request without exactly one ``:path`` (a plain CONNECT) or a non-ASCII or empty one, and a
    ``:method`` that is not one token. Pure."""
    try:
        for _ in h2.utilities.validate_headers(headers, _TRAILERS if trailers else _REQUEST):
            pass
    except h2.exceptions.ProtocolError:
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


def _refuse_malformed_streams(protocol: H2Protocol) -> None:
    """Make a malformed request a stream error (RST_STREAM PROTOCOL_ERROR), never the connection's.
    h2 validates inbound headers inside ``receive_data`` and raises a connection error, and hypercorn 0.18
    raises on a non-ASCII ``:method`` or ``:path`` or a missing ``:path``: either ended every stream of the
    connection. h2's validation is turned off for this connection and run here per header block instead
    (``malformed``, h2's own functions), before hypercorn sees the block; a stream refused this way is never
    created, and its later frames are late frames (``guard_early_responses``).

    PRIORITY signals are ignored, as RFC 9113 section 5.3.2 allows (they are deprecated): hypercorn 0.18 put every
    stream a PRIORITY frame named into its priority tree, which raised TooManyStreamsError, with a traceback and
    the connection's end, at the 1,001st idle stream. Streams are then scheduled with equal weights."""
    if protocol.__dict__.get("_malformed_stream_guard"):
        return
    protocol.__dict__["_malformed_stream_guard"] = True
    connection = protocol.connection
    connection.config.validate_inbound_headers = False  # this connection's configuration object only
    handle_events = protocol._handle_events

    def refuse(stream_id: int) -> None:
        with contextlib.suppress(h2.exceptions.ProtocolError):
            connection.reset_stream(stream_id, h2.errors.ErrorCodes.PROTOCOL_ERROR)

    async def checked(events: Events) -> None:
        kept: Events = []
        for event in events:
            if isinstance(event, h2.events.PriorityUpdated):
                continue  # see the docstring: ignored
            if isinstance(event, h2.events.RequestReceived) and malformed(event.headers or []):
                refuse(cast(int, event.stream_id))
                continue
            if isinstance(event, h2.events.TrailersReceived) and malformed(event.headers or [], trailers=True):
                refuse(cast(int, event.stream_id))
                # hypercorn closes its stream as for a client's reset
                reset = h2.events.StreamReset(stream_id=cast(int, event.stream_id), remote_reset=False)
                reset.error_code = h2.errors.ErrorCodes.PROTOCOL_ERROR
                kept.append(reset)
                continue
            kept.append(event)
        await handle_events(kept)

    protocol.__dict__["_handle_events"] = checked  # this connection's protocol only


def encode_headers(connection: h2.connection.H2Connection) -> None:
    """Give a new HTTP/2 connection the server's header encoding (``server/h2_headers.py``), before its first
    header block (the peer's decoder mirrors the table from the start):

    - the indexed HPACK encoder: hpack's bytes, found without scanning the table;
    - the carried report: a response whose first field after ``:status`` is the report (the middleware puts it
      there) is sent without it through h2, and the encoder appends it to that block. h2 runs its outbound
      normalisation and validation on every field of every block; for the report's field, which is the same
      on every response of a sample, they run once per distinct field (``passes_unchanged``, h2's own
      functions) and a field they would change or refuse is not carried."""
    encoder = connection.encoder
    if type(encoder) is not hpack.Encoder or encoder.header_table.dynamic_entries:
        return
    indexed = IndexedEncoder()
    indexed.header_table_size = encoder.header_table_size
    indexed.header_table.resized = encoder.header_table.resized
    indexed.table_size_changes = list(encoder.table_size_changes)
    connection.encoder = indexed
    send_headers = connection.send_headers
    checked: dict[tuple[bytes, bytes], bool] = {}  # report field -> passes_unchanged (a few per connection)

    def carry_report(stream_id: int, headers: Any, *args: Any, **kwargs: Any) -> None:
        if (
            type(headers) is list
            and len(headers) > 1
            and headers[1][0] == REPORT_FIELD_NAME
            and headers[0][0] == b":status"
        ):
            field = headers[1]
            carried = checked.get(field)
            if carried is None:
                carried = remember(checked, field, passes_unchanged(field, connection.config))
            if carried:
                del headers[1]  # hypercorn's list, built for this call
                indexed.carried = field[1]
                try:
                    return send_headers(stream_id, headers, *args, **kwargs)
                finally:
                    indexed.carried = None  # never left for another block, whatever h2 raised
        return send_headers(stream_id, headers, *args, **kwargs)

    setattr(connection, "send_headers", carry_report)  # noqa: B010  (this connection only)


def end_trailers_only(connection: h2.connection.H2Connection) -> None:
    """Send a gRPC trailers-only response as one HEADERS frame with END_STREAM (gRPC's PROTOCOL-HTTP2.md).

    hypercorn 0.18 turns an ASGI ``http.response.trailers`` sent before any response into a HEADERS frame and
    then an empty DATA frame with END_STREAM, which gRPC clients read as headers without a status (grpcio:
    UNKNOWN, "Stream removed"). A response block whose first field after ``:status`` is ``grpc-status`` (the
    out-of-band load report service's refusals put it there, server/oob.py) is trailers-only: it is sent with
    END_STREAM here, and hypercorn's empty DATA that follows finds the stream closed (it already ignores that).
    Two comparisons per response block, as ``carry_report``."""
    send_headers = connection.send_headers

    def trailers_only(stream_id: int, headers: Any, *args: Any, **kwargs: Any) -> None:
        if (
            type(headers) is list
            and len(headers) > 1
            and headers[1][0] == b"grpc-status"
            and headers[0][0] == b":status"
            and not args
        ):
            kwargs["end_stream"] = True
        return send_headers(stream_id, headers, *args, **kwargs)

    setattr(connection, "send_headers", trailers_only)  # noqa: B010  (this connection only)


def _no_upgrade_to_h2(protocol: H11Protocol) -> None:
    """Serve ``Upgrade: h2c`` and the cleartext HTTP/2 preface as what they are over TLS: HTTP/1.1 requests
    (ALPN chose the protocol). hypercorn would answer 101 and switch."""

    async def keep_http1(event: h11.Request) -> None:
        return None

    setattr(protocol, "_check_protocol", keep_http1)  # noqa: B010  (this connection's protocol only)


class TLSAwareTCPServer(TCPServer):
    """hypercorn's per-connection TCPServer, reading the peer certificate once per connection (after the
    handshake), and closing an HTTP/2 connection gracefully as the ``GracefulClose`` table says: a GOAWAY notice,
    one grace period for streams already on their way, a GOAWAY with the real last stream id (later streams are
    refused with REFUSED_STREAM, safe to retry), every accepted stream answered in full, and a final GOAWAY once
    the last frame is on the wire."""

    def __init__(
        self,
        app: AppWrapper,
        loop: asyncio.AbstractEventLoop,
        config: _Config,
        context: WorkerContext,
        state: dict[str, Any],
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        self.rotate_after_requests = config.rotate_after_requests
        self.goaway_chance = config.goaway_chance
        self.h2_config = config.h2
        self.body_flow: BodyFlow | None = None
        try:
            tls = tls_extension(writer.get_extra_info("ssl_object"))
        except Exception as error:  # never fail a connection here: it just gets no identity
            log.warning("cannot read the client certificate (%s); treating it as absent", type(error).__name__)
            tls = {"client_cert_chain": [], "client_cert_error": type(error).__name__}
        super().__init__(ConnectionApp(app, tls, self), loop, config, context, state, reader, writer)
        self.goaway_last_stream: int | None = None
        self.close_state = GracefulClose()
        self._goaway: asyncio.Task[None] | None = None

    @property
    def protocol(self) -> ProtocolWrapper:
        return cast(ProtocolWrapper, self.__dict__["protocol"])

    @protocol.setter
    def protocol(self, wrapper: ProtocolWrapper) -> None:
        """hypercorn's TCPServer.run sets the connection's ProtocolWrapper here, after ALPN. HTTP/1.1 is kept from
        switching to HTTP/2 over TLS; every HTTP/2 protocol the wrapper holds gets the early-response and
        malformed-stream guards before it handles data."""
        if isinstance(wrapper.protocol, H11Protocol):
            _no_upgrade_to_h2(wrapper.protocol)
        if isinstance(wrapper.protocol, H2Protocol):
            encode_headers(wrapper.protocol.connection)
            end_trailers_only(wrapper.protocol.connection)
        handle = wrapper.handle

        async def guarded_handle(event: Event) -> None:
            protocol = wrapper.protocol
            if isinstance(protocol, H2Protocol):
                _refuse_malformed_streams(protocol)
                if self.body_flow is None or self.body_flow.protocol is not protocol:
                    protocol.config = self.h2_config  # unbounded stream queues: BodyFlow bounds them
                    self.body_flow = BodyFlow(protocol)
                guard_early_responses(protocol, self.body_flow)
                self.body_flow.open_window()
            await handle(event)

        wrapper.__dict__["handle"] = guarded_handle  # this connection's instance only, not the class
        self.__dict__["protocol"] = wrapper

    def _h2(self) -> H2Protocol | None:
        """The connection's HTTP/2 protocol, or None (HTTP/1.1, or not started yet)."""
        wrapper = self.__dict__.get("protocol")  # set by TCPServer.run once the connection starts
        inner = wrapper.protocol if isinstance(wrapper, ProtocolWrapper) else None
        return inner if isinstance(inner, H2Protocol) else None

    async def _send_raw(self, data: bytes) -> None:
        if self.close_state.phase is Phase.CLOSED or self.writer.is_closing():
            return
        with contextlib.suppress(ConnectionError, RuntimeError):  # the transport closed meanwhile
            await super().protocol_send(RawData(data))

    async def graceful_goaway(self) -> None:
        """Start the graceful close (once per connection); returns after the notice is sent."""
        protocol = self._h2()
        if protocol is None or not self.close_state.advance(Step.ROTATE):
            return
        self._goaway = asyncio.get_running_loop().create_task(self._complete_goaway(protocol))
        await self._send_raw(GoAwayFrame(0, last_stream_id=MAX_STREAM_ID, error_code=0).serialize())

    async def _complete_goaway(self, protocol: H2Protocol) -> None:
        connection = protocol.connection
        await asyncio.sleep(GOAWAY_GRACE)
        if not self.close_state.advance(Step.GRACE_ELAPSED):
            return
        last = connection.highest_inbound_stream_id
        self.goaway_last_stream = last
        create_stream = protocol._create_stream

        async def refuse_later_streams(request: h2.events.RequestReceived) -> None:
            if request.stream_id > last:
                with contextlib.suppress(h2.exceptions.ProtocolError):  # the client may have reset it already
                    connection.reset_stream(request.stream_id, h2.errors.ErrorCodes.REFUSED_STREAM)
            else:
                await create_stream(request)

        protocol._create_stream = refuse_later_streams  # type: ignore[method-assign]  # this connection only
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


def make_server_context(serving: KeyPair, anchors: bytes) -> ssl.SSLContext:
    """TLS 1.2+ server context with ALPN h2 and http/1.1, requesting (not requiring) a client certificate.

    ``serving`` and ``anchors`` (DER, concatenated) come from the credential loader: the handshake trusts exactly
    the certificates kube-apiserver reads from the CA files, from the same parse the authenticators use, and,
    as Go, accepts any of them as a trust anchor, self-signed or not (partial chains)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.options |= ssl.OP_NO_COMPRESSION
    context.set_alpn_protocols(["h2", "http/1.1"])
    tls_policy.apply(context)  # Go's key-exchange groups and ECDHE suites: no client-chosen costly handshake
    serving.load_into(context)
    if anchors:
        context.load_verify_locations(cadata=anchors)
        context.verify_mode = ssl.CERT_OPTIONAL
        context.verify_flags |= _NO_CHECK_TIME | ssl.VERIFY_X509_PARTIAL_CHAIN
        # No resumption where client certificates count: a resumed session gives back the leaf without the
        # intermediates, so a front proxy chaining through one would lose its grant (TLS 1.2 and 1.3). No
        # tickets, and no session cache (TLS 1.2 session IDs): every connection is a full handshake.
        context.options |= ssl.OP_NO_TICKET
        context.num_tickets = 0
        tls_policy.disable_session_cache(context)
    else:
        context.verify_mode = ssl.CERT_NONE
    return context


@dataclass
class ServerOptions:
    host: str
    port: int
    context: ssl.SSLContext
    max_requests_per_connection: int = 0  # 0: never rotate
    goaway_chance: float = 0.0
    graceful_timeout: float = 10.0
    access_log: bool = False


class _Config(Config):
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
    """The installed hypercorn is not the one whose internals this adapter was written against."""


def check_hypercorn() -> None:
    """Refuse to run on any hypercorn but the pinned one: this module relies on its internals."""
    installed = importlib.metadata.version("hypercorn")
    if installed != HYPERCORN_VERSION:
        raise HypercornVersionError(
            f"hypercorn {installed} is installed; secure-orca needs exactly {HYPERCORN_VERSION} "
            f"(pip install hypercorn=={HYPERCORN_VERSION})"
        )


async def end_connections(pending: dict[asyncio.Task[Any], tuple[asyncio.StreamReader, asyncio.StreamWriter]]) -> None:
    """End connections still open after the graceful period. Cancelling their tasks is not
    enough: hypercorn 0.18's ``TCPServer._close`` swallows CancelledError while waiting for the TLS close, which
    a silent client never completes, and the streams' tasks stay blocked. The transport is aborted and the reader
    ended instead (a transport already closing may never report its loss): every stream gets ``http.disconnect``
    and its buffers are released (``BodyFlow``), and the tasks finish by themselves; a task still running a
    second later is cancelled."""
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
    ``options.graceful_timeout`` seconds. We own the accept path (asyncio.start_server) and construct our
    TCPServer per connection; nothing in hypercorn is replaced process-wide."""
    check_hypercorn()
    config = _Config(options.context, options.max_requests_per_connection, options.goaway_chance)
    config.alpn_protocols = ["h2", "http/1.1"]
    config.graceful_timeout = options.graceful_timeout
    config.accesslog = logging.getLogger("secure_orca.access") if options.access_log else None
    config.errorlog = logging.getLogger("hypercorn.error")
    loop = asyncio.get_running_loop()
    wrapped = ASGIWrapper(cast(ASGIFramework, app))  # our apps use the generic ASGI mapping types
    context = WorkerContext(None)
    state: dict[str, Any] = {}
    connections: dict[asyncio.Task[Any], tuple[asyncio.StreamReader, asyncio.StreamWriter]] = {}

    async def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            connections[task] = reader, writer
            task.add_done_callback(lambda done: connections.pop(done, None))
        await TLSAwareTCPServer(wrapped, loop, config, context, state, reader, writer)

    listener = await asyncio.start_server(
        on_connection,
        options.host,
        options.port,
        ssl=options.context,
        backlog=config.backlog,
        ssl_handshake_timeout=config.ssl_handshake_timeout,
    )
    port = listener.sockets[0].getsockname()[1]
    log.info("Running on https://%s (CTRL + C to quit)", bind_address(options.host, port))
    try:
        await shutdown_trigger()
    finally:
        await context.terminated.set()  # idle connections close at once
        listener.close()
        await listener.wait_closed()
        if connections:
            _, pending = await asyncio.wait(set(connections), timeout=options.graceful_timeout)
            await end_connections({task: connections[task] for task in pending if task in connections})
