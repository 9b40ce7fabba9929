"""``serve --workers 1`` against ``--workers 2``, each on asyncio's loop and on uvloop's (``--event-loop``), and
the Go peer (benchmarks/gopeer), side by side in one run: requests/s, server CPU-seconds and requests per
CPU-second, from h2load presenting the front-proxy certificate with the opt-in on /healthz.

    python -m benchmarks.workers [ROUNDS] [SECONDS] [--beside DIR]

``--beside DIR`` adds ``serve --workers 1`` and ``--workers 2`` on asyncio's loop run from another tree of this
project (DIR: an unpacked ``git archive`` of an earlier commit, put first on PYTHONPATH for the server and its
workers), with each of this tree's rows' ratios over it.

All servers run for the whole run and are measured in interleaved rounds (the others idle while one is
loaded); the server's CPU is read from procfs for the supervisor and all its workers. Each figure is printed
as its median and range over the rounds, and the ratio is taken round by round.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path

from benchmarks.common import tree_cpu
from benchmarks.go_peer import go_peer
from secure_orca.credentials import devpki
from secure_orca.lab import launcher as lb
from secure_orca.lab import replicas as launch
from secure_orca.lab.loadgen import Identity, Load, build_shim, run_h2load
from secure_orca.orca.headers import OPTIN
from secure_orca.pki import DevPKI

LOAD = Load(clients=8, streams=10)
# label -> (--workers, --event-loop)
SERVES = {
    "`serve --workers 1`": ("1", "asyncio"),
    "`serve --workers 2`": ("2", "asyncio"),
    "`serve --workers 1 --event-loop uvloop`": ("1", "uvloop"),
    "`serve --workers 2 --event-loop uvloop`": ("2", "uvloop"),
}
NAMES = tuple(SERVES)
GO = "Go net/http peer"
# (measured, against): the ratios printed
RATIOS = ((NAMES[1], NAMES[0]), (NAMES[2], NAMES[0]), (NAMES[3], NAMES[1]), (GO, NAMES[1]), (GO, NAMES[3]))


def serve_argvs(dev: DevPKI) -> list[list[str]]:
    """One front-proxy replica per row of SERVES."""
    return [
        launch.serve_argv(
            dev, lb.replica_flags(dev, "front-proxy", "--workers", n, "--event-loop", loop), demo_work=False
        )
        for n, loop in SERVES.values()
    ]


def identity_of(dev: DevPKI) -> Identity:
    return Identity("front-proxy", dev.cert("front_proxy_client"), dev.key("front_proxy_client"), "TEXT")


def measure(
    servers: dict[str, launch.Replica], identity: Identity, tmp: Path, rounds: int, seconds: float
) -> dict[str, list[tuple[float, float]]]:
    """Per server, per interleaved round: (requests/s, server CPUs busy) under h2load on /healthz."""
    shim = build_shim(tmp)
    load = Load(LOAD.clients, LOAD.streams, duration=seconds, warmup=1.0)
    figures: dict[str, list[tuple[float, float]]] = {name: [] for name in servers}
    for round_ in range(rounds):
        for name, server in servers.items():
            pid = server.process.popen.pid
            before = tree_cpu(pid)
            result = run_h2load(server.url + "/healthz", load, identity, tmp, shim)
            cpu = tree_cpu(pid) - before
            figures[name].append((result.rps, cpu / (seconds + 1.0)))
            print(f"round {round_ + 1}/{rounds}, {name}: {result.rps:,.0f} req/s", flush=True)
    return figures


def report(
    figures: dict[str, list[tuple[float, float]]], ratios: Sequence[tuple[str, str]], rounds: int, seconds: float
) -> None:
    """The table, then each ratio's (measured over against), taken round by round."""
    print(f"\nh2load {LOAD.label} -t 1, {seconds:g} s per run, {rounds} interleaved rounds; {OPTIN}: TEXT\n")
    print("| server | req/s median (range) | server CPUs busy | requests per CPU-second |")
    print("|---|---|---|---|")
    for name, rows in figures.items():
        rps = [r for r, _ in rows]
        per_cpu = [r / c for r, c in rows]
        print(
            f"| {name} | {statistics.median(rps):,.0f} ({min(rps):,.0f}–{max(rps):,.0f}) "
            f"| {statistics.median(c for _, c in rows):.2f} "
            f"| {statistics.median(per_cpu):,.0f} ({min(per_cpu):,.0f}–{max(per_cpu):,.0f}) |"
        )
    print()
    for name, over in ratios:
        pairs = list(zip(figures[over], figures[name], strict=True))
        rps_ratios = [b[0] / a[0] for a, b in pairs]
        efficiency = [(b[0] / b[1]) / (a[0] / a[1]) for a, b in pairs]
        print(
            f"{name} over {over}, per round: req/s x{statistics.median(rps_ratios):.2f} "
            f"(x{min(rps_ratios):.2f}–x{max(rps_ratios):.2f}); requests per CPU-second "
            f"x{statistics.median(efficiency):.2f} (x{min(efficiency):.2f}–x{max(efficiency):.2f})"
        )


def beside_argvs(dev: DevPKI, tree: Path) -> dict[str, list[str]]:
    """The asyncio rows of SERVES, served from ``tree`` (first on PYTHONPATH, inherited by the workers)."""
    return {
        f"{name} ({tree.name})": ["env", f"PYTHONPATH={tree}", *argv]
        for (name, (_, loop)), argv in zip(SERVES.items(), serve_argvs(dev), strict=True)
        if loop == "asyncio"
    }


def main(rounds: int = 5, seconds: float = 8.0, beside: Path | None = None) -> None:
    ratios = list(RATIOS)
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        dev = devpki.generate(Path(tmp) / "pki")
        servers = dict(zip(NAMES, stack.enter_context(launch.replicas(serve_argvs(dev))), strict=True))
        if beside is not None:
            other = beside_argvs(dev, beside)
            servers |= dict(zip(other, stack.enter_context(launch.replicas(list(other.values()))), strict=True))
            ratios += [(name, f"{name} ({beside.name})") for name, (_, loop) in SERVES.items() if loop == "asyncio"]
        servers[GO] = stack.enter_context(go_peer(dev))
        figures = measure(servers, identity_of(dev), Path(tmp), rounds, seconds)
    report(figures, ratios, rounds, seconds)


if __name__ == "__main__":
    arguments = sys.argv[1:]
    tree = None
    if "--beside" in arguments:
        at = arguments.index("--beside")
        tree = Path(arguments[at + 1]).resolve()
        del arguments[at : at + 2]
    main(int(arguments[0]) if arguments else 5, float(arguments[1]) if len(arguments) > 1 else 8.0, tree)
