"""Out-of-band ORCA: ``xds.service.orca.v3.OpenRcaService/StreamCoreMetrics`` as data (pure: no I/O, no clock).

The gRPC parts the server needs, as functions: the request checks and their refusals, the 5-byte gRPC message
framing (gRPC's ``PROTOCOL-HTTP2.md``: a compressed flag, a big-endian length, the message), the request
decode and the report message, both by protobuf through the ``xds-protos`` classes (never a hand-written
encoding), the interval floor, and who may open the stream. The ASGI shell is ``secure_orca.server.oob``.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum

from google.protobuf.message import DecodeError
from xds.data.orca.v3 import orca_load_report_pb2
from xds.service.orca.v3 import orca_pb2

from secure_orca.orca.report import LoadReport, format_number

PATH = "/xds.service.orca.v3.OpenRcaService/StreamCoreMetrics"
PATH_BYTES = PATH.encode()
CONTENT_TYPE = b"application/grpc"
MAX_REQUEST = 16 * 1024  # bytes of one OrcaLoadReportRequest (an interval and a few names; Envoy's is 2 bytes)
MAX_INTERVAL = 3600.0  # seconds: a longer asked interval is served at this one
_PREFIX = struct.Struct(">BI")
PREFIX_SIZE = _PREFIX.size


class Status(IntEnum):
    """The gRPC status codes this service answers with (grpc/doc/statuscodes.md)."""

    OK = 0
    INVALID_ARGUMENT = 3
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    UNIMPLEMENTED = 12
    UNAVAILABLE = 14
    UNAUTHENTICATED = 16


class GrpcError(Exception):
    """A refusal: the status and a short message, safe to send (it never names a secret or a certificate)."""

    def __init__(self, status: Status, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class Refusal:
    """A request to the service path that is not a gRPC call at all: an HTTP status, no gRPC status."""

    http_status: int
    message: str


def check_transport(http_version: str, method: str, headers: Sequence[tuple[bytes, bytes]]) -> Refusal | None:
    """Whether the request can be a gRPC call: HTTP/2, POST, ``content-type: application/grpc[+proto|;...]``
    and ``te: trailers`` (without it no trailer, hence no status, could be sent). Refusals follow gRPC-Go's
    ``ServeHTTP`` and the gRPC HTTP/2 spec: 400 for the transport, 415 for the content type."""
    if http_version != "2":
        return Refusal(400, "gRPC requires HTTP/2")
    if method != "POST":
        return Refusal(405, "gRPC requires POST")
    content_types = [value for name, value in headers if name.lower() == b"content-type"]
    if len(content_types) != 1 or not _grpc_content_type(content_types[0]):
        return Refusal(415, "content-type must be application/grpc")
    if (b"te", b"trailers") not in ((name.lower(), value.lower()) for name, value in headers):
        return Refusal(400, "gRPC requires te: trailers")
    return None


def _grpc_content_type(value: bytes) -> bool:
    value = value.lower()
    if value == CONTENT_TYPE:
        return True
    return value.startswith(CONTENT_TYPE) and value[len(CONTENT_TYPE)] in b"+;" and value != CONTENT_TYPE + b"+json"


def refusal_status(certificate_presented: bool) -> Status:
    """UNAUTHENTICATED when no certificate was presented, PERMISSION_DENIED for any certificate that does
    not entitle (gRPC's own split: no credential vs the wrong one)."""
    return Status.PERMISSION_DENIED if certificate_presented else Status.UNAUTHENTICATED


def frame(message: bytes) -> bytes:
    """One gRPC length-prefixed message, uncompressed."""
    return _PREFIX.pack(0, len(message)) + message


def unframe(body: bytes, limit: int = MAX_REQUEST) -> bytes:
    """The one message of a unary request body; GrpcError for a compressed, truncated, oversized or extra
    message (the server announces no compression, so a compressed one is the client's error)."""
    if len(body) < _PREFIX.size:
        raise GrpcError(Status.INVALID_ARGUMENT, "request message missing or truncated")
    compressed, length = _PREFIX.unpack_from(body)
    if compressed:
        raise GrpcError(Status.UNIMPLEMENTED, "compressed messages are not supported")
    if length > limit:
        raise GrpcError(Status.RESOURCE_EXHAUSTED, f"request message larger than {limit} bytes")
    if len(body) != _PREFIX.size + length:
        raise GrpcError(Status.INVALID_ARGUMENT, "exactly one request message expected")
    return body[_PREFIX.size :]


def expected_length(head: bytes) -> int:
    """The whole body length announced by a message prefix (the shell reads no further than this)."""
    return _PREFIX.size + _PREFIX.unpack_from(head)[1]


@dataclass(frozen=True)
class StreamRequest:
    """What the client asked for: its interval in seconds (0 when unset) and the request cost names."""

    interval: float
    cost_names: tuple[str, ...] = ()


def parse_request(message: bytes) -> StreamRequest:
    """Decode an ``OrcaLoadReportRequest`` with protobuf; GrpcError for one protobuf refuses or whose interval
    is negative."""
    request = orca_pb2.OrcaLoadReportRequest()
    try:
        request.ParseFromString(message)
    except DecodeError:
        raise GrpcError(Status.INVALID_ARGUMENT, "malformed OrcaLoadReportRequest") from None
    seconds, nanos = request.report_interval.seconds, request.report_interval.nanos
    if seconds < 0 or nanos < 0:
        raise GrpcError(Status.INVALID_ARGUMENT, "report_interval must not be negative")
    return StreamRequest(seconds + nanos / 1e9, tuple(request.request_cost_names))


def request_frame(interval: float, cost_names: Sequence[str] = ()) -> bytes:
    """A client's framed ``OrcaLoadReportRequest`` (the probe's and the tests'), encoded by protobuf."""
    request = orca_pb2.OrcaLoadReportRequest(request_cost_names=list(cost_names))
    request.report_interval.FromNanoseconds(round(interval * 1e9))
    return frame(request.SerializeToString())


def parse_report(body: bytes) -> orca_load_report_pb2.OrcaLoadReport | None:
    """The first message of a gRPC response body as an ``OrcaLoadReport`` with at least one field set, or None
    (how the probe recognises a streamed report, whoever served it)."""
    if len(body) < PREFIX_SIZE:
        return None
    compressed, length = _PREFIX.unpack_from(body)
    if compressed or len(body) < PREFIX_SIZE + length:
        return None
    message = orca_load_report_pb2.OrcaLoadReport()
    try:
        message.ParseFromString(body[PREFIX_SIZE : PREFIX_SIZE + length])
    except DecodeError:
        return None
    return message if message.ListFields() else None


def floor_interval(asked: float, floor: float) -> float:
    """The interval served: the asked one, raised to ``floor`` (gRPC A51's server-side minimum; an unset or
    zero interval gets the floor) and capped at ``MAX_INTERVAL``."""
    return min(max(asked, floor), MAX_INTERVAL)


def report_message(report: LoadReport, decimals: int) -> orca_load_report_pb2.OrcaLoadReport:
    """The sampler's report as an ``OrcaLoadReport``, each value rounded exactly as the in-band TEXT header
    rounds it (``format_number``), so a reader sees the same values either way."""
    message = orca_load_report_pb2.OrcaLoadReport()
    for key, value in report.items():
        rounded = float(format_number(value, decimals))
        prefix, _, name = key.partition(".")
        if prefix == "named_metrics":
            message.named_metrics[name] = rounded
        elif prefix == "utilization":
            message.utilization[name] = rounded
        else:
            setattr(message, key, rounded)
    return message


def report_frame(report: LoadReport, decimals: int) -> bytes:
    """The framed, serialized report: computed once per sample and shared by every open stream."""
    return frame(report_message(report, decimals).SerializeToString(deterministic=True))


RESPONSE_HEADERS = ((b"content-type", CONTENT_TYPE),)


def status_trailers(status: Status, message: str = "") -> list[tuple[bytes, bytes]]:
    """The trailers that end a call (``grpc-message`` percent-encoded as the spec asks; ours are ASCII)."""
    trailers = [(b"grpc-status", str(int(status)).encode())]
    if message:
        trailers.append((b"grpc-message", _percent(message)))
    return trailers


def _percent(text: str) -> bytes:
    return b"".join(
        bytes([byte]) if 0x20 <= byte <= 0x7E and byte != 0x25 else b"%%%02X" % byte for byte in text.encode()
    )
