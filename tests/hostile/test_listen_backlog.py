"""The kernel's accept queue is as long as the listener asked for (SOMAXCONN), alone and with workers: a burst of
new connections waits there instead of being dropped. Before the fix, ``asyncio.start_server`` listened again
with its default backlog of 100 on the socket we had bound with SOMAXCONN, so the 101st connection of a burst
that the loop had not yet accepted was dropped (or answered with a SYN cookie). ``ss`` reads the queue's
length from the kernel (inet_diag: Send-Q of a listening socket)."""

from __future__ import annotations

import shutil
import ssl
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from secure_orca import pki
from secure_orca.lab import launcher as lb
from secure_orca.lab import replicas as launch
from secure_orca.lab.sockets import children, connections, listening
from secure_orca.server.listener import BACKLOG
from tests.replicas import run_replicas


def accept_queue(port: int) -> int:
    ss = shutil.which("ss")
    assert ss is not None, "ss (iproute2) is needed: scripts/setup.sh installs it"
    out = subprocess.run([ss, "-ltnH", f"sport = :{port}"], capture_output=True, text=True, timeout=10, check=True)
    (line,) = out.stdout.splitlines()
    return int(line.split()[2])  # State Recv-Q Send-Q: a listening socket's Send-Q is its backlog


@pytest.mark.parametrize("workers", [1, 2])
def test_the_accept_queue_is_the_one_asked_for(dev_pki: pki.DevPKI, workers: int) -> None:
    argv = launch.serve_argv(dev_pki, lb.replica_flags(dev_pki, "front-proxy", "--workers", str(workers)))
    with run_replicas([argv]) as (replica,):
        if workers > 1:
            every_worker_accepts(replica, dev_pki, workers)
        expected = min(BACKLOG, int(Path("/proc/sys/net/core/somaxconn").read_text()))
        assert accept_queue(replica.port) == expected


def every_worker_accepts(replica: launch.Replica, dev: pki.DevPKI, workers: int) -> None:
    """Open connections until each worker holds one: each has then listened itself (what the fix is about)."""
    context = ssl.create_default_context(cafile=str(dev.cert("ca")))
    held: list[httpx.Client] = []
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            pids = listening(children(replica.process.popen.pid), replica.port)
            if len(pids) == workers and all(connections(pids, replica.port).values()):
                return
            client = httpx.Client(verify=context, http2=True, timeout=10)
            held.append(client)
            client.get(replica.url + "/healthz").raise_for_status()
        raise AssertionError(f"not every worker accepted a connection: {connections(pids, replica.port)}")
    finally:
        for client in held:
            client.close()
