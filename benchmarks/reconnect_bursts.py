"""Another client's latency while a load balancer fleet reconnects: bursts of 40 ordinary new mTLS connections (the
front proxy's own certificate, X25519, one request each, opened at once by h2load) every 0.25 s, as a ratio to the
same client's latency without them, for ``serve --workers 1`` and ``--workers 2``, each on asyncio's loop and on
uvloop's (``benchmarks.workers.SERVES``), and the Go peer (benchmarks/gopeer), in one run.

    python -m benchmarks.reconnect_bursts [SECONDS] [ROUNDS]

The victim sends GET /healthz every 2 ms on one kept-alive connection, its latency taken from each request's
scheduled time (``handshake_flood.victim`` with a pace); each round measures it idle, then under bursts, on each
server in turn. Printed: p50 and p99 per row, and the p99 ratio (bursts over idle) per round, as median and
range.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path

from benchmarks.go_peer import go_peer
from benchmarks.handshake_flood import percentile, victim
from benchmarks.workers import SERVES, serve_argvs
from secure_orca import pki
from secure_orca.credentials import devpki
from secure_orca.lab import replicas as launch
from secure_orca.lab.loadgen import Identity, Load, build_shim, run_h2load

BURST = 40
PAUSE = 0.25  # seconds between bursts
PACE = 0.002  # the victim's request period


def bursts(replica: launch.Replica, dev: pki.DevPKI, stop: threading.Event, shim: Path, workdir: Path) -> None:
    """The fleet: h2load opens BURST connections at once (one process, non-blocking), one request each, with the
    front proxy's certificate; then a pause; until ``stop``."""
    identity = Identity("front-proxy", dev.cert("front_proxy_client"), dev.key("front_proxy_client"), "TEXT")
    while not stop.is_set():
        run_h2load(f"{replica.url}/healthz", Load(clients=BURST, streams=1, requests=BURST), identity, workdir, shim)
        stop.wait(PAUSE)


def measure(replica: launch.Replica, dev: pki.DevPKI, seconds: float, shim: Path | None) -> list[float]:
    """The victim's latencies, under bursts when a shim is given."""
    stop = threading.Event()
    with tempfile.TemporaryDirectory() as workdir:
        thread = threading.Thread(target=bursts, args=(replica, dev, stop, shim, Path(workdir)), daemon=True)
        if shim is not None:
            thread.start()
            time.sleep(0.5)
        try:
            return victim(replica, dev.cert("ca"), int(seconds / PACE), PACE)
        finally:
            stop.set()
            if shim is not None:
                thread.join(30)


def main(seconds: float = 3.0, rounds: int = 3) -> None:
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        dev = devpki.generate(Path(tmp) / "pki")
        shim = build_shim(Path(tmp))
        started = stack.enter_context(launch.replicas(serve_argvs(dev)))
        servers = dict(zip((name.strip("`") for name in SERVES), started, strict=True))
        servers["Go peer"] = stack.enter_context(go_peer(dev))
        ratios: dict[str, list[float]] = {name: [] for name in servers}
        rows = []
        for server in servers.values():
            victim(server, dev.cert("ca"), 50)  # warm up
        for round_ in range(rounds):
            for name, server in servers.items():
                idle = measure(server, dev, seconds, None)
                loaded = measure(server, dev, seconds, shim)
                ratios[name].append(percentile(loaded, 0.99) / percentile(idle, 0.99))
                rows.append((round_ + 1, name, idle, loaded))
                print(f"round {round_ + 1}/{rounds} {name}: p99 x{ratios[name][-1]:.2f}", flush=True)
    print(f"\nvictim: GET /healthz every {PACE * 1000:g} ms for {seconds:g} s per row; bursts of {BURST} new mTLS "
          f"connections (front proxy certificate, one request each) every {PAUSE} s\n")  # fmt: skip
    print("| round | server | idle p50 ms | idle p99 ms | bursts p50 ms | bursts p99 ms | p99 ratio |")
    print("|---|---|---|---|---|---|---|")
    for round_, name, idle, loaded in rows:
        print(
            f"| {round_} | `{name}` | {statistics.median(idle) * 1000:.2f} | {percentile(idle, 0.99) * 1000:.2f} "
            f"| {statistics.median(loaded) * 1000:.2f} | {percentile(loaded, 0.99) * 1000:.2f} "
            f"| x{percentile(loaded, 0.99) / percentile(idle, 0.99):.1f} |"
        )
    for name, values in ratios.items():
        print(f"\n`{name}`: p99 ratio median x{statistics.median(values):.1f} (x{min(values):.1f}–x{max(values):.1f})")


if __name__ == "__main__":
    arguments = sys.argv[1:]
    main(float(arguments[0]) if arguments else 3.0, int(arguments[1]) if len(arguments) > 1 else 3)
