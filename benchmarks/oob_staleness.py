"""Staleness: how long a load step on one replica takes to move Envoy's weight for it, in band against out of band,
for several load-balanced request rates and out-of-band reporting periods (docs/out-of-band.md). The measurement
is ``secure_orca.lab.staleness`` (the one that ``secure-orca evaluate`` runs at one period); this script only
varies the rate and the period. Wall clock, so a rough figure on a shared machine: read it as an order of magnitude.

    python -m benchmarks.oob_staleness --rates 2,20 --periods 1,0.2

Each cell is the median of ``--repeats`` runs; a run whose weight did not halve within ``--bound`` seconds counts
as the bound and shows as ``-``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from secure_orca.credentials import devpki
from secure_orca.lab import staleness as lab


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="2,20", help="load-balanced requests per second (list)")
    parser.add_argument("--periods", default="1,0.2", help="out-of-band reporting periods in seconds (list)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--bound", type=float, default=10.0, help="seconds to wait for the weight to move")
    args = parser.parse_args()
    rates = [float(r) for r in args.rates.split(",")]
    periods = [float(p) for p in args.periods.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        dev = devpki.generate(Path(tmp))
        print("path          LB rps   period   staleness_s (median; runs)")
        for rate in rates:
            for period in [None, *periods]:
                runs = [
                    lab.staleness(dev, period is not None, rate, args.bound, period or lab.OOB_PERIOD)
                    for _ in range(args.repeats)
                ]
                median = statistics.median(r.seconds for r in runs)
                shown = ", ".join(f"{r.seconds:.2f}" if r.moved else "-" for r in runs)
                path = "in band    " if period is None else "out of band"
                every = "-" if period is None else f"{period:g}"
                cell = f"{median:.2f}" if sum(r.moved for r in runs) > len(runs) // 2 else f">{args.bound:g}"
                print(f"{path}  {rate:7g}  {every:>7}   {cell} ({shown})", flush=True)


if __name__ == "__main__":
    main()
