"""Staleness: how long a load step on one replica takes to move Envoy's weight for it, in band against out of band
(docs/out-of-band.md). Wall clock, so a rough figure on a shared machine: read it as an order of magnitude.

    python -m benchmarks.oob_staleness --rates 2,20 --periods 1,0.2

Two replicas (load-reader option) behind Envoy 1.40 with test timing (weights recomputed every 0.1 s); load-balanced
traffic at a fixed rate through Envoy (h2load, one client, ``--rps``, ``/work?cpu_ms=20``); after 6 s of it and a
weight from reports for the replica, it gets a CPU step that adds almost no requests (``/work?cpu_ms=800`` at 1 rps,
directly). Envoy's ``/clusters`` is read every 50 ms; the staleness is the time from the step until the replica's
weight falls to ``DROP`` of what it was at the step (CSWRR's weight is qps / utilization: a step made of many
requests would raise the qps too and hide itself, hence one heavy request a second). In band, reports arrive with
responses, so at the traffic rate; out of band, every ``oob_reporting_period``. The sampler's own rate window
(1 s) is in both. Each cell is the median of ``--repeats`` runs.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from secure_orca import pki
from secure_orca.credentials import devpki
from secure_orca.envoy import bootstrap as envoy
from secure_orca.lab import launcher as lb
from secure_orca.lab import replicas as launch

POLL = 0.05
DROP = 0.6  # the weight has moved once it is at most this fraction of its value at the step
LB_CPU_MS = 20  # each load-balanced request: enough CPU that an idle replica reports utilization above 0.00
STEP_CPU_MS = 800  # the step: one direct request per second burning 0.8 s of CPU (utilization up, qps nearly not)
LIMIT = 20.0  # seconds to wait for the weight to move


def h2load(url: str, rps: float, seconds: float) -> subprocess.Popen[bytes]:
    rate = max(1, round(rps))
    argv = ["h2load", "-c1", "-m1", f"--rps={rate}", f"-D{int(seconds)}", url]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def staleness(dev: pki.DevPKI, rps: float, period: float | None) -> float | None:
    """Seconds from the load step until the loaded replica's weight is at most DROP of its value at the step
    (None: not within LIMIT)."""
    extra = ("--endpoint-load-metrics-oob-min-interval", "100ms")
    argvs = [launch.serve_argv(dev, lb.replica_flags(dev, "load-reader", *extra)) for _ in range(2)]
    settings: dict[str, Any] = {"option": "load-reader", "timing": envoy.TEST_TIMING, "oob_period": period}
    with lb.deployment(dev, argvs, **settings) as d:
        hot = d.replicas[0]
        traffic = h2load(f"{d.envoy.url}/work?cpu_ms={LB_CPU_MS}", rps, 16 + LIMIT + 2)
        try:
            time.sleep(6)
            deadline = time.monotonic() + 10
            while (before := d.envoy.host(hot.port).weight) <= 1 and time.monotonic() < deadline:
                time.sleep(POLL)  # no weight yet (a report of zero utilization gives none)
            if before <= 1:
                raise RuntimeError("no weight from reports before the step")
            step = time.monotonic()
            hot_load = h2load(f"{hot.url}/work?cpu_ms={STEP_CPU_MS}", 1, LIMIT + 2)
            try:
                while time.monotonic() - step < LIMIT:
                    if d.envoy.host(hot.port).weight <= DROP * before:
                        return time.monotonic() - step
                    time.sleep(POLL)
                return None
            finally:
                hot_load.terminate()
                hot_load.wait(10)
        finally:
            traffic.terminate()
            traffic.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="2,20", help="load-balanced requests per second (list)")
    parser.add_argument("--periods", default="1,0.2", help="out-of-band reporting periods in seconds (list)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    rates = [float(r) for r in args.rates.split(",")]
    periods = [float(p) for p in args.periods.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        dev = devpki.generate(Path(tmp))
        print("mode          LB rps   period   staleness_s (median; runs)")
        for rate in rates:
            for period in [None, *periods]:
                runs = [staleness(dev, rate, period) for _ in range(args.repeats)]
                moved = sorted(r for r in runs if r is not None)
                median = f"{statistics.median(moved):.2f}" if len(moved) > len(runs) // 2 else f">{LIMIT:g}"
                shown = ", ".join("-" if r is None else f"{r:.2f}" for r in runs)
                mode = "in band    " if period is None else "out of band"
                print(
                    f"{mode}  {rate:7g}  {'-' if period is None else f'{period:g}':>7}   {median} ({shown})", flush=True
                )


if __name__ == "__main__":
    main()
