"""One report per server: the supervisor samples the server as a whole, workers read what it published.

``ServerSampler`` (the supervisor) sums every worker's counters from the board, reads CPU and memory for the
whole process tree once per sample, serializes the report once and publishes it. ``WorkerSampler`` (each worker)
keeps today's hot path (the request path reads ``sampler.header`` and bumps ``sampler.counters``); its tick, four
times per interval, copies those counters to its slot and takes the published report when its sequence number
changes, so every connection and every out-of-band stream of every worker gets the same bytes for the same
sample, within a quarter of an interval of one another.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterable

from secure_orca.orca.headers import REPORT as HEADER
from secure_orca.orca.report import DEFAULT_DECIMALS, parse_text
from secure_orca.server.sampler import Sampler, Sources, parse_stat_cpu, parse_statm_rss
from secure_orca.workers.board import EMPTY, Board, Slot

log = logging.getLogger("secure_orca.workers")
_TICK = os.sysconf("SC_CLK_TCK")
EXPOSITION_PERIOD = 1.0  # seconds between a worker's /metrics renderings
LOOKS_PER_INTERVAL = 4  # a worker looks for a new report this often per sample: the workers lag one another by
# at most a quarter of the interval (plus their loops' delays), not a whole one
_NAME = HEADER.encode()


class WorkerSampler(Sampler):
    """A worker's sampler: publishes its counters to its slot and serves the supervisor's report."""

    def __init__(self, board: Board, interval: float, decimals: int = DEFAULT_DECIMALS) -> None:
        super().__init__(interval, decimals=decimals)
        self.board = board
        self.index = -1  # set in the worker after the fork
        self.exposition: Callable[[], bytes] | None = None  # this worker's /metrics, rendered once a second
        self._sequence = 0
        self._every = max(1, round(EXPOSITION_PERIOD * LOOKS_PER_INTERVAL / interval))
        self._count = 0
        self._too_large = False

    def take_slot(self, index: int) -> None:
        """In the worker after the fork: the board slot it publishes its counters and exposition to."""
        self.index = index

    def render_metrics_with(self, exposition: Callable[[], bytes]) -> None:
        """This worker's /metrics, rendered by ``exposition`` once a second into its region of the board."""
        self.exposition = exposition

    def tick(self) -> None:
        c = self.counters
        self.board.write(self.index, Slot(os.getpid(), c.requests, c.errors, c.in_flight))
        self._count += 1
        if self.exposition is not None and (self._count - 1) % self._every == 0:  # the first tick, then each N
            self._expose(self.exposition)
        if self.board.report.sequence() == self._sequence:
            return
        got = self.board.report.read()
        if got is None:
            return
        self._sequence, value = got
        self.report = parse_text(value.decode("ascii"))
        self.header = (_NAME, value)  # the same bytes in every worker; one tuple per sample in this worker
        self.publish_formats()  # JSON and BIN, once a caller asked for them
        self.ticks += 1

    def _expose(self, exposition: Callable[[], bytes]) -> None:
        try:
            self.board.expositions[self.index].publish(exposition())
        except ValueError:  # larger than its region: the last one stays, and it is said once
            if not self._too_large:
                self._too_large = True
                log.error("this worker's /metrics exposition does not fit the shared board; it is not updated")

    def start(self) -> None:
        self.tick()
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval / LOOKS_PER_INTERVAL)
            self.tick()


class TreeSources(Sources):
    """CPU capacity and memory as ``Sources``, but the resident memory of the supervisor and every live worker."""

    def __init__(self, pids: Callable[[], Iterable[int]]) -> None:
        super().__init__()
        self._pids = pids

    def rss_bytes(self) -> int | None:
        total = 0
        for pid in (os.getpid(), *self._pids()):
            statm = self._read(f"proc/{pid}/statm")
            if statm:
                total += parse_statm_rss(statm, self._page)
        return total


class ServerSampler(Sampler):
    """The supervisor's sampler: the server's totals over its workers, published to the board."""

    def __init__(
        self, board: Board, pids: Callable[[], dict[int, int]], interval: float, decimals: int = DEFAULT_DECIMALS
    ) -> None:
        super().__init__(interval, sources=TreeSources(lambda: pids().values()), decimals=decimals)
        self.board = board
        self._pids = pids  # slot index -> pid of the live worker there
        self.retired = EMPTY  # what reaped workers had counted, so the totals never go back
        self._last_cpu: dict[int, float] = {}

    def retire(self, index: int, pid: int) -> None:
        """A worker was reaped: keep its counts in the totals, drop its in-flight requests, empty its slot.
        Its CPU is now in ``os.times()``'s children figures."""
        slot = self.board.read(index) or EMPTY
        if slot.pid == pid:
            r = self.retired
            self.retired = Slot(0, r.requests + slot.requests, r.errors + slot.errors, 0)
        self.board.clear(index)
        self._last_cpu.pop(pid, None)

    def totals(self) -> tuple[float, int, int, int]:
        own = os.times()
        cpu = own.user + own.system + own.children_user + own.children_system
        requests, errors, in_flight = self.retired.requests, self.retired.errors, 0
        for index, pid in self._pids().items():
            cpu += self._cpu_of(pid)
            slot = self.board.read(index)
            if slot is not None and slot.pid == pid:
                requests += slot.requests
                errors += slot.errors
                in_flight += slot.in_flight
        return cpu, requests, errors, in_flight

    def _cpu_of(self, pid: int) -> float:
        stat = self.sources._read(f"proc/{pid}/stat")
        if stat:
            with contextlib.suppress(ValueError, IndexError):
                self._last_cpu[pid] = parse_stat_cpu(stat, _TICK)
        return self._last_cpu.get(pid, 0.0)

    def tick(self) -> None:
        before = self.header
        super().tick()
        if self.header is not None and self.header is not before:
            self.board.report.publish(self.header[1])

    def prime(self) -> None:
        """Publish a complete first report (rates need two samples) before any worker starts."""
        self.sample(time.monotonic())
        time.sleep(min(self.interval, 0.1))
        self.tick()
