"""Readers of a process's own accounting in /proc (Linux), shared by the lab, the benchmarks and the tests.

Field positions follow proc(5): ``/proc/<pid>/stat`` fields 14 and 15 are utime and stime in clock ticks (read
after the last ``)``, since the command name may hold spaces or parentheses); ``/proc/<pid>/task/<tid>/schedstat``
starts with the thread's time on CPU in nanoseconds; ``/proc/<pid>/status`` has ``VmRSS:`` in KiB.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

CLOCK_TICK = os.sysconf("SC_CLK_TCK")


def process_cpu(pid: int) -> float:
    """utime + stime of a process in seconds (resolution: one clock tick, 1/CLOCK_TICK s)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICK


def process_cpu_schedstat(pid: int) -> float:
    """Seconds on CPU of every thread of ``pid``, from schedstat (nanoseconds, not clock ticks: for short
    windows, such as a few hundred handshakes)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError):  # a thread that ended meanwhile
            total += int((task / "schedstat").read_text().split()[0])
    return total / 1e9


def rss_kib(pid: int) -> int:
    """The resident set of a process (VmRSS), in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS in /proc/{pid}/status")
