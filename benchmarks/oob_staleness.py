"""Staleness: how long a load step on one replica takes to move Envoy's weight for it, in band against out of band,
for several load-balanced request rates and report periods (docs/out-of-band.md). The measurement is
``secure_orca.lab.staleness`` (the one that ``secure-orca evaluate`` runs for its matched freshness): both paths
get a report every period; this script only varies the rate and the period. Wall clock, so a rough figure on a
shared machine: read it as an order of magnitude.

    python -m benchmarks.oob_staleness --rates 2,20 --periods 1,0.2

Each cell is the median of ``--repeats`` runs, each step at a random time within one period; a run whose weight
did not halve within ``--bound`` seconds counts as the bound and shows as ``-``.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
from pathlib import Path

from secure_orca.credentials import devpki
from secure_orca.lab import staleness as lab


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="2,20", help="load-balanced requests per second (list)")
    parser.add_argument("--periods", default="1,0.2", help="report periods in seconds, both paths (list)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--bound", type=float, default=10.0, help="seconds to wait for the weight to move")
    parser.add_argument("--seed", type=int, default=6315, help="seed of the steps' random start times")
    args = parser.parse_args()
    rates = [float(r) for r in args.rates.split(",")]
    periods = [float(p) for p in args.periods.split(",")]
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        dev = devpki.generate(Path(tmp))
        print("path          LB rps   period   staleness_s (median; runs)")
        for rate in rates:
            for period in periods:
                for out_of_band in (False, True):
                    runs = [
                        lab.staleness(dev, out_of_band, rate, args.bound, period, rng.uniform(0, period))
                        for _ in range(args.repeats)
                    ]
                    median = statistics.median(r.seconds for r in runs)
                    shown = ", ".join(f"{r.seconds:.2f}" if r.moved else "-" for r in runs)
                    path = "out of band" if out_of_band else "in band    "
                    cell = f"{median:.2f}" if sum(r.moved for r in runs) > len(runs) // 2 else f">{args.bound:g}"
                    print(f"{path}  {rate:7g}  {period:7g}   {cell} ({shown})", flush=True)


if __name__ == "__main__":
    main()
