"""Silent sockets: TCP connections that never send a ClientHello, from a client with no credential.

Before the fix each one cost the worker about 304 KiB of resident memory (asyncio's ``SSLProtocol`` allocates a
256 KiB receive buffer at accept) and was held for hypercorn's 60 s handshake timeout, however many there were:
400 added 118 MiB, about 860 got a 256Mi replica OOM-killed, and under a descriptor limit of 1024 the load
balancer's own connections waited in the accept queue behind them until they timed out. Now a connection has no
buffer of its own before its handshake, and those pending are capped per client address and in total, the
oldest given up first (``server/http/pending.py``).

The attacker's sockets come from 127.0.0.2 and the load balancer's from 127.0.0.1: two hosts, as in a cluster.
"""

from __future__ import annotations

import resource
import shutil
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from secure_orca import pki
from secure_orca.lab import replicas as launch
from secure_orca.lab.procfs import rss_kib
from secure_orca.lab.sockets import connections, settle, silent_sockets
from secure_orca.server.http.pending import MAX_PENDING_PER_ADDRESS
from tests.replicas import run_replicas

SILENT = 400
KIB_PER_SILENT = 32  # the target: at most this much resident memory per silent connection
DESCRIPTORS = 1024  # a container's common soft (and here hard) RLIMIT_NOFILE
SILENT_UNDER_LIMIT = 2200


def healthz(replica: launch.Replica, dev: pki.DevPKI, timeout: float) -> int:
    """A load balancer's new connection and one request."""
    context = ssl.create_default_context(cafile=str(dev.cert("ca")))
    with httpx.Client(verify=context, http2=True, timeout=timeout) as client:
        return client.get(replica.url + "/healthz").status_code


@pytest.fixture
def descriptors_for_the_client() -> Iterator[None]:
    """This test process holds thousands of sockets: its own soft limit up to its hard one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < SILENT_UNDER_LIMIT + 256:
        pytest.skip(f"RLIMIT_NOFILE hard limit {hard} is too low for {SILENT_UNDER_LIMIT} client sockets")
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_silent_sockets_cost_little_memory_and_are_capped(dev_pki: pki.DevPKI) -> None:
    with run_replicas([launch.serve_argv(dev_pki)]) as (replica,):
        pid = replica.process.popen.pid
        assert healthz(replica, dev_pki, 10) == 200  # warm: the first connection's one-off allocations
        time.sleep(0.5)
        before = rss_kib(pid)
        with silent_sockets(replica.port, SILENT):
            assert settle(replica.port, 30) == 0, "the server did not accept the queued connections"
            grown = rss_kib(pid) - before
            held = connections([pid], replica.port)[pid]
            assert grown <= SILENT * KIB_PER_SILENT, f"{grown / SILENT:.0f} KiB per silent socket"
            assert held <= MAX_PENDING_PER_ADDRESS, f"{held} silent connections held from one address"
            assert healthz(replica, dev_pki, 10) == 200


def test_the_load_balancer_connects_while_silent_sockets_fill_the_descriptors(
    dev_pki: pki.DevPKI, descriptors_for_the_client: None
) -> None:
    prlimit = shutil.which("prlimit")
    assert prlimit is not None, "prlimit (util-linux) is needed"
    argv = [prlimit, f"--nofile={DESCRIPTORS}:{DESCRIPTORS}", "--", *launch.serve_argv(dev_pki)]
    with run_replicas([argv]) as (replica,), silent_sockets(replica.port, SILENT_UNDER_LIMIT):
        settle(replica.port, 10)  # before the fix, the queue never empties: no descriptor is left
        for _ in range(3):  # each within a bounded wait: before the fix, all three timed out
            assert healthz(replica, dev_pki, 10) == 200


def test_a_silent_socket_is_closed_at_the_client_hello_deadline(dev_pki: pki.DevPKI) -> None:
    """By default within 5 s; before the fix it was held for hypercorn's 60 s handshake timeout."""
    with run_replicas([launch.serve_argv(dev_pki)]) as (replica,), silent_sockets(replica.port, 1) as (sock,):
        sock.settimeout(15)  # a bounded wait for the server's close; never a measure of time
        assert sock.recv(1) == b""
        assert healthz(replica, dev_pki, 10) == 200


def test_the_descriptor_limit_is_raised_to_the_hard_limit(dev_pki: pki.DevPKI) -> None:
    prlimit = shutil.which("prlimit")
    assert prlimit is not None, "prlimit (util-linux) is needed"
    argv = [prlimit, f"--nofile={DESCRIPTORS}:{4 * DESCRIPTORS}", "--", *launch.serve_argv(dev_pki)]
    with run_replicas([argv]) as (replica,):
        limits = Path(f"/proc/{replica.process.popen.pid}/limits").read_text()
        (line,) = [line for line in limits.splitlines() if line.startswith("Max open files")]
        assert line.split()[3:5] == [str(4 * DESCRIPTORS)] * 2, line


def test_out_of_descriptors_the_newest_pending_handshake_gives_way(dev_pki: pki.DevPKI) -> None:
    """A limit so low that the pending connections reach it before their cap (an idle server holds 8 descriptors;
    16 allow 8 pending): each accept that fails with EMFILE closes the youngest pending handshake, and the load
    balancer's connection, queued behind the silent ones, is accepted and served."""
    prlimit = shutil.which("prlimit")
    assert prlimit is not None, "prlimit (util-linux) is needed"
    argv = [prlimit, "--nofile=16:16", "--", *launch.serve_argv(dev_pki)]
    with run_replicas([argv]) as (replica,), silent_sockets(replica.port, 20):
        settle(replica.port, 10)
        for _ in range(3):
            assert healthz(replica, dev_pki, 10) == 200
        assert any("Too many open files" in line for line in replica.process.lines)  # the limit was reached
