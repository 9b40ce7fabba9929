"""The event loop's own CPU per new connection, with the handshake steps on the loop and in the pool.

    python -m benchmarks.connection_loop_work [BURSTS] [ROUNDS] [--profile]

An in-process ``serve`` (front proxy configured, as ``benchmarks.reconnect_bursts``) takes BURSTS bursts of 40
new mTLS connections, one request each (h2load with the front proxy's certificate), with
``--tls-handshake-threads 0`` and with the default pool, alternately for ROUNDS rounds (medians printed). The loop
thread's CPU time (``time.thread_time`` read on the loop) and the whole process's (``/proc/self/schedstat`` of
every thread) are read before and after, per connection: the first is what still delays other connections'
requests, the difference what ran in the pool.
``--profile`` adds the loop thread's cProfile on its CPU clock (own time, top functions) for each run: where what
is left goes (cProfile inflates Python calls; read it as shares).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.common import inprocess_server
from benchmarks.profile import component
from secure_orca.credentials import devpki
from secure_orca.lab import launcher as lb
from secure_orca.lab import replicas as launch
from secure_orca.lab.loadgen import Identity, Load, build_shim, run_h2load
from secure_orca.lab.procfs import process_cpu_schedstat
from secure_orca.pki import DevPKI

BURST = 40


def on_loop_cpu(loop: asyncio.AbstractEventLoop) -> float:
    """The loop thread's CPU seconds so far, read on the loop."""
    return asyncio.run_coroutine_threadsafe(_thread_time(), loop).result(10)


async def _thread_time() -> float:
    return time.thread_time()


def measure(argv: list[str], dev: DevPKI, bursts: int, shim: Path, profile: bool) -> tuple[float, float]:
    """(loop CPU, process CPU) microseconds per connection."""
    identity = Identity("front-proxy", dev.cert("front_proxy_client"), dev.key("front_proxy_client"), "TEXT")
    profiler = cProfile.Profile(time.thread_time) if profile else None  # the loop thread's CPU, not GIL waits
    load = Load(clients=BURST, streams=1, requests=BURST)
    with inprocess_server(argv, profiler=profiler) as server, tempfile.TemporaryDirectory() as work:
        url = f"https://127.0.0.1:{server.port}/healthz"
        run_h2load(url, load, identity, Path(work), shim)  # warm up
        loop = server.loop
        assert loop is not None
        loop_before, process_before = on_loop_cpu(loop), process_cpu_schedstat(os.getpid())
        for _ in range(bursts):
            run_h2load(url, load, identity, Path(work), shim)
        loop_after, process_after = on_loop_cpu(loop), process_cpu_schedstat(os.getpid())
    if profiler is not None:
        own: dict[str, float] = {}
        for (filename, _line, function), (_cc, _nc, tottime, _ct, _callers) in pstats.Stats(profiler).stats.items():  # type: ignore[attr-defined]
            key = component(filename, function)
            own[key] = own.get(key, 0.0) + tottime
        total = sum(own.values()) or 1.0
        threads = argv[argv.index("--tls-handshake-threads") + 1]
        for key, seconds in sorted(own.items(), key=lambda item: -item[1]):
            print(f"  threads {threads}: {seconds / total * 100:5.1f}%  {key}")
    connections = bursts * BURST
    return (loop_after - loop_before) / connections * 1e6, (process_after - process_before) / connections * 1e6


def main(bursts: int, rounds: int, profile: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        dev = devpki.generate(Path(tmp) / "pki")
        shim = build_shim(Path(tmp))
        base = launch.serve_argv(dev, lb.replica_flags(dev, "front-proxy"), demo_work=False)
        results: dict[str, list[tuple[float, float]]] = {"0": [], "2": []}
        for _ in range(rounds):
            for threads, runs in results.items():
                runs.append(measure([*base, "--tls-handshake-threads", threads], dev, bursts, shim, profile))
        for threads, runs in results.items():
            on_loop = statistics.median(run[0] for run in runs)
            in_all = statistics.median(run[1] for run in runs)
            print(
                f"--tls-handshake-threads {threads}: {on_loop:.0f} us of loop CPU per new connection, "
                f"{in_all:.0f} us in the whole process (median of {rounds} rounds of {bursts} bursts of {BURST}; "
                f"loop: {', '.join(f'{run[0]:.0f}' for run in runs)})"
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="the event loop's own CPU per new connection")
    parser.add_argument("bursts", type=int, nargs="?", default=10)
    parser.add_argument("rounds", type=int, nargs="?", default=3)
    parser.add_argument("--profile", action="store_true")
    options = parser.parse_args()
    main(options.bursts, options.rounds, options.profile)
