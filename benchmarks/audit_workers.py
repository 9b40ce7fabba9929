"""The audit log's cost under ``serve --workers``: audit off and on (``--audit-log-path``), with one worker and
with two (where one audit-writer process writes for both), side by side in one run, h2load presenting the
front-proxy certificate with the opt-in on /healthz.

    python -m benchmarks.audit_workers [ROUNDS] [SECONDS]

Interleaved rounds, the server's CPU read from procfs for the supervisor and all its children (the audit writer
included); each figure is the median and range over the rounds, each ratio taken round by round.
"""

from __future__ import annotations

import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path

from benchmarks.workers import identity_of, measure, report
from secure_orca.credentials import devpki
from secure_orca.lab import launcher as lb
from secure_orca.lab import replicas as launch


def main(rounds: int = 3, seconds: float = 6.0) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        dev = devpki.generate(Path(tmp) / "pki")
        names, argvs, logs = [], [], {}
        for workers in ("1", "2"):
            for audit in (False, True):
                names.append(f"`--workers {workers}`, audit {'on' if audit else 'off'}")
                extra = []
                if audit:
                    logs[names[-1]] = Path(tmp) / f"audit-{workers}.log"
                    extra = ["--audit-log-path", str(logs[names[-1]])]
                flags = lb.replica_flags(dev, "front-proxy", "--workers", workers, *extra)
                argvs.append(launch.serve_argv(dev, flags, demo_work=False))
        with ExitStack() as stack:
            servers = dict(zip(names, stack.enter_context(launch.replicas(argvs)), strict=True))
            figures = measure(servers, identity_of(dev), Path(tmp), rounds, seconds)
        lines = {name: log.read_bytes().count(b"\n") for name, log in logs.items()}  # the servers have stopped
    report(figures, [(names[1], names[0]), (names[3], names[2]), (names[3], names[1])], rounds, seconds)
    print("\naudit lines written:", ", ".join(f"{name}: {count:,}" for name, count in lines.items()))


if __name__ == "__main__":
    arguments = sys.argv[1:]
    main(int(arguments[0]) if arguments else 3, float(arguments[1]) if len(arguments) > 1 else 6.0)
