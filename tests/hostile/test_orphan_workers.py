"""A supervisor that is killed (SIGKILL, the OOM killer) takes its workers and its other processes with it: they
drain and stop as on SIGTERM instead of holding the port and the CPU for ever. Before the fix they lived on,
re-parented to init, still accepting on the socket."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from secure_orca import pki
from secure_orca.lab import launcher as lb
from secure_orca.lab import replicas as launch
from secure_orca.lab.sockets import children
from tests.replicas import run_replicas


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_workers_end_with_a_killed_supervisor(dev_pki: pki.DevPKI) -> None:
    metrics = f"127.0.0.1:{launch.free_port()}"
    flags = lb.replica_flags(dev_pki, "front-proxy", "--workers", "2", "--metrics-bind-address", metrics)
    with run_replicas([launch.serve_argv(dev_pki, flags)]) as (replica,):
        supervisor = replica.process.popen.pid
        deadline = time.monotonic() + 20
        # two workers, the metrics process and the credential reader
        while len(kids := children(supervisor)) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(kids) == 4, kids
        os.kill(supervisor, signal.SIGKILL)
        replica.process.popen.wait(10)
        deadline = time.monotonic() + 30  # a bound on the drain, not a measurement
        while any(alive(pid) for pid in kids) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = [pid for pid in kids if alive(pid)]
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        assert not left, f"outlived their supervisor: {left}"
