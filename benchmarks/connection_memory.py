"""Memory per HTTP/2 connection that a client leaves with its response starved of window
(h2spec http2/6.9.1/1: SETTINGS_INITIAL_WINDOW_SIZE=1, one request, one byte read, then gone), for
``secure-orca serve`` and for plain hypercorn serving the same demo application.

    python -m benchmarks.connection_memory [CONNECTIONS]

Each server's resident set (VmRSS) is read after 20 warm-up connections and again after CONNECTIONS more,
each made and left one after the other, both read SETTLE seconds after the last connection (longer than
hypercorn's keep-alive timeout); the difference divided by CONNECTIONS is the memory each left behind.
"""

from __future__ import annotations

import socket
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import h2.events
import h2.settings

from secure_orca.credentials import devpki
from secure_orca.h2client import H2Loop, connect
from secure_orca.lab import replicas as launch
from secure_orca.lab.procfs import rss_kib

WARM_UP = 20
SETTLE = 7.0  # seconds: beyond hypercorn's 5 s keep-alive timeout, which may hold a finished connection


def starve_and_leave(host: str, port: int, context: ssl.SSLContext) -> None:
    with connect(host, port, context) as sock:
        loop = H2Loop(sock)
        loop.conn.initiate_connection()
        loop.conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 1})
        data: list[h2.events.Event] = []
        loop.on_event = lambda event: data.append(event) if isinstance(event, h2.events.DataReceived) else None
        loop.request([(":method", "GET"), (":path", "/version"), (":scheme", "https"), (":authority", "localhost")])
        loop.read_until(lambda: bool(data))


def per_connection(pid: int, host: str, port: int, context: ssl.SSLContext, connections: int) -> float:
    for _ in range(WARM_UP):
        starve_and_leave(host, port, context)
    time.sleep(SETTLE)
    before = rss_kib(pid)
    for _ in range(connections):
        starve_and_leave(host, port, context)
    time.sleep(SETTLE)
    return (rss_kib(pid) - before) / connections


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def main(connections: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        dev = devpki.generate(Path(tmp) / "pki")
        context = ssl.create_default_context(cafile=str(dev.cert("ca")))
        context.set_alpn_protocols(["h2"])
        results: dict[str, float] = {}
        with launch.replicas([launch.serve_argv(dev)]) as (replica,):
            pid = replica.process.popen.pid
            results["secure-orca serve"] = per_connection(pid, replica.host, replica.port, context, connections)
        port = free_port()
        tls = ["--certfile", str(dev.cert("server")), "--keyfile", str(dev.key("server"))]
        argv = [sys.executable, "-m", "hypercorn", "--bind", f"127.0.0.1:{port}", *tls, "secure_orca.server.demo:app"]
        plain = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            for _ in range(100):  # until it listens
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    time.sleep(0.1)
            results["plain hypercorn 0.18"] = per_connection(plain.pid, "127.0.0.1", port, context, connections)
        finally:
            plain.terminate()
            plain.wait(10)
        print(f"connections: {connections} (after {WARM_UP} warm-up), h2spec http2/6.9.1/1 pattern")
        for name, kib in results.items():
            print(f"{name:22s} {kib:8.1f} KiB of RSS left per connection")
        serve, hypercorn = results["secure-orca serve"], results["plain hypercorn 0.18"]
        if hypercorn > 0:
            print(f"ratio serve / plain hypercorn: {serve / hypercorn:.2f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 300)
