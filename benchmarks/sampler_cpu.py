"""Section 4: CPU used by the load sampler with the server idle, at several intervals.

Two accountings, both over the same fixed wall-clock window for every interval at once:

- in process: the sampler's own accounting of its ticks (``Sampler.cpu_seconds``, the event loop thread's CPU
  clock read around each tick, nanoseconds);
- per replica: ``utime + stime`` of idle ``secure-orca serve`` processes from ``/proc/<pid>/stat`` (clock
  ticks), minus that of an idle feature-off replica (no sampler) over the same window.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from secure_orca.lab import replicas as launch
from secure_orca.lab.procfs import CLOCK_TICK, process_cpu
from secure_orca.server.sampler import Sampler

from .common import BenchPKI, Spread, markdown_table

INTERVALS = {"10ms": 0.01, "100ms": 0.1, "1s": 1.0}
TARGET_100MS = 0.005  # CPU seconds per second (0.5% of one core)


def in_process(rounds: int, window: float) -> dict[str, Any]:
    """Samplers of every interval tick together on one event loop (in a thread, as in the server); each window
    is measured by their own accounting of the CPU their ticks used."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="bench-sampler-loop", daemon=True)
    thread.start()
    samplers = {name: Sampler(interval) for name, interval in INTERVALS.items()}
    for sampler in samplers.values():
        asyncio.run_coroutine_threadsafe(_start(sampler), loop).result(timeout=10)
    per_round: list[dict[str, float]] = []
    ticks: dict[str, int] = dict.fromkeys(INTERVALS, 0)
    cpu_total: dict[str, float] = dict.fromkeys(INTERVALS, 0.0)
    try:
        for _ in range(rounds):
            t0 = time.monotonic()
            cpu0 = {name: sampler.cpu_seconds for name, sampler in samplers.items()}
            ticks0 = {name: sampler.ticks for name, sampler in samplers.items()}
            time.sleep(window)
            elapsed = time.monotonic() - t0
            row = {}
            for name, sampler in samplers.items():
                used = sampler.cpu_seconds - cpu0[name]
                row[name] = used / elapsed
                cpu_total[name] += used
                ticks[name] += sampler.ticks - ticks0[name]
            per_round.append(row)
    finally:
        for sampler in samplers.values():
            loop.call_soon_threadsafe(sampler.stop)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()
    return {
        "cpu_per_second": {name: Spread.of([r[name] for r in per_round]) for name in INTERVALS},
        "us_per_tick": {name: cpu_total[name] / max(1, ticks[name]) * 1e6 for name in INTERVALS},
        "ticks": ticks,
    }


async def _start(sampler: Sampler) -> None:
    sampler.start()


def replicas(bench: BenchPKI, rounds: int, window: float) -> dict[str, Any]:
    """Idle replicas (feature off, and on at each interval) measured together over the same windows."""
    argvs = [bench.serve_argv(enabled=False)] + [bench.serve_argv(enabled=True, interval=n) for n in INTERVALS]
    names = ["off", *INTERVALS]
    per_round: list[dict[str, float]] = []
    with launch.replicas(argvs) as started:
        pids = {name: replica.process.popen.pid for name, replica in zip(names, started, strict=True)}
        time.sleep(min(window, 2.0))  # let start-up work (imports, first tick) settle
        for _ in range(rounds):
            t0, cpu0 = time.monotonic(), {name: process_cpu(pid) for name, pid in pids.items()}
            time.sleep(window)
            elapsed = time.monotonic() - t0
            per_round.append({name: (process_cpu(pid) - cpu0[name]) / elapsed for name, pid in pids.items()})
    return {
        "cpu_per_second": {name: Spread.of([r[name] for r in per_round]) for name in names},
        "net_of_off": {name: Spread.of([r[name] - r["off"] for r in per_round]) for name in INTERVALS},
        "resolution": 1 / CLOCK_TICK / window,
    }


def run(bench: BenchPKI, rounds: int, window: float) -> dict[str, Any]:
    return {
        "rounds": rounds,
        "window_s": window,
        "in_process": in_process(rounds, window),
        "replicas": replicas(bench, rounds, window),
    }


def _pct(value: float) -> str:
    return f"{value * 100:.3f}%"


def render(result: dict[str, Any]) -> str:
    inner, outer = result["in_process"], result["replicas"]
    rows = []
    for name in INTERVALS:
        spread = inner["cpu_per_second"][name]
        rows.append(
            [
                name,
                f"{_pct(spread.median)} [{_pct(spread.low)}, {_pct(spread.high)}]",
                f"{inner['us_per_tick'][name]:.0f}",
                _pct(outer["cpu_per_second"][name].median),
                _pct(outer["net_of_off"][name].median),
                "—" if name != "100ms" else "yes" if spread.median < TARGET_100MS else "**no**",
            ]
        )
    header = [
        "interval",
        "sampler tick CPU (of one core)",
        "µs CPU per tick",
        "idle replica CPU",
        "replica minus feature-off",
        "< 0.5% at 100 ms",
    ]
    return (
        f"{markdown_table(header, rows)}\n\n"
        f"Median [min, max] over {result['rounds']} windows of {result['window_s']:g} s; idle feature-off replica: "
        f"{_pct(outer['cpu_per_second']['off'].median)}. /proc/<pid>/stat counts clock ticks, so replica figures "
        f"resolve {_pct(outer['resolution'])} of a core per window; the tick accounting resolves nanoseconds."
    )
