"""Probe transport (the only I/O): the target URL, TLS client contexts, a small HTTP/2 client over an ``ssl``
socket (on ``secure_orca.h2client``'s loop) and a raw HTTP/1.1 client, and ``exchange()``, which sends one vector
on a fresh connection.

Every socket has a timeout, and a connector connects only to the target it was given.
"""

from __future__ import annotations

import os
import socket
import ssl
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import h2.events
import h2.exceptions
from hpack import NeverIndexedHeaderTuple

from secure_orca.errors import SecureOrcaError
from secure_orca.h2client import H2Loop, client_connection
from secure_orca.orca import oob
from secure_orca.orca.headers import OPTIN_BYTES as OPTIN
from secure_orca.probe.vectors import CLEARTEXT, Headers, Identity, Vector
from secure_orca.probe.verdict import Exchange

MAX_BODY = 1 << 20
USER_AGENT = b"secure-orca-probe/0.1"


class ProbeError(SecureOrcaError, ValueError):
    """Unusable probe input (URL, credential file); the message is one line and never holds a secret."""


# --- connecting ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """An ``https://host[:port][/path]`` URL split for connecting."""

    url: str
    host: str
    port: int
    authority: str
    path: str

    @classmethod
    def parse(cls, url: str) -> Target:
        parts = urlsplit(url)
        if parts.scheme != "https":
            raise ProbeError(f"{url!r}: only https:// URLs can be probed")
        try:
            port = parts.port or 443
        except ValueError:
            raise ProbeError(f"{url!r}: invalid port") from None
        if not parts.hostname:
            raise ProbeError(f"{url!r}: no host")
        return cls(url, parts.hostname, port, parts.netloc.rpartition("@")[2], parts.path or "")


class Connector:
    """TLS contexts per (identity, ALPN), built once; connects only to ``target``."""

    def __init__(self, target: Target, cacert: Path | None, insecure: bool, timeout: float) -> None:
        self.target = target
        self.cacert = cacert
        self.insecure = insecure
        self.timeout = timeout
        self._contexts: dict[tuple[str, str], ssl.SSLContext] = {}

    def context(self, identity: Identity, alpn: str) -> ssl.SSLContext:
        key = (identity.name, alpn)
        if key not in self._contexts:
            self._contexts[key] = client_context(self.cacert, self.insecure, identity, [alpn])
        return self._contexts[key]

    def tcp(self) -> socket.socket:
        sock = socket.create_connection((self.target.host, self.target.port), timeout=self.timeout)
        sock.settimeout(self.timeout)
        return sock

    def tls(self, identity: Identity, alpn: str) -> ssl.SSLSocket:
        raw = self.tcp()
        try:
            sock = self.context(identity, alpn).wrap_socket(raw, server_hostname=self.target.host)
        except BaseException:
            raw.close()
            raise
        return sock


def client_context(cacert: Path | None, insecure: bool, identity: Identity, alpn: list[str]) -> ssl.SSLContext:
    """A client context; minted keys are written to a private temporary directory only while loading."""
    context = ssl.create_default_context(cafile=str(cacert) if cacert else None)
    if insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(alpn)
    if identity.pem is not None:
        with tempfile.TemporaryDirectory(prefix="secure-orca-probe-") as tmp:
            cert, key = Path(tmp) / "client.crt", Path(tmp) / "client.key"
            cert.write_bytes(identity.pem[0])
            fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as handle:
                handle.write(identity.pem[1])
            context.load_cert_chain(cert, key)
    elif identity.cert is not None:
        context.load_cert_chain(identity.cert, identity.key)
    return context


# --- HTTP/2 ----------------------------------------------------------------------------------------------


def _request_headers(
    target: Target, path: str, extra: Headers, scheme: bytes = b"https", method: str = "GET", length: int = 0
) -> list[Any]:
    base = [
        (b":method", method.encode()),
        (b":scheme", scheme),
        (b":authority", target.authority.encode()),
        (b":path", path.encode()),
        (b"user-agent", USER_AGENT),
        (b"te", b"trailers"),
        *([(b"content-length", str(length).encode())] if length else []),
        *([(b"content-type", b"application/json")] if length and not _has_content_type(extra) else []),
    ]
    # Opt-in values may hold a secret: never let HPACK index them (it also keeps timing samples comparable).
    return base + [NeverIndexedHeaderTuple(n, v) if n.lower() == OPTIN else (n, v) for n, v in extra]


def _has_content_type(extra: Headers) -> bool:
    """The vector sets its own content type (a gRPC call): no default one beside it."""
    return any(name.lower() == b"content-type" for name, _ in extra)


class H2Client:
    """A minimal HTTP/2 client over one socket (``secure_orca.h2client.H2Loop``): sequential GETs, headers and
    trailers kept exactly as received. Outbound validation is off so malformed variants reach the server as
    written."""

    def __init__(self, sock: socket.socket, target: Target) -> None:
        self.sock = sock
        self.target = target
        self.scheme = b"https" if isinstance(sock, ssl.SSLSocket) else b"http"
        conn = client_connection(
            validate_outbound_headers=False, normalize_outbound_headers=False, validate_inbound_headers=False
        )
        self.loop = H2Loop(sock, conn).open()
        self._closed = False

    @property
    def closed(self) -> bool:
        """The server closed or sent GOAWAY, or the caller gave the connection up."""
        return self._closed or self.loop.closed

    @closed.setter
    def closed(self, value: bool) -> None:
        self._closed = value

    def get(
        self, path: str, extra: Headers, method: str = "GET", content: bytes = b"", until_data: bool = False
    ) -> Exchange:
        """One request (a GET unless told); raises OSError/ssl.SSLError/h2 errors to the caller, returns what
        arrived otherwise. ``until_data``: return at the response's first DATA (a stream that never ends, as a
        served StreamCoreMetrics call, is judged by its first message)."""
        out = Exchange()
        headers = _request_headers(self.target, path, extra, self.scheme, method, len(content))
        response = _Response(out, self.loop.request(headers, content or None), until_data)

        def on_event(event: h2.events.Event) -> None:
            if isinstance(event, h2.events.DataReceived):
                self.loop.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            response.event(event)

        self.loop.on_event = on_event
        while not response.finished:
            try:
                self.loop.read()
            except h2.exceptions.ProtocolError:
                if not self.closed:
                    raise
                # h2 accepts no frame after a GOAWAY, even for a stream the server still answers
                out.error_kind, out.error = "closed", "GOAWAY before the response ended"
                return out
            if self.loop.eof:
                out.error_kind, out.error = "closed", "connection closed before the response ended"
                return out
            if not response.finished and response.body > MAX_BODY:
                out.error_kind, out.error = "protocol", "response body too large"
                return out
        return out

    def close(self) -> None:
        try:
            self.loop.conn.close_connection()
            self.loop.flush()
        except (OSError, h2.exceptions.ProtocolError):
            pass
        self.sock.close()


@dataclass
class _Response:
    """What one stream's events make of ``out``; ``finished`` once it is complete (or will never be)."""

    out: Exchange
    stream: int
    until_data: bool
    body: int = 0  # DATA bytes on the connection while this response was read
    finished: bool = False

    def event(self, event: h2.events.Event) -> None:
        out, stream = self.out, self.stream
        if self.finished:
            return
        if isinstance(event, h2.events.ResponseReceived) and event.stream_id == stream:
            out.headers = [(bytes(n), bytes(v)) for n, v in event.headers]
            out.status = _status(out.headers)
        elif isinstance(event, h2.events.TrailersReceived) and event.stream_id == stream:
            out.trailers = [(bytes(n), bytes(v)) for n, v in event.headers]
        elif isinstance(event, h2.events.DataReceived):
            self.body += len(event.data)
            if event.stream_id == stream and self.body <= MAX_BODY:
                out.body += event.data
                self.finished = self.until_data and bool(out.body)
        elif isinstance(event, h2.events.StreamEnded) and event.stream_id == stream:
            self.finished = True
        elif isinstance(event, h2.events.StreamReset) and event.stream_id == stream:
            out.error_kind, out.error = "reset", f"stream reset ({_code(event.error_code)})"
            self.finished = True
        elif isinstance(event, h2.events.ConnectionTerminated) and (
            event.last_stream_id is None or event.last_stream_id < stream
        ):
            out.error_kind, out.error = "reset", f"GOAWAY ({_code(event.error_code)})"
            self.finished = True


def _code(code: Any) -> str:
    return getattr(code, "name", str(code))


def _status(headers: Sequence[tuple[bytes, bytes]]) -> int | None:
    for name, value in headers:
        if name == b":status":
            try:
                return int(value)
            except ValueError:
                return None
    return None


# --- HTTP/1.1 --------------------------------------------------------------------------------------------


def http1_request(target: Target, path: str, extra: Headers, method: str = "GET", content: bytes = b"") -> bytes:
    lines = [
        f"{method} {path} HTTP/1.1".encode(),
        b"Host: " + target.authority.encode(),
        b"User-Agent: " + USER_AGENT,
        b"Accept: */*",
        b"TE: trailers",
        b"Connection: close, TE",
        *([b"Content-Length: %d" % len(content)] if content else []),
        *([b"Content-Type: application/json"] if content and not _has_content_type(extra) else []),
        *(name + b": " + value for name, value in extra),
    ]
    return b"\r\n".join(lines) + b"\r\n\r\n" + content


def _parse_fields(block: bytes) -> list[tuple[bytes, bytes]]:
    fields = []
    for line in block.split(b"\r\n"):
        name, sep, value = line.partition(b":")
        if sep:
            fields.append((name.strip().lower(), value.strip()))
    return fields


def parse_http1_response(raw: bytes) -> Exchange:
    """Status, headers and (chunked) trailers of a raw HTTP/1.1 response; tolerant of a truncated body."""
    if not raw:
        return Exchange(error_kind="closed", error="connection closed without a response")
    head, sep, rest = raw.partition(b"\r\n\r\n")
    status_line, _, block = head.partition(b"\r\n")
    parts = status_line.split(b" ", 2)
    if not sep or len(parts) < 2 or not parts[0].startswith(b"HTTP/") or not parts[1].isdigit():
        return Exchange(error_kind="protocol", error="no HTTP/1.1 response")
    out = Exchange(status=int(parts[1]), headers=_parse_fields(block))
    chunked = any(n == b"transfer-encoding" and b"chunked" in v.lower() for n, v in out.headers)
    if not chunked:
        lengths = [int(v) for n, v in out.headers if n == b"content-length" and v.isdigit()]
        out.body = rest[: lengths[0]] if lengths else rest
    while chunked:
        size_line, sep, rest = rest.partition(b"\r\n")
        try:
            size = int(size_line.split(b";")[0].strip(), 16)
        except ValueError:
            break
        if not sep:
            break
        if size == 0:
            trailer_block = rest.partition(b"\r\n\r\n")[0] if rest.strip() else b""
            out.trailers = _parse_fields(trailer_block)
            break
        out.body += rest[:size]
        rest = rest[size + 2 :]
    return out


def http1_complete(raw: bytes) -> bool:
    """Whether ``raw`` holds a whole response (by Content-Length or the last chunk), so no need to wait for EOF."""
    head, sep, rest = raw.partition(b"\r\n\r\n")
    if not sep:
        return False
    fields = _parse_fields(head.partition(b"\r\n")[2])
    for name, value in fields:
        if name == b"transfer-encoding" and b"chunked" in value.lower():
            return (rest.startswith(b"0\r\n") or b"\r\n0\r\n" in rest) and rest.endswith(b"\r\n\r\n")
    for name, value in fields:
        if name == b"content-length" and value.isdigit():
            return len(rest) >= int(value)
    return False


def _recv_response(sock: socket.socket, limit: int = MAX_BODY) -> bytes:
    buffer = b""
    while len(buffer) < limit and not http1_complete(buffer):
        try:
            data = sock.recv(65536)
        except ssl.SSLZeroReturnError:
            break
        if not data:
            break
        buffer += data
    return buffer


# --- one exchange ----------------------------------------------------------------------------------------


def _error(kind: str, error: BaseException | str) -> Exchange:
    text = error if isinstance(error, str) else (str(error) or type(error).__name__)
    return Exchange(error_kind=kind, error=" ".join(text.split())[:160])


def _tls_error(error: ssl.SSLError) -> Exchange:
    if isinstance(error, ssl.SSLCertVerificationError):
        return _error("server-cert", f"server certificate not trusted: {error.verify_message}")
    return _error("handshake", error.reason or str(error))


def exchange(connector: Connector, identity: Identity, vector: Vector) -> Exchange:
    """Send one vector on a fresh connection and collect the response (errors become an Exchange)."""
    target = connector.target
    try:
        if vector.protocol in CLEARTEXT:
            sock: socket.socket = connector.tcp()
        else:
            try:
                sock = connector.tls(identity, "h2" if vector.protocol == "h2" else "http/1.1")
            except ssl.SSLError as error:
                return _tls_error(error)
    except (TimeoutError, OSError) as error:
        return _error("connect", error)
    alpn = sock.selected_alpn_protocol() if isinstance(sock, ssl.SSLSocket) else None
    try:
        if vector.protocol in ("h2", "h2c"):
            if vector.protocol == "h2" and alpn != "h2":
                return _error("not-h2", f"server negotiated {alpn or 'no ALPN protocol'}")
            client = H2Client(sock, target)
            streaming = vector.path == oob.PATH  # a served stream never ends: its first message decides
            result = client.get(vector.path, vector.headers, vector.method, vector.body, until_data=streaming)
        else:
            sock.sendall(http1_request(target, vector.path, vector.headers, vector.method, vector.body))
            result = parse_http1_response(_recv_response(sock))
        result.alpn = alpn
        return result
    except ssl.SSLError as error:
        # TLS 1.3: a client certificate is refused after the client's side of the handshake has finished.
        return _tls_error(error)
    except TimeoutError:
        return _error("timeout", f"no complete response within {connector.timeout:g}s")
    except (ConnectionResetError, BrokenPipeError, ConnectionAbortedError) as error:
        return _error("closed", error)
    except (OSError, h2.exceptions.ProtocolError) as error:
        return _error("protocol", error)
    finally:
        sock.close()
