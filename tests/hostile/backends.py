"""Real upstream HTTP servers on loopback for the proxy attack tests."""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from urllib.parse import urlsplit


@dataclass
class Recorded:
    """Every request line a backend received: (method, raw target)."""

    requests: list[tuple[str, str]] = field(default_factory=list)
    headers: list[list[tuple[str, str]]] = field(default_factory=list)

    @property
    def paths(self) -> list[str]:
        return [path for _, path in self.requests]

    def record(self, handler: http.server.BaseHTTPRequestHandler) -> None:
        """Keep the request line's method and raw target, and every header as received."""
        self.requests.append((handler.command, handler.path))
        self.headers.append(list(handler.headers.items()))


class _Server(http.server.ThreadingHTTPServer):
    request_queue_size = 512  # the stdlib's 5 refuses a load balancer's burst of connections


@contextmanager
def serving(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[str]:
    """``handler`` served by Python's ThreadingHTTPServer on a free loopback port, in a daemon thread: its URL."""
    server = _Server(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def recording_backend() -> Iterator[tuple[str, Recorded]]:
    """An HTTP/1.1 backend that records every request's target and headers and answers 200 ``backend``;
    paths ending in ``/nocontent`` or ``/notmodified`` get a 204 or 304 that (wrongly) carries a
    content-length, as some backends send."""
    recorded = Recorded()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def answer(self) -> None:
            recorded.record(self)
            self.read_body()
            for suffix, status in (("/nocontent", 204), ("/notmodified", 304)):
                if self.path.endswith(suffix):
                    self.send_response(status)
                    self.send_header("content-length", "0" if status == 204 else "7")
                    self.end_headers()
                    return
            self.send_response(200)
            self.send_header("content-length", "7")
            self.end_headers()
            self.wfile.write(b"backend")

        def read_body(self) -> None:
            if "chunked" in (self.headers.get("transfer-encoding") or "").lower():
                while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                    self.rfile.read(size + 2)
                while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return
            length = int(self.headers.get("content-length") or 0)
            if length:
                self.rfile.read(length)

        do_GET = do_POST = do_PUT = do_DELETE = answer

        def log_message(self, *args: object) -> None:
            pass

    with serving(Handler) as url:
        yield url, recorded


@contextmanager
def stdlib_backend() -> Iterator[tuple[str, Recorded]]:
    """An upstream we did not write, used as shipped: Python's ``http.server`` (ThreadingHTTPServer, HTTP/1.1
    keep-alive) answering every GET and HEAD with 200 ``upstream`` and its own ``Server`` and ``Date``; like
    the stdlib's handlers, it reads no request body, so any body bytes it is sent read as the next request."""
    recorded = Recorded()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            recorded.record(self)
            self.send_response(200)
            self.send_header("content-length", "8")
            self.end_headers()
            if self.command == "GET":
                self.wfile.write(b"upstream")

        do_HEAD = do_GET

        def log_message(self, *args: object) -> None:
            pass

    with serving(Handler) as url:
        yield url, recorded


@contextmanager
def hostile_backend() -> Iterator[tuple[str, Recorded]]:
    """An upstream that records every request and misbehaves on request: ``/redirect`` answers 302 to
    ``/stolen`` on itself (kube's CVE-2022-3172 and CVE-2020-8559), ``/switch`` answers 101 Switching
    Protocols to a request that asked for no upgrade and then sends raw bytes (CVE-2018-1002105's backend);
    anything else gets 200 ``upstream``."""
    recorded = Recorded()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            recorded.record(self)
            if self.path.endswith("/redirect"):
                self.send_response(302)
                port = self.server.server_address[1]  # type: ignore[index]  # an (host, port) tuple for TCP
                self.send_header("location", f"http://127.0.0.1:{port}/stolen")
                self.send_header("content-length", "0")
                self.end_headers()
            elif self.path.endswith("/switch"):
                self.send_response(101)
                self.send_header("connection", "upgrade")
                self.send_header("upgrade", "tunnel")
                self.end_headers()
                self.wfile.write(b"raw tunnel bytes")
                self.close_connection = True
            else:
                self.send_response(200)
                self.send_header("content-length", "8")
                self.end_headers()
                self.wfile.write(b"upstream")

        def log_message(self, *args: object) -> None:
            pass

    with serving(Handler) as url:
        yield url, recorded


@dataclass
class Generation:
    """One streamed response of ``streaming_backend``: chunks written, and whether the client left first."""

    path: str
    chunks: int = 0
    cancelled: bool = False
    ended_at: float = 0.0  # time.monotonic() when the backend saw the end (written out, or the client gone)
    started_at: float = field(default_factory=time.monotonic)
    headers: list[tuple[str, str]] = field(default_factory=list)


@contextmanager
def streaming_backend() -> Iterator[tuple[str, list[Generation]]]:
    """An HTTP/1.1 backend that generates as a model server does: ``?first=S`` waits S seconds before its
    headers, then ``?n=N&gap=G`` writes N chunked ``data: i`` events G seconds apart, noticing at once (at the
    next write) that the client left; a POST's body is read first. Every generation is recorded."""
    generations: list[Generation] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def answer(self) -> None:
            generation = Generation(self.path, headers=list(self.headers.items()))
            generations.append(generation)
            length = int(self.headers.get("content-length") or 0)
            if length:
                self.rfile.read(length)
            elif "chunked" in (self.headers.get("transfer-encoding") or "").lower():
                while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                    self.rfile.read(size + 2)
                self.rfile.readline()
            query = dict(part.split("=", 1) for part in urlsplit(self.path).query.split("&") if "=" in part)
            time.sleep(float(query.get("first", 0)))
            try:
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                for i in range(int(query.get("n", 1))):
                    event = f"data: {i}\n\n".encode()
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
                    self.wfile.flush()
                    generation.chunks += 1
                    time.sleep(float(query.get("gap", 0)))
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            except OSError:
                generation.cancelled = True
                self.close_connection = True
            generation.ended_at = time.monotonic()

        do_GET = do_POST = answer

        def log_message(self, *args: object) -> None:
            pass

    with serving(Handler) as url:
        yield url, generations


KV_CACHE = 0.42  # what ``reporting_backend`` reports, as vLLM names it


@contextmanager
def reporting_backend() -> Iterator[tuple[str, Recorded]]:
    """A backend that answers ``endpoint-load-metrics-format`` as vLLM does, to anyone (``text`` or ``json``, in
    any letter case; ``/garbage`` answers a report Envoy would refuse), and records every request's headers as
    received, in their own spelling."""
    recorded = Recorded()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            recorded.record(self)
            body = b'{"object":"list"}'
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            wanted = (self.headers.get("endpoint-load-metrics-format") or "").lower()
            metrics = f"named_metrics.kv_cache_usage_perc={KV_CACHE}, named_metrics.num_requests_waiting=2.0"
            if self.path.endswith("/garbage") and wanted:
                self.send_header("endpoint-load-metrics", "TEXT named_metrics.kv_cache_usage_perc=-1")
            elif wanted == "text":
                self.send_header("endpoint-load-metrics", f"TEXT {metrics}")
            elif wanted == "json":
                report = {"named_metrics": {"kv_cache_usage_perc": KV_CACHE, "num_requests_waiting": 2.0}}
                self.send_header("endpoint-load-metrics", "JSON " + json.dumps(report))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    with serving(Handler) as url:
        yield url, recorded
