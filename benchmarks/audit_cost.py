"""Instructions per request of the whole server with the audit log on (``--audit-log-path``) and off, under
callgrind, in one run: the method of ``benchmarks.instructions`` (windows of N and M requests on one warm pinned
server; (N - M) requests' difference; one memory layout per repeat). The writer thread is in the count: callgrind
counts every thread of the process, and each window ends only once the server's CPU time stopped moving, so the
events of a window are written inside it (the writer wakes every 50 ms).

    python -m benchmarks.audit_cost [--requests 600 --baseline 100 --repeats 1]
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from benchmarks.common import BenchPKI, print_variants, variants_arguments, variants_per_request
from secure_orca.lab import instrcount


def run(workdir: Path, requests: int, baseline: int, repeats: int) -> dict[str, instrcount.Counted]:
    log = workdir / "audit" / "audit.log"
    variants = {"off": [], "on": ["--audit-log-path", str(log)]}
    counted = variants_per_request(BenchPKI.create(workdir / "pki"), workdir, variants, requests, baseline, repeats)
    if not log.exists() or not log.read_text().strip():
        raise RuntimeError("the audit-on server wrote no event")
    return counted


def main(argv: Sequence[str] | None = None) -> None:
    args = variants_arguments("benchmarks.audit_cost", __doc__ or "", "secure-orca-audit-instr", 1, argv)
    counted = run(args.output, args.requests, args.baseline, args.repeats)
    print_variants(counted, ("off", "audit off"), ("on", "audit on"), "on / off")


if __name__ == "__main__":
    main()
