"""The lab's shared harness pieces: the procfs readers and the h2load command line (one of each in the tree)."""

from __future__ import annotations

import os
import resource
from pathlib import Path

from secure_orca.lab import h2load, procfs


def _burn() -> int:
    return sum(i * i for i in range(300_000))


def test_process_cpu_agrees_with_the_kernels_own_accounting_of_this_process() -> None:
    _burn()
    times = os.times()
    from_stat = procfs.process_cpu(os.getpid())
    assert abs(from_stat - (times.user + times.system)) <= 2 / procfs.CLOCK_TICK + 0.02


def test_both_cpu_readers_see_the_same_work() -> None:
    """schedstat counts live threads in nanoseconds, stat every thread in ticks: their totals differ in a
    process whose threads came and went, their increments over work on this thread agree."""
    pid, tick = os.getpid(), 1 / procfs.CLOCK_TICK
    stat0, sched0 = procfs.process_cpu(pid), procfs.process_cpu_schedstat(pid)
    for _ in range(10):
        _burn()
    stat, sched = procfs.process_cpu(pid) - stat0, procfs.process_cpu_schedstat(pid) - sched0
    assert stat > 0 and sched > 0
    assert 0.5 * stat - 3 * tick <= sched <= 2 * stat + 3 * tick


def test_rss_agrees_with_statm() -> None:
    rss = procfs.rss_kib(os.getpid())
    pages = int(Path(f"/proc/{os.getpid()}/statm").read_text().split()[1])  # resident, in pages (proc(5))
    assert rss > 0 and abs(rss - pages * resource.getpagesize() // 1024) <= rss // 20


def test_h2load_command_lines() -> None:
    assert h2load.argv("https://h/x", clients=4, streams=8, threads=1, seconds=1.5, warmup=0.5) == [
        "h2load",
        "-c",
        "4",
        "-m",
        "8",
        "-t",
        "1",
        "-D",
        "1500ms",
        "--warm-up-time=500ms",
        "https://h/x",
    ]
    log = Path("/tmp/log.tsv")
    assert h2load.argv("https://h/", requests=40, rps=2.4, headers=["a: b"], log_file=log, h1=True) == [
        "h2load",
        "-c",
        "1",
        "-m",
        "1",
        "-n",
        "40",
        "--rps=2",
        f"--log-file={log}",
        "--h1",
        "-H",
        "a: b",
        "https://h/",
    ]
    assert h2load.argv("u", clients=3, rps=0.2)[-2:] == ["--rps=1", "u"]  # h2load takes a whole rate, at least 1
    assert h2load.argv("u", clients=3)[5:7] == ["-n", "3"]  # one request per client when no count is given
