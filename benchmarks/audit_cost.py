"""Instructions per request of the whole server with the audit log on (``--audit-log-path``) and off, under
callgrind, in one run: the method of ``benchmarks.instructions`` (windows of N and M requests on one warm pinned
server; (N - M) requests' difference; one memory layout per repeat). The writer thread is in the count: callgrind
counts every thread of the process, and each window ends only once the server's CPU time stopped moving, so the
events of a window are written inside it (the writer wakes every 50 ms).

    python -m benchmarks.audit_cost [--requests 600 --baseline 100 --repeats 1]
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Sequence
from pathlib import Path

from benchmarks.common import BenchPKI, variants_per_request
from secure_orca.lab import instrcount


def run(workdir: Path, requests: int, baseline: int, repeats: int) -> dict[str, instrcount.Counted]:
    log = workdir / "audit" / "audit.log"
    variants = {"off": [], "on": ["--audit-log-path", str(log)]}
    counted = variants_per_request(BenchPKI.create(workdir / "pki"), workdir, variants, requests, baseline, repeats)
    if not log.exists() or not log.read_text().strip():
        raise RuntimeError("the audit-on server wrote no event")
    return counted


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.audit_cost", description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=600)
    parser.add_argument("--baseline", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--output", type=Path, default=Path(tempfile.gettempdir()) / "secure-orca-audit-instr")
    args = parser.parse_args(argv)
    reason = instrcount.valgrind_available()
    if reason is not None:
        raise SystemExit(f"cannot count instructions: {reason}")
    args.output.mkdir(parents=True, exist_ok=True)
    for old in args.output.glob("variant-*"):
        old.unlink()
    counted = run(args.output, args.requests, args.baseline, args.repeats)
    print("| request | audit off (instr/request) | audit on | on / off |")
    print("|---|---|---|---|")
    for key in ("front-proxy", "no-opt-in"):
        off, on = counted[f"off/{key}"], counted[f"on/{key}"]
        median, low, high = instrcount.ratio_range(on, off)
        print(f"| {key} | {off.median:,.0f} | {on.median:,.0f} | {median:.4f} [{low:.4f}, {high:.4f}] |")


if __name__ == "__main__":
    main()
