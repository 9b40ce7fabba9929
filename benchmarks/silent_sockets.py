"""Silent sockets against ``secure-orca serve --workers 1``: TCP connections from 127.0.0.2 that never send a byte.

    python -m benchmarks.silent_sockets [SOCKETS] [SERVE FLAGS...]

1. Memory: the server's resident set (VmRSS) before and after SOCKETS silent connections, once the kernel's queue
   is empty, per connection; and how many the server still holds (the rest were given up by the caps).
2. Descriptors: the server under ``prlimit --nofile=1024:1024`` and 2,200 silent connections; five load-balancer
   connections from 127.0.0.1 (TLS handshake and GET /healthz over HTTP/2), each one's time to its response.
3. The worst a pending handshake can hold: SOCKETS connections that each send the first record of a ClientHello
   declaring OpenSSL's largest (131,396 bytes, ``CLIENT_HELLO_MAX_LENGTH``), then nothing; OpenSSL grows its
   message buffer to the declared length. RSS per connection, read within the ClientHello deadline (pass caps
   above SOCKETS to have them all held).

Run it from another tree (``PYTHONPATH=...``) to compare; extra arguments go to ``serve`` (e.g. caps).
"""

from __future__ import annotations

import resource
import socket
import ssl
import sys
import tempfile
import time
from pathlib import Path

import httpx

from secure_orca.credentials import devpki
from secure_orca.lab import replicas as launch
from secure_orca.lab.procfs import rss_kib
from secure_orca.lab.sockets import connections, settle, silent_sockets

DESCRIPTORS = 1024  # a container's common RLIMIT_NOFILE
SILENT_UNDER_LIMIT = 2200

TRIES = 5
CLIENT_HELLO_MAX_LENGTH = 131_396  # OpenSSL's (ssl/statem/statem_local.h)
RECORD = 2**14


def stalled_hello() -> bytes:
    """A TLS record holding the first 16 KiB of a ClientHello that declares CLIENT_HELLO_MAX_LENGTH bytes."""
    body = bytes([1]) + CLIENT_HELLO_MAX_LENGTH.to_bytes(3, "big") + bytes(RECORD - 4)
    return bytes([22, 3, 1]) + len(body).to_bytes(2, "big") + body


def worst_pending(replica: launch.Replica, ca: Path, count: int) -> tuple[float, int]:
    """KiB of RSS per connection holding a stalled ClientHello, and how many the server holds."""
    pid = replica.process.popen.pid
    lb_seconds(replica, ca)
    time.sleep(0.5)
    before = rss_kib(pid)
    record = stalled_hello()
    with silent_sockets(replica.port, count) as sockets:
        for sock in sockets:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 2 * len(record))
            sock.sendall(record)
        settle(replica.port, 3)
        grown = rss_kib(pid) - before
        return grown / count, connections([pid], replica.port)[pid]


def lb_seconds(replica: launch.Replica, ca: Path) -> float | None:
    """One new connection and GET /healthz; seconds to the response, None when it failed within 10 s."""
    context = ssl.create_default_context(cafile=str(ca))
    started = time.monotonic()
    try:
        with httpx.Client(verify=context, http2=True, timeout=10) as client:
            client.get(replica.url + "/healthz").raise_for_status()
    except httpx.HTTPError:
        return None
    return time.monotonic() - started


def main(count: int, flags: list[str]) -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    with tempfile.TemporaryDirectory() as tmp:
        dev = devpki.generate(Path(tmp) / "pki")
        with launch.replicas([launch.serve_argv(dev, flags)]) as (replica,):
            pid = replica.process.popen.pid
            lb_seconds(replica, dev.cert("ca"))
            time.sleep(0.5)
            before = rss_kib(pid)
            with silent_sockets(replica.port, count):
                queued = settle(replica.port, 30)
                grown = rss_kib(pid) - before
                held = connections([pid], replica.port)[pid]
        per = grown / count
        print(f"{count} silent sockets: {grown} KiB of RSS, {per:.1f} KiB per socket; held: {held}, queued: {queued}")
        argv = ["prlimit", f"--nofile={DESCRIPTORS}:{DESCRIPTORS}", "--", *launch.serve_argv(dev, flags)]
        with launch.replicas([argv]) as (replica,), silent_sockets(replica.port, SILENT_UNDER_LIMIT):
            settle(replica.port, 10)
            times = [lb_seconds(replica, dev.cert("ca")) for _ in range(TRIES)]
        shown = ", ".join("timed out (10 s)" if t is None else f"{t * 1000:.0f} ms" for t in times)
        print(f"RLIMIT_NOFILE {DESCRIPTORS}, {SILENT_UNDER_LIMIT} silent sockets: load balancer connections: {shown}")
        with launch.replicas([launch.serve_argv(dev, flags)]) as (replica,):
            kib, held = worst_pending(replica, dev.cert("ca"), count)
        print(f"{count} stalled ClientHellos: {kib:.1f} KiB of RSS per connection; held: {held}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 400, sys.argv[2:])
