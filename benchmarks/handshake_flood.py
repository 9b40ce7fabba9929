"""Another client's latency while anonymous clients flood the server with handshakes (the
audit's scale: 40 connections), as a ratio to the same client's latency without them, in one run.

    python -m benchmarks.handshake_flood [REQUESTS]

The victim sends REQUESTS sequential GET /healthz on one kept-alive HTTP/1.1 connection; its p50 and p99 are
taken with no attacker, then while bursts of 40 simultaneous handshakes (40 threads released together, each
opening a new connection and sending no request, a burst every PAUSE seconds) offer one choice: the audit's
ffdhe8192-only ClientHello (refused now), and the dearest choice left (P-384, TLS 1.3). Handshakes are
counted. Target: p99 within 2x of no attacker. (A flood without pauses is a connection-rate
attack that no handshake policy bounds; not measured here.)
"""

from __future__ import annotations

import socket
import ssl
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from secure_orca.credentials import devpki
from secure_orca.lab import replicas as launch
from secure_orca.server.http import tls_policy

ATTACKERS = 40
PAUSE = 0.2  # seconds between bursts


def victim(replica: launch.Replica, ca: Path, requests: int, pace: float = 0.0) -> list[float]:
    """REQUESTS GET /healthz on one kept-alive connection: back to back, or one every ``pace`` seconds with each
    latency taken from the request's scheduled time (a stall then counts for every request it delays)."""
    context = ssl.create_default_context(cafile=str(ca))
    context.set_alpn_protocols(["http/1.1"])
    latencies = []
    with context.wrap_socket(socket.create_connection((replica.host, replica.port)), server_hostname="localhost") as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        start = time.perf_counter()
        for i in range(requests):
            started = start + i * pace if pace else time.perf_counter()
            time.sleep(max(0.0, started - time.perf_counter()))
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
            data = b""
            while not data.endswith(b"ok"):  # the demo's /healthz body
                data += s.recv(65536)
            latencies.append(time.perf_counter() - started)
    return latencies


def attack(
    replica: launch.Replica, ca: Path, group: str, stop: threading.Event, burst: threading.Barrier, counts: list[int]
) -> None:
    context = ssl.create_default_context(cafile=str(ca))
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    tls_policy.restrict_groups(context, (group,))
    while not stop.is_set():
        try:
            if burst.wait(timeout=10) == 0:
                time.sleep(PAUSE)  # one thread paces the bursts
            burst.wait(timeout=10)
        except threading.BrokenBarrierError:
            return
        raw = socket.create_connection((replica.host, replica.port))
        try:
            context.wrap_socket(raw, server_hostname="localhost").close()
            counts[0] += 1
        except ssl.SSLError:
            counts[1] += 1
        except OSError:
            pass
        finally:
            raw.close()


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def main(requests: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        dev = devpki.generate(Path(tmp) / "pki")
        ca = dev.cert("ca")
        with launch.replicas([launch.serve_argv(dev)]) as (replica,):
            victim(replica, ca, 50)  # warm up
            rows = []
            for group in (None, "ffdhe8192", "P-384", None):
                stop, counts, burst = threading.Event(), [0, 0], threading.Barrier(ATTACKERS)
                threads = [
                    threading.Thread(target=attack, args=(replica, ca, group, stop, burst, counts), daemon=True)
                    for _ in range(ATTACKERS if group else 0)
                ]
                for thread in threads:
                    thread.start()
                time.sleep(0.5 if group else 0)
                latencies = victim(replica, ca, requests)
                stop.set()
                burst.abort()
                for thread in threads:
                    thread.join(10)
                rows.append((group or "none", statistics.median(latencies), percentile(latencies, 0.99), counts))
        base_p50 = statistics.median([p50 for name, p50, _, _ in rows if name == "none"])
        base_p99 = statistics.median([p99 for name, _, p99, _ in rows if name == "none"])
        print(
            f"victim: {requests} sequential GET /healthz per row; attackers: bursts of {ATTACKERS} TLS 1.3 "
            f"handshakes every {PAUSE} s"
        )
        print("| attackers offer | handshakes done / refused | victim p50 ms | p99 ms | p50 ÷ none | p99 ÷ none |")
        print("|---|---|---|---|---|---|")
        for name, p50, p99, (done, refused) in rows:
            print(
                f"| {name} | {done} / {refused} | {p50 * 1000:.2f} | {p99 * 1000:.2f} | {p50 / base_p50:.2f} | "
                f"{p99 / base_p99:.2f} |"
            )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 400)
