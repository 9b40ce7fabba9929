"""An HTTP client per protocol, and a proxied backend that answers with its own ORCA headers (which the server
must never pass on as its report) and records the headers it received."""

from __future__ import annotations

import http.server
import ssl
from pathlib import Path
from typing import ClassVar

import httpx

from tests.conftest import ClientCert

PROTOCOLS = ["h2", "http1.1"]


def client(ca: Path, protocol: str, cert: ClientCert | None = None) -> httpx.Client:
    context = ssl.create_default_context(cafile=str(ca))
    if cert is not None:
        context.load_cert_chain(cert.cert, cert.key)
    return httpx.Client(verify=context, http2=protocol == "h2", http1=protocol != "h2", timeout=10)


class InjectingBackend(http.server.BaseHTTPRequestHandler):
    """A proxied backend that returns its own ORCA headers and records the headers it received."""

    seen: ClassVar[list[list[tuple[str, str]]]] = []

    def do_GET(self) -> None:
        InjectingBackend.seen.append(list(self.headers.items()))
        body = b'{"backend":true}'
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("endpoint-load-metrics", "TEXT cpu_utilization=0.999")
        self.send_header("endpoint-load-metrics-bin", "CQAAAAAAAPA/")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass
