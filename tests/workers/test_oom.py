"""The OOM killer's choice under ``serve --workers 2`` (issue 40): a worker, never the supervisor. Each worker raises
its own ``oom_score_adj`` (workers.lifeline); under a real memory cgroup and a flood of POST streams that never
send their bodies, the kernel kills a worker, the supervisor restarts it, and the load balancer's connection on
the other worker answers every request. Before: every score was 0 and the kernel killed the supervisor, the
largest process of the group, and with it the whole server. Counted, never timed."""

from __future__ import annotations

import contextlib
import os
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from secure_orca import pki
from secure_orca.lab.sockets import children
from secure_orca.workers.lifeline import WORKER_OOM_SCORE_ADJ
from tests.replicas import run_replicas
from tests.workers.flood import Flood, end, flood
from tests.workers.live import WORKERS, argv, close, eventually, spread, workers_of

HEADROOM = 30 * 1024 * 1024  # the memory limit is the server's usage at idle plus this, as the issue's


class _UntilKilled:
    """The flood's stop: set, or the first OOM kill seen. Asked before each connection, so that the flood does not
    go on to fill the cgroup again and have the kernel kill a second worker (seen once: both workers killed)."""

    def __init__(self, stop: threading.Event, cgroup: MemoryCgroup) -> None:
        self.stop, self.cgroup = stop, cgroup

    def is_set(self) -> bool:
        return self.stop.is_set() or self.cgroup.oom_kills() > 0


def adj(pid: int) -> int:
    return int(Path(f"/proc/{pid}/oom_score_adj").read_text())


def test_workers_offer_themselves_to_the_oom_killer(dev_pki: pki.DevPKI) -> None:
    with run_replicas([argv(dev_pki)]) as (replica,):
        supervisor = replica.process.popen.pid
        workers = workers_of(replica)
        others = set(children(supervisor)) - set(workers)
        assert [adj(pid) for pid in workers] == [WORKER_OOM_SCORE_ADJ] * WORKERS
        assert adj(supervisor) == adj(os.getpid())  # the supervisor keeps what it inherited
        assert others and all(adj(pid) == adj(supervisor) for pid in others)  # the credential reader, ...


class MemoryCgroup:
    """A memory cgroup of its own: cgroup v2 (``memory.max``) where the memory controller is there, else v1
    (``memory.limit_in_bytes``)."""

    def __init__(self, name: str) -> None:
        v2 = Path("/sys/fs/cgroup")
        if (
            "memory" in (v2 / "cgroup.controllers").read_text(errors="replace").split()
            if (v2 / "cgroup.controllers").exists()
            else False
        ):
            self.path, self.v2 = v2 / name, True
        else:
            v1 = Path("/sys/fs/cgroup/memory")
            if not (v1 / "memory.limit_in_bytes").exists():
                pytest.skip("no memory cgroup controller here (neither cgroup v2 memory.max nor v1 memory)")
            own = next(
                (
                    line.split(":", 2)[2]
                    for line in Path("/proc/self/cgroup").read_text().splitlines()
                    if line.split(":")[1] == "memory"
                ),
                "/",
            )
            self.path, self.v2 = v1 / own.lstrip("/") / name, False
        try:
            self.path.mkdir()
        except OSError as error:
            pytest.skip(f"cannot create a memory cgroup at {self.path} (root and a writable cgroupfs needed): {error}")

    def start(self, command: list[str]) -> list[str]:
        """``command`` started inside this cgroup (a shell joins it, then execs the command: same pid)."""
        return ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', str(self.path / "cgroup.procs"), *command]

    def usage(self) -> int:
        return int((self.path / ("memory.current" if self.v2 else "memory.usage_in_bytes")).read_text())

    def limit(self, amount: int) -> None:
        (self.path / ("memory.max" if self.v2 else "memory.limit_in_bytes")).write_text(str(amount))

    def oom_kills(self) -> int:
        text = (self.path / ("memory.events" if self.v2 else "memory.oom_control")).read_text()
        return next((int(line.split()[1]) for line in text.splitlines() if line.startswith("oom_kill ")), 0)

    def remove(self) -> None:
        for _ in range(100):
            with contextlib.suppress(OSError):
                self.path.rmdir()
                return
            time.sleep(0.05)


@contextlib.contextmanager
def memory_cgroup() -> Iterator[MemoryCgroup]:
    cgroup = MemoryCgroup(f"secure-orca-test-{os.getpid()}")
    try:
        yield cgroup
    finally:
        cgroup.remove()


def test_under_a_memory_limit_the_kernel_kills_a_worker_and_the_other_keeps_serving(
    dev_pki: pki.DevPKI,
) -> None:
    with memory_cgroup() as cgroup, run_replicas([cgroup.start(argv(dev_pki))]) as (replica,):
        supervisor = replica.process.popen.pid
        held = spread(replica, dev_pki, 1)
        cgroup.limit(cgroup.usage() + HEADROOM)  # as a Kubernetes limit: every page of the server is charged
        before = set(workers_of(replica))
        stop = threading.Event()
        opened: Flood = []
        answers: dict[int, list[int | str]] = {pid: [] for pid in held}

        def keep_asking(pid: int, http: httpx.Client) -> None:
            while not stop.is_set():
                try:
                    answers[pid].append(http.get(replica.url + "/healthz").status_code)
                except httpx.HTTPError as error:
                    answers[pid].append(type(error).__name__)
                    return
                time.sleep(0.05)

        askers = [threading.Thread(target=keep_asking, args=(pid, http)) for pid, (http,) in held.items()]
        flooder = threading.Thread(target=flood, args=(replica, dev_pki, _UntilKilled(stop, cgroup), opened))
        try:
            for thread in (*askers, flooder):
                thread.start()
            eventually(lambda: cgroup.oom_kills() > 0 or not flooder.is_alive(), "the flood sent", timeout=120)
            eventually(lambda: cgroup.oom_kills() > 0, "an OOM kill", timeout=30)
            stop.set()
            flooder.join(30)
            end(opened)
            for thread in askers:
                thread.join(30)
            assert os.waitpid(supervisor, os.WNOHANG) == (0, 0), "the supervisor died"
            eventually(lambda: len(workers_of(replica)) == WORKERS, "the killed worker restarted")
            after = set(workers_of(replica))
            killed = before - after
            assert len(killed) == 1, (before, after)  # a worker, and only one
            (survivor,) = before - killed
            assert answers[survivor] and set(answers[survivor]) == {200}, answers  # never refused, never failed
            with httpx.Client(
                verify=ssl.create_default_context(cafile=str(dev_pki.cert("ca"))), http2=True
            ) as fresh:  # a new connection is served
                assert fresh.get(replica.url + "/healthz").status_code == 200
            assert "(signal SIGKILL); restarting it" in "".join(replica.process.lines)
        finally:
            stop.set()
            close(held)
            flooder.join(30)
            end(opened)
