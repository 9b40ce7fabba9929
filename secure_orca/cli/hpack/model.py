"""``secure-orca hpack model``: replay kube-apiserver-like response headers plus the report through
hpack.Encoder in virtual time, for a grid of rates, sampling intervals and precisions, and for each mitigation."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor

from secure_orca.errors import UsageError
from secure_orca.hpackcost.model import MITIGATIONS, CellResult, Scenario, as_dict, grid, simulate
from secure_orca.hpackcost.plot import plot
from secure_orca.hpackcost.tables import KEP_QPS, baseline_table, claims_table, mitigation_table, report_sizes

HELP = "model the cost without a network"


def add_arguments(model: argparse.ArgumentParser) -> None:
    model.add_argument("--rates", default="1,10,100,1000,10000", help="responses/s per connection (list)")
    model.add_argument("--intervals", default="0.01,0.1,1", help="sampling intervals in seconds (list)")
    model.add_argument("--decimals", default="1,2,3", help="value precisions (list)")
    model.add_argument("--mitigations", default=",".join(MITIGATIONS), help=f"from: {', '.join(MITIGATIONS)}")
    model.add_argument("--base-interval", type=float, default=0.1, help="interval of the mitigation table")
    model.add_argument("--base-decimals", type=int, default=3, help="precision of the mitigation table")
    model.add_argument("--duration", type=float, default=60.0, help="virtual seconds per cell")
    model.add_argument("--max-responses", type=int, default=10000, help="cap on responses per cell")
    model.add_argument("--seed", type=int, default=1)
    model.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes")
    model.add_argument("--json", action="store_true", help="print JSON instead of tables")
    model.add_argument("--plot", metavar="FILE", help="write a PNG (needs matplotlib)")


def _numbers(text: str, option: str, kind: Callable[[str], float], low: float, high: float) -> list:
    """A comma-separated list of numbers within [low, high] (exclusive of 0 when low is 0 and kind is float)."""
    try:
        values = [kind(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise UsageError(f"{option}: expected a comma-separated list of numbers, got {text!r}") from None
    if not values or any(not low <= v <= high or (kind is float and v == 0) for v in values):
        raise UsageError(f"{option}: values must be in {'(' if kind is float else '['}{low:g}, {high:g}]")
    return values


def scenarios_from(args: argparse.Namespace) -> tuple[Scenario, list[Scenario]]:
    """The base scenario (of the mitigation table) and the grid the options ask for; UsageError on bad input."""
    names = [n.strip() for n in args.mitigations.split(",") if n.strip()]
    unknown = [n for n in names if n not in MITIGATIONS]
    if unknown:
        raise UsageError(f"--mitigations: unknown {', '.join(unknown)} (known: {', '.join(MITIGATIONS)})")
    rates = _numbers(args.rates, "--rates", float, 0, 1e6)
    intervals = _numbers(args.intervals, "--intervals", float, 0, 3600)
    decimals = _numbers(args.decimals, "--decimals", int, 0, 12)
    _numbers(str(args.base_decimals), "--base-decimals", int, 0, 12)
    _numbers(str(args.base_interval), "--base-interval", float, 0, 3600)
    if args.duration <= 0 or args.max_responses < 1 or args.jobs < 1:
        raise UsageError("--duration, --max-responses and --jobs must be positive")
    base = Scenario(
        rate=1.0,
        interval=args.base_interval,
        decimals=args.base_decimals,
        duration=args.duration,
        max_responses=args.max_responses,
        seed=args.seed,
    )
    return base, grid(rates, intervals, decimals, [MITIGATIONS[n] for n in names], base)


def run_cells(cells: Sequence[Scenario], jobs: int) -> list[CellResult]:
    """Simulate the cells, in worker processes when ``jobs > 1`` (results in input order)."""
    if jobs <= 1 or len(cells) < 2:
        return [simulate(c) for c in cells]
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(simulate, cells, chunksize=1))


def run(args: argparse.Namespace) -> int:
    """``secure-orca hpack model``."""
    base, cells = scenarios_from(args)
    results = run_cells(cells, args.jobs)
    if args.plot:
        plot(results, base, args.plot)
    if args.json:
        json.dump({"cells": [as_dict(r) for r in results]}, sys.stdout, indent=1)
        print()
        return 0
    print(report_sizes())
    print("\nNo mitigation (steady state; per-response figures averaged after warm-up):")
    print(baseline_table(results))
    print(f"\nMitigations at interval {base.interval:g} s, {base.decimals} decimals (saved: vs none):")
    print(mitigation_table(results, base))
    print(f"\n{KEP_QPS} QPS server-wide over connections of each rate (KEP: ~0.1 MB/s):")
    print(claims_table(results, base))
    if not all(r.replay_exact for r in results):
        print("\nwarning: the walker's replay did not reproduce some blocks", file=sys.stderr)
    return 0
