"""Raw clients for attack tests: HTTP/2 frames and HTTP/1.1 bytes over real TLS, sent exactly as written
(httpx and curl would normalise the very paths and headers these tests need to send)."""

from __future__ import annotations

import re
import socket
import ssl
import time
from dataclasses import dataclass, field
from pathlib import Path

import h2.connection
import h2.events

from secure_orca import pki
from secure_orca.h2client import H2Loop, client_connection
from secure_orca.lab.replicas import Replica

from ..conftest import ClientCert


def tls_context(dev_pki: pki.DevPKI, alpn: str, cert: ClientCert | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(dev_pki.cert("ca")))
    context.set_alpn_protocols([alpn])
    if cert is not None:
        context.load_cert_chain(cert.cert, cert.key)
    return context


def connect(replica: Replica, context: ssl.SSLContext, timeout: float = 10.0) -> ssl.SSLSocket:
    raw = socket.create_connection((replica.host, replica.port), timeout=timeout)
    return context.wrap_socket(raw, server_hostname="localhost")


@dataclass
class H2Reply:
    """What came back on one HTTP/2 stream: status and headers (None when reset before any), body, reset code."""

    status: int | None = None
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""
    reset: int | None = None
    goaway: bool = False
    closed: bool = False  # the connection ended before the stream did

    @property
    def refused(self) -> bool:
        """Reset, or the connection closed or went away, without a response."""
        return self.status is None and (self.reset is not None or self.goaway or self.closed)

    def header(self, name: str) -> list[str]:
        return [v for n, v in self.headers if n == name]


def h2_client() -> h2.connection.H2Connection:
    """A client connection that sends headers unchecked (attacks need malformed ones)."""
    conn = client_connection(
        validate_outbound_headers=False, normalize_outbound_headers=False, header_encoding="latin-1"
    )
    conn.initiate_connection()
    return conn


def h2_loop(sock: ssl.SSLSocket) -> H2Loop:
    """The loop of :func:`h2_client` over ``sock``; a timeout, a reset or a TLS error on a read ends it."""
    return H2Loop(sock, h2_client(), closes_on=(TimeoutError, ConnectionError, ssl.SSLError))


def read_streams(loop: H2Loop, stream_ids: list[int]) -> dict[int, H2Reply]:
    """Read until every stream of ``stream_ids`` ends or is reset, or the connection closes."""
    replies = {stream_id: H2Reply() for stream_id in stream_ids}
    open_ids = set(stream_ids)

    def record(event: h2.events.Event) -> None:
        reply = replies.get(getattr(event, "stream_id", 0))
        if isinstance(event, h2.events.ConnectionTerminated):
            for stream_id in open_ids:
                replies[stream_id].goaway = True
            open_ids.clear()
        elif reply is None:
            return
        elif isinstance(event, h2.events.ResponseReceived):
            for name, value in event.headers:
                if name == ":status":
                    reply.status = int(value)
                else:
                    reply.headers.append((str(name), str(value)))
        elif isinstance(event, h2.events.DataReceived):
            reply.body += event.data
            loop.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        elif isinstance(event, h2.events.StreamReset):
            reply.reset = int(event.error_code)
            open_ids.discard(event.stream_id)
        elif isinstance(event, h2.events.StreamEnded):
            open_ids.discard(event.stream_id)

    loop.on_event = record
    loop.read_until(lambda: not open_ids)
    for stream_id in open_ids:  # the connection closed first
        replies[stream_id].closed = True
    return replies


def read_stream(loop: H2Loop, stream_id: int) -> H2Reply:
    """Read until ``stream_id`` ends, is reset, or the connection closes."""
    return read_streams(loop, [stream_id])[stream_id]


def h2_request(
    replica: Replica,
    dev_pki: pki.DevPKI,
    headers: list[tuple[str, str]],
    body: bytes | None = None,
    cert: ClientCert | None = None,
) -> H2Reply:
    """One request on a fresh HTTP/2 connection, headers sent verbatim (pseudo-headers included)."""
    with connect(replica, tls_context(dev_pki, "h2", cert)) as sock:
        loop = h2_loop(sock)
        return read_stream(loop, loop.request(headers, body))


def get_h2(replica: Replica, dev_pki: pki.DevPKI, path: str, *extra: tuple[str, str]) -> H2Reply:
    pseudo = [(":method", "GET"), (":path", path), (":scheme", "https"), (":authority", "localhost")]
    return h2_request(replica, dev_pki, [*pseudo, *extra])


def h1_exchange(replica: Replica, dev_pki: pki.DevPKI, request: bytes, cert: ClientCert | None = None) -> bytes:
    """Send raw HTTP/1.1 bytes and return everything the server sends until it closes or goes quiet."""
    received = b""
    with connect(replica, tls_context(dev_pki, "http/1.1", cert), timeout=3.0) as sock:
        sock.sendall(request)
        while True:
            try:
                data = sock.recv(65536)
            except (TimeoutError, ConnectionError, ssl.SSLError):
                break
            if not data:
                break
            received += data
    return received


def h1_get(replica: Replica, dev_pki: pki.DevPKI, target: str, *extra: str) -> bytes:
    lines = [f"GET {target} HTTP/1.1", "Host: localhost", *extra, "Connection: close", "", ""]
    return h1_exchange(replica, dev_pki, "\r\n".join(lines).encode("latin-1"))


def h1_status(response: bytes) -> int | None:
    """The status code of the first response in ``response`` (None when there is none)."""
    first = response.split(b"\r\n", 1)[0].split()
    return int(first[1]) if len(first) >= 2 and first[1].isdigit() else None


def log_text(replica: Replica) -> str:
    return "".join(replica.process.lines)


def write_private(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    path.chmod(0o600)
    return path


IN_FLIGHT = re.compile(rb"named_metrics\.in_flight_requests=([0-9.]+)")


def in_flight(replica: Replica, dev_pki: pki.DevPKI) -> float:
    """The server's own ``in_flight_requests`` gauge, as its served report says (the shared secret grants it)."""
    secret = dev_pki.secret.read_text().strip()
    response = h1_get(replica, dev_pki, "/healthz", f"endpoint-load-metrics-request: TEXT; secret={secret}")
    found = IN_FLIGHT.search(response.split(b"\r\n\r\n", 1)[0])
    assert found, f"no report served: {response[:300]!r}"
    return float(found.group(1))


def assert_nothing_in_flight(replica: Replica, dev_pki: pki.DevPKI, reads: int = 40) -> None:
    """Every request that ended has left the gauge: some report, sampled between requests, says 0. The report
    is sampled every 100 ms, so it is read up to ``reads`` times, a sampling interval apart (a bound on the
    waiting, not a measurement); a stuck request keeps every sample above 0."""
    seen: list[float] = []
    for _ in range(reads):
        seen.append(in_flight(replica, dev_pki))
        if seen[-1] == 0:
            return
        time.sleep(0.1)
    raise AssertionError(f"in_flight_requests never returned to 0: {seen}")
