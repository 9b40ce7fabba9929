"""Instructions per streamed report of StreamCoreMetrics, under callgrind on a real ``serve`` (docs/out-of-band.md).

    python -m benchmarks.oob_instructions --long 60 --short 20 --repeats 3
    python -m benchmarks.oob_instructions --per-request --repeats 3     # what the mounted service adds per request

The counted server (``secure_orca.lab.instrcount``: pinned hash seed, UUIDs, Date clock, sampler timer, GC) serves
the stream with a 10 ms floor. Each window opens one stream with the load-reader certificate on a new TLS
connection, reads N reports, cancels the stream and closes the connection; a window of ``--long`` reports minus one
of ``--short`` reports, over the difference, is the cost of one report: the timer's wake-up, the entitlement
re-check, the send through hypercorn, h2 and TLS. Opening, refusing nothing, cancelling and closing cancel out.
The pinned sampler never ticks, so every report is the same cached frame: serializing a sample (once per sample,
shared by all streams) is not in the figure.

``--per-request``: instructions per ordinary request (``/healthz``, the load reader's certificate with the opt-in,
one connection, h2load -c 1 -m 1; a run of 600 minus a run of 100, over 500) on a server with the stream on and on
one with ``--endpoint-load-metrics-oob=false``, same flags otherwise: what serving the stream costs the data path.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from secure_orca.credentials import devpki
from secure_orca.lab import instrcount
from secure_orca.lab import launcher as lb
from secure_orca.lab import replicas as launch
from secure_orca.lab.loadgen import Identity
from secure_orca.lab.oobcost import report_instructions

measure = report_instructions  # the measurement lives in secure_orca.lab.oobcost (evaluate's option 4 uses it too)


def per_request(repeats: int, long: int = 600, short: int = 100) -> dict[str, list[float]]:
    """Instructions per request with the stream on and off (same server flags otherwise), repeat by repeat."""
    out: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        dev = devpki.generate(work / "pki")
        client = Identity("lb", dev.cert("load_reader_client"), dev.key("load_reader_client"), "TEXT")
        for name, extra in (("on", ()), ("off", ("--endpoint-load-metrics-oob=false",))):
            flags = lb.replica_flags(dev, "load-reader", *extra)
            args = instrcount.serve_args(launch.serve_argv(dev, flags, demo_work=False))
            totals: dict[str, int] = {}
            for r in range(repeats):
                with instrcount.counted_server(args, work / f"{name}{r}.out", layout=r) as server:
                    server.control("--instr=on")
                    instrcount.requests(server, client, short, "/healthz", work)  # warm-up
                    for count in (long, short):
                        with server.window(f"{name},{count},{r}"):
                            instrcount.requests(server, client, count, "/healthz", work)
                    totals |= server.totals()
            out[name] = [
                (totals[f"{name},{long},{r}"] - totals[f"{name},{short},{r}"]) / (long - short) for r in range(repeats)
            ]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--long", type=int, default=60)
    parser.add_argument("--short", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--per-request", action="store_true", help="the data path's cost, stream on vs off")
    args = parser.parse_args()
    missing = instrcount.valgrind_available()
    if missing:
        raise SystemExit(missing)
    if args.per_request:
        counts = per_request(args.repeats)
        for name, values in counts.items():
            print(f"stream {name}: instructions per request", ", ".join(f"{v:,.0f}" for v in values))
        ratios = [on / off for on, off in zip(counts["on"], counts["off"], strict=True)]
        print("on / off by layout:", ", ".join(f"{v:.4f}" for v in ratios))
        return
    per_report = measure(args.long, args.short, args.repeats)
    print("instructions per streamed report:", ", ".join(f"{v:,.0f}" for v in per_report))
    print(f"median {statistics.median(per_report):,.0f}")


if __name__ == "__main__":
    main()
