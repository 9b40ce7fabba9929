"""Proxied GET requests per gateway CPU-second beside the demo path, in one run (issue 39's target: at least half).

    python -m benchmarks.proxy_cost [ROUNDS] [SECONDS]

One ``serve --workers 1`` with ``--proxy /v1=<backend>/v1``, the backend the vLLM-like stand-in
(``tests/live/vllm_like.py``, its own process: its CPU is not the gateway's). h2load ``-c4 -m10`` (the issue's
load) presents the front-proxy certificate with the opt-in; interleaved rounds on ``/version`` (the demo path,
answered by the gateway itself) and ``/v1/models`` (proxied). The gateway's CPU is read from procfs; each
figure is printed as its median and range over the rounds, the ratio taken round by round.
"""

from __future__ import annotations

import contextlib
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from benchmarks.common import tree_cpu
from secure_orca.credentials import devpki
from secure_orca.lab import launcher as lb
from secure_orca.lab import replicas as launch
from secure_orca.lab.loadgen import Identity, Load, build_shim, run_h2load

LOAD = Load(clients=4, streams=10)
PATHS = {"demo path `/version`": "/version", "proxied `/v1/models`": "/v1/models"}
ROOT = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def stand_in() -> Iterator[str]:
    """The vLLM-like stand-in as its own process: its URL."""
    port = launch.free_port()
    argv = [sys.executable, "-m", "tests.live.vllm_like", "--port", str(port)]
    process = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            if time.monotonic() > deadline:
                raise RuntimeError("the stand-in did not start")
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=10)


def main(rounds: int = 5, seconds: float = 5.0) -> None:
    with tempfile.TemporaryDirectory() as tmp, stand_in() as backend:
        dev = devpki.generate(Path(tmp) / "pki")
        flags = lb.replica_flags(dev, "front-proxy", "--proxy", f"/v1={backend}/v1")
        identity = Identity("front-proxy", dev.cert("front_proxy_client"), dev.key("front_proxy_client"), "TEXT")
        shim = build_shim(Path(tmp))
        load = Load(LOAD.clients, LOAD.streams, duration=seconds, warmup=1.0)
        figures: dict[str, list[tuple[float, float]]] = {name: [] for name in PATHS}
        with launch.replicas([launch.serve_argv(dev, flags, demo_work=False)]) as (gateway,):
            pid = gateway.process.popen.pid
            for round_ in range(rounds):
                for name, path in PATHS.items():
                    before = tree_cpu(pid)
                    result = run_h2load(gateway.url + path, load, identity, Path(tmp), shim)
                    cpu = tree_cpu(pid) - before
                    per_cpu = result.rps / (cpu / (seconds + 1.0))  # as benchmarks/workers.py: CPUs busy over the run
                    figures[name].append((result.rps, per_cpu))
                    print(
                        f"round {round_ + 1}/{rounds}, {name}: {result.rps:,.0f} req/s, "
                        f"{per_cpu:,.0f} per CPU-second, {result.failed} failed",
                        flush=True,
                    )
    print(f"\nh2load {LOAD.label} -t 1, {seconds:g} s per run (+1 s warm-up), {rounds} interleaved rounds\n")
    print("| path | req/s median (range) | requests per gateway CPU-second, median (range) |")
    print("|---|---|---|")
    for name, rows in figures.items():
        rps = [r for r, _ in rows]
        each = [c for _, c in rows]
        print(
            f"| {name} | {statistics.median(rps):,.0f} ({min(rps):,.0f}–{max(rps):,.0f}) | "
            f"{statistics.median(each):,.0f} ({min(each):,.0f}–{max(each):,.0f}) |"
        )
    demo, proxied = ([c for _, c in figures[name]] for name in PATHS)
    ratios = [p / d for p, d in zip(proxied, demo, strict=True)]
    print(
        f"\nproxied over demo, per CPU-second, round by round: x{statistics.median(ratios):.2f} "
        f"(x{min(ratios):.2f}–x{max(ratios):.2f}); target at least x0.50"
    )


if __name__ == "__main__":
    main(*(int(sys.argv[1]),) if len(sys.argv) > 1 else (), *(float(sys.argv[2]),) if len(sys.argv) > 2 else ())
