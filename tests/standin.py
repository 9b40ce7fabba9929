"""A test-only stand-in for a server that is not ours: it answers ``endpoint-load-metrics-format`` to anyone, on
any path and method, roughly as Triton's HTTP endpoint does (triton-inference-server PR 7839: ``text`` or ``json``,
any caller, no credential); a probe test's simple leaky peer, in a thread. The faithful one, its own process
(generate routes only, the value compared as Triton compares it), is ``tests/live/triton_like.py``.
HTTP/1.1 over TLS on loopback, like Triton's HTTP endpoint. ``header`` makes it answer another request header the
same way, e.g. ``endpoint-load-metrics-request`` (the opt-in of KEP-6315, answered to anyone: option 1 without a
load balancer in front). The format is the value's first token (``TEXT; secret=x`` asks for text), as a server
that checks nothing reads it. Run it by hand for docs/probe.md:

    python -m tests.standin --cert certs/apiserver.crt --key certs/apiserver.key   # prints its URL, serves until ^C
"""

from __future__ import annotations

import argparse
import json
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

FORMAT_HEADER = "endpoint-load-metrics-format"
KV_CACHE = 0.42


class TritonLike(BaseHTTPRequestHandler):
    """GET or POST anything: 200 with a body, and a load report for any caller who asks by ``header``."""

    header = FORMAT_HEADER

    def _answer(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        if length:
            self.rfile.read(min(length, 1 << 16))
        body = b'{"ready":true}'
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        wanted = (self.headers.get(self.header) or "").partition(";")[0].strip().lower()
        if wanted == "text":
            self.send_header("endpoint-load-metrics", f"TEXT named_metrics.kv_cache_utilization={KV_CACHE}")
        elif wanted == "json":
            report = {"named_metrics": {"kv_cache_utilization": KV_CACHE}}
            self.send_header("endpoint-load-metrics", "JSON " + json.dumps(report, separators=(",", ":")))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def serving(cert: Path, key: Path, port: int = 0, header: str = FORMAT_HEADER) -> Iterator[str]:
    """The stand-in on 127.0.0.1 (port 0: a free one) in a thread, answering ``header``; yields its URL."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    handler = type("Answering", (TritonLike,), {"header": header})
    server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cert", type=Path, required=True)
    parser.add_argument("--key", type=Path, required=True)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument(
        "--header", default=FORMAT_HEADER, help=f"the request header it answers (default {FORMAT_HEADER})"
    )
    args = parser.parse_args()
    with serving(args.cert, args.key, args.port, args.header) as url:
        print(url, flush=True)
        threading.Event().wait()


if __name__ == "__main__":
    main()
