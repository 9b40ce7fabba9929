"""Background load sampler: CPU and memory from cgroup v2, cgroup v1 or procfs, request and error rates,
in-flight requests. It ticks on the server's event loop (a timer, not a thread: a sampler thread made the busy
loop hand the GIL back and forth ten times a second, which cost more than the tick itself). Each tick publishes
one immutable, pre-serialized header tuple; the request path only reads ``sampler.header``.

What cannot be measured (a vanished or garbled cgroup file) is left out of the report, never guessed.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

from secure_orca.orca import dialect
from secure_orca.orca.headers import REPORT as HEADER
from secure_orca.orca.report import DEFAULT_DECIMALS, LoadReport, encode_text

log = logging.getLogger("secure_orca.sampler")
IN_FLIGHT_METRIC = "in_flight_requests"
RATE_WINDOW = 1.0  # seconds over which rps_fractional and eps are computed


# ---- pure parsers of kernel files -------------------------------------------------------------------------


def parse_cpu_max(text: str) -> float | None:
    """cgroup v2 ``cpu.max`` (``"200000 100000"`` or ``"max 100000"``) as CPUs; None when unlimited."""
    parts = text.split()
    if len(parts) != 2 or parts[0] == "max":
        return None
    quota, period = float(parts[0]), float(parts[1])
    return quota / period if quota > 0 and period > 0 else None


def parse_cfs(quota_text: str, period_text: str) -> float | None:
    """cgroup v1 ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` as CPUs; None when unlimited (-1)."""
    quota, period = int(quota_text.strip()), int(period_text.strip())
    return quota / period if quota > 0 and period > 0 else None


def parse_memory_limit(text: str, physical: int) -> int | None:
    """cgroup ``memory.max`` (v2, ``max`` when unlimited) or ``memory.limit_in_bytes`` (v1, a huge number)."""
    value = text.strip()
    if value == "max":
        return None
    limit = int(value)
    return limit if 0 < limit < physical else None


def parse_meminfo_total(text: str) -> int:
    for line in text.splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    raise ValueError("MemTotal missing")


def parse_statm_rss(text: str, page_size: int) -> int:
    return int(text.split()[1]) * page_size


def parse_stat_cpu(text: str, clock_tick: int) -> float:
    """utime + stime of a ``/proc/<pid>/stat`` line, in seconds (the command name may hold spaces and ")")."""
    fields = text[text.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / clock_tick


def parse_proc_cgroup(text: str) -> dict[str, str]:
    """``/proc/self/cgroup``: controller (``""`` for v2) to path."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            for controller in parts[1].split(",") if parts[1] else [""]:
                out[controller] = parts[2]
    return out


# ---- reading this machine ---------------------------------------------------------------------------------


class Sources:
    """Where CPU capacity and memory are read; ``root`` lets tests point at a prepared tree.

    The cgroup layout, physical memory and page size are found once; each tick then reads only the files
    whose content can change (quota, memory limit and usage, or statm): two or three small reads."""

    def __init__(self, root: Path = Path("/")) -> None:
        self.root = root
        self._layout: tuple[str, dict[str, str]] | None = None
        self._physical: int | None = None
        self._page = os.sysconf("SC_PAGE_SIZE")
        self._usable = float(len(os.sched_getaffinity(0)))

    def _read(self, *parts: str) -> str | None:
        path = os.path.join(self.root, *[p.lstrip("/") for p in parts])
        try:
            fd = os.open(path, os.O_RDONLY)
            try:
                return os.read(fd, 65536).decode("ascii")
            finally:
                os.close(fd)
        except (OSError, UnicodeDecodeError):
            return None

    def _cgroup_dirs(self) -> tuple[str, dict[str, str]]:
        """("v2" | "v1" | "none", controller -> directory below root), found on first use."""
        if self._layout is None:
            self._layout = self._find_layout()
        return self._layout

    def _find_layout(self) -> tuple[str, dict[str, str]]:
        paths = parse_proc_cgroup(self._read("proc/self/cgroup") or "")
        base = "sys/fs/cgroup"
        if self._read(base, "cgroup.controllers") is not None:
            own = f"{base}{paths.get('', '/')}".rstrip("/")
            chosen = own if self._read(own, "cpu.max") or self._read(own, "memory.max") else base
            return "v2", {"cpu": chosen, "memory": chosen}
        dirs = {}
        for controller, mount in (("cpu", "cpu"), ("memory", "memory")):
            own = f"{base}/{mount}{paths.get(controller, '/')}".rstrip("/")
            dirs[controller] = own if self._read(own, "cgroup.procs") is not None else f"{base}/{mount}"
        if self._read(dirs["cpu"], "cpu.cfs_quota_us") or self._read(dirs["memory"], "memory.limit_in_bytes"):
            return "v1", dirs
        return "none", {}

    def cpu_capacity(self) -> float:
        """CPUs this process may use: the cgroup quota where set, else the usable CPU count."""
        kind, dirs = self._cgroup_dirs()
        quota = None
        try:
            if kind == "v2":
                quota = parse_cpu_max(self._read(dirs["cpu"], "cpu.max") or "max 0")
            elif kind == "v1":
                q, p = (
                    self._read(dirs["cpu"], "cpu.cfs_quota_us"),
                    self._read(dirs["cpu"], "cpu.cfs_period_us"),
                )
                quota = parse_cfs(q, p) if q and p else None
        except ValueError:
            quota = None
        return min(quota, self._usable) if quota else self._usable

    def physical_memory(self) -> int | None:
        if self._physical is None:
            try:
                self._physical = parse_meminfo_total(self._read("proc/meminfo") or "")
            except ValueError:
                return None
        return self._physical

    def mem_utilization(self) -> float | None:
        """cgroup memory usage over its limit where limited, else this process's RSS over physical memory."""
        physical = self.physical_memory()
        if physical is None:
            return None
        kind, dirs = self._cgroup_dirs()
        names = {
            "v2": ("memory.max", "memory.current"),
            "v1": ("memory.limit_in_bytes", "memory.usage_in_bytes"),
        }
        try:
            if kind in names:
                limit_file, usage_file = names[kind]
                limit_text = self._read(dirs["memory"], limit_file)
                usage_text = self._read(dirs["memory"], usage_file)
                limit = parse_memory_limit(limit_text, physical) if limit_text else None
                if limit and usage_text:
                    return int(usage_text.strip()) / limit
            rss = self.rss_bytes()
            return rss / physical if rss is not None else None
        except (ValueError, IndexError):
            return None

    def rss_bytes(self) -> int | None:
        """This process's resident memory (``secure_orca.workers`` sums a server's processes instead)."""
        statm = self._read("proc/self/statm")
        return parse_statm_rss(statm, self._page) if statm else None


# ---- the sampler ------------------------------------------------------------------------------------------


class RequestCounters:
    """Updated by the request path, read by the sampler, both on the event loop."""

    __slots__ = ("errors", "in_flight", "requests")

    def __init__(self) -> None:
        self.requests = 0
        self.errors = 0
        self.in_flight = 0


class Sampler:
    """Samples every ``interval`` seconds on the event loop and publishes ``header``."""

    def __init__(
        self,
        interval: float = 0.1,
        sources: Sources | None = None,
        decimals: int = DEFAULT_DECIMALS,
        cpu_clock: Callable[[], float] = time.process_time,
    ) -> None:
        self.interval = interval
        self.sources = sources or Sources()
        self.decimals = decimals
        self.counters = RequestCounters()
        self.header: tuple[bytes, bytes] | None = None
        self.report: LoadReport | None = None
        self.ticks = 0
        self.errors = 0
        self.encodes = 0  # how often a report was serialized (never on the request path)
        self._cpu_clock = cpu_clock
        self.cpu_seconds = 0.0  # CPU the ticks used (thread time of the event loop during each tick)
        self._history: deque[tuple[float, float, int, int]] = deque()
        self._task: asyncio.Task[None] | None = None
        self._formats: tuple[tuple[bytes, bytes] | None, dict[str, tuple[bytes, bytes]]] = (None, {})
        self.wanted: set[str] = set()  # the other formats callers asked for: encoded with each sample from then on

    def header_in(self, fmt: str) -> tuple[bytes, bytes] | None:
        """The current report as the caller's opt-in asked for it: ``TEXT`` is ``header``; ``JSON`` and ``BIN``
        (``orca.dialect.encode``) are encoded with each sample once a caller asked for them (only that first
        request, per format and process, serializes)."""
        header = self.header
        if fmt == "TEXT" or header is None:
            return header
        made_for, made = self._formats
        if made_for is header and fmt in made:
            return made[fmt]
        self.wanted.add(fmt)
        self.publish_formats()
        return self._formats[1].get(fmt)

    def publish_formats(self) -> None:
        """Encode the current report in every wanted format (called by each tick that publishes a report)."""
        header, report = self.header, self.report
        if header is None or report is None or not self.wanted:
            return
        made_for, made = self._formats
        if made_for is not header:
            made = {}
        for fmt in self.wanted - made.keys():
            made[fmt] = dialect.encode(report, fmt, self.decimals)
            self.encodes += 1
        self._formats = (header, made)

    def totals(self) -> tuple[float, int, int, int]:
        """CPU seconds used, requests, errors (all cumulative) and requests in flight, now: this process's.
        ``secure_orca.workers`` sums them over a server's processes instead."""
        c = self.counters
        return self._cpu_clock(), c.requests, c.errors, c.in_flight

    def sample(self, now: float) -> LoadReport:
        """Take one sample at monotonic time ``now`` and return the report."""
        cpu, requests, errors, in_flight = self.totals()
        self._history.append((now, cpu, requests, errors))
        while len(self._history) > 2 and now - self._history[1][0] >= RATE_WINDOW:
            self._history.popleft()
        then, cpu_then, requests_then, errors_then = self._history[0]
        elapsed = now - then
        fields: dict[str, float] = {}
        if elapsed > 0:
            fields["cpu_utilization"] = max(0.0, (cpu - cpu_then) / elapsed / self.sources.cpu_capacity())
            fields["rps_fractional"] = max(0, requests - requests_then) / elapsed
            fields["eps"] = max(0, errors - errors_then) / elapsed
        mem = self.sources.mem_utilization()
        if mem is not None:
            fields["mem_utilization"] = mem
        return LoadReport.of(fields, named_metrics={IN_FLIGHT_METRIC: float(max(0, in_flight))})

    def tick(self) -> None:
        """Sample and publish; a failure is logged and counted, and the last report stays in force."""
        started = time.thread_time()
        try:
            report = self.sample(time.monotonic())
            value = encode_text(report, self.decimals)
        except Exception:
            self.errors += 1
            log.exception("load sampler tick failed; keeping the last report")
            return
        finally:
            self.cpu_seconds += time.thread_time() - started
        self.encodes += 1
        self.report = report
        self.header = (HEADER.encode(), value.encode())
        self.publish_formats()
        self.ticks += 1

    def start(self) -> None:
        """Publish a complete first report (rates need two samples), then tick every ``interval`` on the running
        event loop: between requests, never holding a request up, and without a thread contending for the GIL."""
        self.sample(time.monotonic())
        time.sleep(min(self.interval, 0.1))
        self.tick()
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            self.tick()

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None
