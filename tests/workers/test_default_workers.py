"""Without ``--workers``, ``serve`` runs one worker per CPU it may use (the cgroup's quota, else its CPUs),
rounded up, as Go's GOMAXPROCS does; ``--workers 1`` is one process."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from secure_orca.lab.sockets import children
from secure_orca.server.sampler import Sources
from secure_orca.workers.supervisor import default_workers
from tests.replicas import run_replicas


def test_the_default_follows_the_cpus_this_process_may_use(tmp_path: Path) -> None:
    expected = default_workers(Sources())
    argv = [sys.executable, "-m", "secure_orca", "serve", "--secure-port", "0", "--certs-dir", str(tmp_path / "c")]
    with run_replicas([argv]) as (replica,):
        line = replica.process.output(tail=50)
        if expected == 1:
            assert "workers" not in line.split("Running on", 1)[1].splitlines()[0]
        else:
            assert re.search(rf"Running on \S+ \(CTRL \+ C to quit\) with {expected} workers", line), line
            assert len(children(replica.process.popen.pid)) >= expected


def test_one_worker_is_one_process(tmp_path: Path) -> None:
    argv = [
        sys.executable,
        "-m",
        "secure_orca",
        "serve",
        "--secure-port",
        "0",
        "--workers",
        "1",
        "--certs-dir",
        str(tmp_path / "c"),
    ]
    with run_replicas([argv]) as (replica,):
        assert children(replica.process.popen.pid) == []
        assert "workers" not in replica.process.output(tail=50).split("Running on", 1)[1].splitlines()[0]
