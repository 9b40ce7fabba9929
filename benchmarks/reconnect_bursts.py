"""Another client's latency while a load balancer fleet reconnects: bursts of 40 ordinary new mTLS connections (the
front proxy's own certificate, X25519, one request each, opened at once by h2load) every 0.25 s, as a ratio to the
same client's latency without them, and to the Go peer's (benchmarks/gopeer) p99 under the same bursts in the same
round, for ``serve --workers 1`` and ``--workers 2`` on asyncio's loop, each with its handshake steps on the loop
(``--tls-handshake-threads 0``) and in the default pool, in one run (``--uvloop`` adds uvloop's rows).

    python -m benchmarks.reconnect_bursts [SECONDS] [ROUNDS] [--uvloop]

The victim sends GET /healthz every 2 ms on one kept-alive connection, its latency taken from each request's
scheduled time (``handshake_flood.victim`` with a pace); each round measures it idle, then under bursts, on each
server in turn. Printed: p50 and p99 per row, the p99 ratio (bursts over idle) per round, and the bursts p99 over
the Go peer's, as median and range.
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
from benchmarks.workers import SERVES
from secure_orca import pki
from secure_orca.credentials import devpki
from secure_orca.lab import launcher as lb
from secure_orca.lab import replicas as launch
from secure_orca.lab.loadgen import Identity, Load, build_shim, run_h2load

BURST = 40
PAUSE = 0.25  # seconds between bursts
PACE = 0.002  # the victim's request period
GO = "Go peer"


def rows(uvloop: bool) -> dict[str, list[str]]:
    """Each server's name and ``serve`` flags: workers 1 and 2, handshake steps on the loop and in the pool."""
    out = {
        f"serve --workers {n}{' --tls-handshake-threads 0' if threads == '0' else ''}": [
            "--workers",
            n,
            "--tls-handshake-threads",
            threads,
        ]
        for n in ("1", "2")
        for threads in ("0", "2")
    }
    if uvloop:
        out |= {name.strip("`"): ["--workers", n, "--event-loop", loop] for name, (n, loop) in SERVES.items()}
    return out


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


def main(seconds: float = 3.0, rounds: int = 3, uvloop: bool = False) -> None:
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        dev = devpki.generate(Path(tmp) / "pki")
        shim = build_shim(Path(tmp))
        flags = rows(uvloop)
        argvs = [
            launch.serve_argv(dev, lb.replica_flags(dev, "front-proxy", *extra), demo_work=False)
            for extra in flags.values()
        ]
        started = stack.enter_context(launch.replicas(argvs))
        servers = dict(zip(flags, started, strict=True))
        servers[GO] = stack.enter_context(go_peer(dev))
        ratios: dict[str, list[float]] = {name: [] for name in servers}
        versus_go: dict[str, list[float]] = {name: [] for name in servers}
        rows_ = []
        for server in servers.values():
            victim(server, dev.cert("ca"), 50)  # warm up
        for round_ in range(rounds):
            burst_p99: dict[str, float] = {}
            for name, server in servers.items():
                idle = measure(server, dev, seconds, None)
                loaded = measure(server, dev, seconds, shim)
                burst_p99[name] = percentile(loaded, 0.99)
                ratios[name].append(burst_p99[name] / percentile(idle, 0.99))
                rows_.append((round_ + 1, name, idle, loaded))
                print(f"round {round_ + 1}/{rounds} {name}: p99 x{ratios[name][-1]:.2f}", flush=True)
            for name, p99 in burst_p99.items():
                versus_go[name].append(p99 / burst_p99[GO])
    print(
        f"\nvictim: GET /healthz every {PACE * 1000:g} ms for {seconds:g} s per row; bursts of {BURST} new mTLS "
        f"connections (front proxy certificate, one request each) every {PAUSE} s\n"
    )
    print("| round | server | idle p50 ms | idle p99 ms | bursts p50 ms | bursts p99 ms | p99 ratio |")
    print("|---|---|---|---|---|---|---|")
    for round_, name, idle, loaded in rows_:
        print(
            f"| {round_} | `{name}` | {statistics.median(idle) * 1000:.2f} | {percentile(idle, 0.99) * 1000:.2f} "
            f"| {statistics.median(loaded) * 1000:.2f} | {percentile(loaded, 0.99) * 1000:.2f} "
            f"| x{percentile(loaded, 0.99) / percentile(idle, 0.99):.1f} |"
        )
    for name, values in ratios.items():
        go = versus_go[name]
        print(
            f"\n`{name}`: p99 ratio median x{statistics.median(values):.1f} (x{min(values):.1f}–x{max(values):.1f}); "
            f"bursts p99 over the Go peer's: median x{statistics.median(go):.2f} (x{min(go):.2f}–x{max(go):.2f})"
        )


if __name__ == "__main__":
    arguments = [a for a in sys.argv[1:] if a != "--uvloop"]
    main(
        float(arguments[0]) if arguments else 3.0,
        int(arguments[1]) if len(arguments) > 1 else 3,
        "--uvloop" in sys.argv[1:],
    )
