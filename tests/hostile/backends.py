"""Real upstream HTTP servers on loopback for the proxy attack tests."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class Recorded:
    """Every request line a backend received: (method, raw target)."""

    requests: list[tuple[str, str]] = field(default_factory=list)

    @property
    def paths(self) -> list[str]:
        return [path for _, path in self.requests]


@contextmanager
def recording_backend() -> Iterator[tuple[str, Recorded]]:
    """An HTTP/1.1 backend that answers every request 200 ``backend`` and records its target."""
    recorded = Recorded()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def answer(self) -> None:
            recorded.requests.append((self.command, self.path))
            length = int(self.headers.get("content-length") or 0)
            if length:
                self.rfile.read(length)
            self.send_response(200)
            self.send_header("content-length", "7")
            self.end_headers()
            self.wfile.write(b"backend")

        do_GET = do_POST = do_PUT = do_DELETE = answer

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", recorded
    finally:
        server.shutdown()
        server.server_close()
