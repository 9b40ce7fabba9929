"""Memory per connection when every stream is a POST whose body never comes.

    python -m benchmarks.pending_bodies [--request-timeout 60s] [--connections 60] [--streams 100]
    python -m benchmarks.pending_bodies --bytecodes   # what BodyDeadline adds per request, deterministic

Starts one ``secure-orca serve`` (the secure_orca on PYTHONPATH, so an older tree can be measured the same
way: run it from that tree's root, ``-m secure_orca`` imports from the working directory; without
``--request-timeout`` the flag is not passed) and reads its RSS (VmRSS) idle, then after each wave of
``connections`` HTTP/2 connections that each open ``streams`` POSTs to selfsubjectreviews with headers and no
body (every connection's PING answered: the server has taken every stream). Earlier waves stay connected, so
a second wave shows whether the first one's memory was given back for reuse.
"""

from __future__ import annotations

import argparse
import asyncio
import ssl
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import h2.events

from secure_orca.credentials import devpki
from secure_orca.h2client import H2Loop, connect
from secure_orca.lab import replicas as launch
from secure_orca.lab.procfs import rss_kib

REVIEW = "/apis/authentication.k8s.io/v1/selfsubjectreviews"


class Connection:
    def __init__(self, replica: launch.Replica, context: ssl.SSLContext) -> None:
        self.sock = connect(replica.host, replica.port, context, timeout=30)
        self.loop = H2Loop(self.sock, on_event=self.event).open()
        self.answered = 0
        self.pinged = False
        self.closed = False  # by the server (hypercorn closes a connection idle for keep_alive_timeout)

    def open_posts(self, count: int) -> None:
        conn = self.loop.conn
        for _ in range(count):
            stream = conn.get_next_available_stream_id()
            headers = [(":method", "POST"), (":path", REVIEW), (":scheme", "https"), (":authority", "localhost")]
            conn.send_headers(stream, headers)
        self.loop.flush()

    def ping(self) -> None:
        """Send a PING and read until its ACK: the server has handled every frame sent before it."""
        self.pinged = False
        self.loop.conn.ping(b"12345678")
        self.loop.flush()
        while not self.pinged:
            self.read()

    def read(self) -> None:
        self.loop.read()
        if self.loop.eof:
            raise ConnectionError("the server closed the connection")

    def event(self, event: h2.events.Event) -> None:
        if isinstance(event, h2.events.PingAckReceived):
            self.pinged = True
        elif isinstance(event, h2.events.StreamEnded):
            self.answered += 1
        elif isinstance(event, h2.events.DataReceived):
            self.loop.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)

    def drain(self, until: float) -> None:
        self.sock.settimeout(0.05)
        while time.monotonic() < until and not self.closed:
            try:
                self.read()
            except TimeoutError:
                return
            except (ConnectionError, OSError):
                self.closed = True


def wave(replica: launch.Replica, context: ssl.SSLContext, args: argparse.Namespace) -> list[Connection]:
    """``connections`` new connections, each with ``streams`` body-less POSTs, all taken by the server."""
    connections = [Connection(replica, context) for _ in range(args.connections)]
    for connection in connections:
        connection.open_posts(args.streams)
    for connection in connections:
        connection.ping()
    return connections


def drain(connections: list[Connection], seconds: float) -> int:
    """Read answers for ``seconds`` (at least one pass); how many streams were answered so far."""
    until = time.monotonic() + seconds
    while True:
        for connection in connections:
            connection.drain(time.monotonic() + 0.05)
        if time.monotonic() >= until:
            return sum(c.answered for c in connections)


def measure(args: argparse.Namespace) -> None:
    total = args.connections * args.streams
    with tempfile.TemporaryDirectory() as tmp:
        dev = devpki.generate(Path(tmp) / "pki")
        extra = ["--request-timeout", args.request_timeout] if args.request_timeout else []
        flags = ["--requestheader-client-ca-file", str(dev.cert("front_proxy_ca")), *extra]
        with launch.replicas([launch.serve_argv(dev, flags, demo_work=False)]) as (replica,):
            pid = replica.process.popen.pid
            context = ssl.create_default_context(cafile=str(dev.cert("ca")))
            context.set_alpn_protocols(["h2"])
            time.sleep(1)
            before = rss_kib(pid)
            print(f"RSS idle: {before} KiB")
            held: list[Connection] = []
            for number in range(1, args.waves + 1):
                connections = wave(replica, context, args)
                held += connections
                answered = drain(connections, 1.0)
                loaded = rss_kib(pid)
                print(
                    f"wave {number}: {args.connections} connections x {args.streams} body-less POSTs (the earlier "
                    f"waves' connections still open): {loaded} KiB, +{(loaded - before) / args.connections:.0f} KiB "
                    f"per connection; {answered}/{total} answered 1 s after"
                )
                answered = drain(connections, args.wait_after)
                closed = sum(c.closed for c in connections)
                print(
                    f"  {args.wait_after:.0f} s later: {rss_kib(pid)} KiB; {answered}/{total} answered; "
                    f"{closed} connections closed by the server"
                )
                before = loaded
            for connection in held:
                connection.sock.close()


async def bytecodes(app: Any, scope: dict[str, Any]) -> int:
    """Bytecodes one request runs in ``app`` (sys.settrace opcode events), after one warm-up request."""
    count = 0

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        nonlocal count
        frame.f_trace_opcodes = True
        count += event == "opcode"
        return tracer

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def discard(message: dict[str, Any]) -> None:
        pass

    await app(scope, receive, discard)
    count = 0
    sys.settrace(tracer)
    await app(scope, receive, discard)
    sys.settrace(None)
    return count


async def cost() -> None:
    # imported here: the RSS measurement also runs against trees older than BodyDeadline
    from secure_orca.authn.user import UserInfo
    from secure_orca.server import demo
    from secure_orca.server.asgi import BodyDeadline
    from secure_orca.server.authentication import USER_KEY

    get: dict[str, Any] = {
        "type": "http",
        "http_version": "2",
        "method": "GET",
        "path": "/healthz",
        "headers": [],
        "client": ("127.0.0.1", 40000),
    }
    post = {**get, "method": "POST", "path": demo.SELF_SUBJECT_REVIEWS, USER_KEY: UserInfo("u")}
    try:  # as server.assembly builds it: the bound follows the caller's identity (the POST's user is "u")
        from secure_orca.server.authentication import is_authenticated

        guard = BodyDeadline(demo.app, authenticated=is_authenticated)
    except (ImportError, TypeError):  # a tree older than that
        guard = BodyDeadline(demo.app)
    for name, scope in (("GET /healthz (no body read)", get), ("POST selfsubjectreviews (body read)", post)):
        alone, wrapped = await bytecodes(demo.app, scope), await bytecodes(guard, scope)
        print(f"{name}: demo {alone} bytecodes, with BodyDeadline {wrapped} (+{wrapped - alone})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--request-timeout", default="", help="passed to serve when given")
    parser.add_argument("--connections", type=int, default=60)
    parser.add_argument("--streams", type=int, default=100)
    parser.add_argument("--wait-after", type=float, default=0.0, help="seconds to read answers after each wave")
    parser.add_argument("--waves", type=int, default=2, help="waves of connections, each kept open to the end")
    parser.add_argument("--bytecodes", action="store_true", help="only count what BodyDeadline adds per request")
    args = parser.parse_args()
    if args.bytecodes:
        asyncio.run(cost())
    else:
        measure(args)


if __name__ == "__main__":
    main()
