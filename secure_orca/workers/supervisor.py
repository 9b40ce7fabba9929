"""``serve --workers N``: one supervisor process and N forked workers that accept on one listening socket.

The supervisor binds the socket, assembles the server once (so a bad flag or an unreadable credential is one
error, before any worker exists), publishes the first load report, then forks the workers. Each worker runs
the whole gate on its own event loop. The supervisor then only samples: every interval it sums the workers'
counters and publishes the server's one report (``sampling``), and it reaps and restarts a worker that died.
SIGTERM or SIGINT is passed to every worker, which drains as a single process does; a worker still running after
the graceful period and a margin is killed.

One shared socket rather than ``SO_REUSEPORT`` per worker: the kernel hashes a reuseport connection to a worker
by its addresses, so the few long-lived connections of a load balancer may all land on one busy worker, while
from a shared queue the workers accept in turn: each publishes the connections it holds on the board, and leaves
a queued connection to a live sibling that holds fewer (``server.http.accept``, ``workers.balance``).

The credential files are read by one process of the supervisor's, the credential reader (``credentials``):
workers install the bytes it accepted, so every worker holds the same trust and none opens a credential file.
With ``--audit-log-path`` one more child, the audit writer (``auditwriter``), writes the one file for every
worker; it is stopped last, after the workers drained to it.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import select
import signal
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from types import FrameType

from secure_orca.server.assembly import Server
from secure_orca.server.http.serve import bind_address
from secure_orca.server.options.serving import MAX_WORKERS
from secure_orca.server.sampler import Sources
from secure_orca.workers.auditwriter import AuditWriter
from secure_orca.workers.balance import BoardBalance
from secure_orca.workers.board import SupervisorFigures
from secure_orca.workers.credentials import CredentialReader
from secure_orca.workers.lifeline import die_with_parent, offer_to_oom_killer
from secure_orca.workers.sampling import ServerSampler, WorkerSampler

log = logging.getLogger("secure_orca.workers")
KILL_MARGIN = 5.0  # seconds after the graceful period before a worker that has not stopped is killed
_QUICK_DEATH = 1.0  # a worker that dies sooner than this after its start is restarted with a back-off
RESTART_DELAY = 1.0  # seconds before a child other than a worker is started again


def default_workers(sources: Sources | None = None) -> int:
    """One worker per CPU the cgroup quota grants, rounded up, as Go's GOMAXPROCS does since Go 1.25."""
    return max(1, min(MAX_WORKERS, math.ceil((sources or Sources()).cpu_capacity())))


@dataclass
class Child:
    """One supervised process: its name, what it runs, its pid, when its restart is due and its stop order.

    Children stop in rising ``stop_order``, each group after the group before it exited. ``stop`` asks a child to
    stop (SIGTERM, or the audit writer's end message; given its pid and the group's deadline). A child that
    ``drains`` has work left after the others stopped: dead when its group stops, it is started again first.
    ``slot``: the worker's board slot (retired when it dies, its restarts counted, quick deaths backed off)."""

    name: str
    run: Callable[[], int]
    stop_order: int = 0
    stop: Callable[[int, float], None] = field(default=lambda pid, _: _signal(pid, signal.SIGTERM))
    drains: bool = False
    slot: int | None = None
    restart_delay: float = RESTART_DELAY
    pid: int = 0
    due: float | None = None  # when its restart is due
    started: float = 0.0
    quick_deaths: int = 0

    def delay(self, now: float) -> float:
        """Seconds before this child, which just died, starts again: a worker that keeps dying quickly backs off."""
        if self.slot is None:
            return self.restart_delay
        self.quick_deaths = self.quick_deaths + 1 if now - self.started < _QUICK_DEATH else 0
        return min(30.0, 2.0 ** (self.quick_deaths - 1)) if self.quick_deaths else self.restart_delay


class Supervisor:
    """Forks ``workers`` copies of ``server`` (assembled with a ``WorkerSampler``) and samples for them all.

    ``work`` is what a worker runs, given its server (serve until SIGTERM; returns the exit status)."""

    def __init__(
        self,
        server: Server,
        sock: socket.socket,
        workers: int,
        work: Callable[[Server], int],
        metrics: ThreadingHTTPServer | None = None,
        credentials: CredentialReader | None = None,
        audit_writer: AuditWriter | None = None,
    ) -> None:
        if not isinstance(server.sampler, WorkerSampler):
            raise TypeError("a supervised server is assembled with a WorkerSampler")
        self.server = server
        self.sock = sock
        self.work = work
        self.board = server.sampler.board
        self.restarts = 0
        self.stopping = False
        self.stop_stage = 0  # the stop order whose stop has begun (once stopping)
        self.workers = workers
        load = server.config.load_metrics
        self.sampler = ServerSampler(self.board, self._worker_pids, load.interval, load.decimals)
        self._wake: tuple[int, int] | None = None
        self.metrics = metrics  # bound by the caller; served by a process of its own (workers.metrics)
        self.credentials = credentials or CredentialReader(server)  # the one reader of credential files
        self.audit_writer = audit_writer  # --audit-log-path: the one process that writes it (workers.auditwriter)
        self.children = self._table()

    def _table(self) -> list[Child]:
        """Every supervised child, in start order: the one table that reaping, restarting and stopping walk."""
        table = []
        if self.metrics is not None:
            table.append(Child("the metrics process", self._serve_metrics))
        table.append(Child("the credential reader", self._read_credentials))
        if self.audit_writer is not None:  # stopped last: it writes what the workers sent before they exited
            end = self.audit_writer.ask_to_end
            table.append(Child("the audit writer", self._write_audit, 1, lambda _, deadline: end(deadline), True))
        for index in range(self.workers):
            table.append(Child(f"worker {index}", self._worker(index), slot=index, restart_delay=0.0))
        return table

    def _worker_pids(self) -> dict[int, int]:
        """slot -> live worker."""
        return {c.slot: c.pid for c in self.children if c.slot is not None and c.pid}

    # ---- the supervisor's loop ----------------------------------------------------------------------------

    def run(self) -> int:
        wake_read, wake_write = os.pipe()
        os.set_blocking(wake_read, False)
        os.set_blocking(wake_write, False)
        self._wake = wake_read, wake_write
        previous = {sig: signal.signal(sig, self._on_stop) for sig in (signal.SIGTERM, signal.SIGINT)}
        previous[signal.SIGCHLD] = signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes select at once
        old_fd = signal.set_wakeup_fd(wake_write)
        try:
            if self.server.config.load_metrics.enabled:
                self.sampler.prime()
            for child in self.children:
                self._start(child)
            host, port = self.sock.getsockname()[:2]
            log.info("Running on https://%s (CTRL + C to quit) with %d workers", bind_address(host, port), self.workers)
            while not self.stopping:
                select.select([wake_read], [], [], self.sampler.interval)
                self._drain(wake_read)
                self._reap()
                self._restart_due()
                if self.server.config.load_metrics.enabled:
                    self.sampler.tick()
                self._publish_figures()
            return self._stop_all()
        finally:
            signal.set_wakeup_fd(old_fd)
            for sig, handler in previous.items():
                # Stopped: a further SIGTERM or SIGINT is ignored rather than let kill it before it exits 0.
                signal.signal(sig, signal.SIG_IGN if self.stopping and sig != signal.SIGCHLD else handler)
            os.close(wake_read)
            os.close(wake_write)
            self.sock.close()

    def _on_stop(self, signum: int, frame: FrameType | None) -> None:
        self.stopping = True

    @staticmethod
    def _drain(fd: int) -> None:
        try:
            while os.read(fd, 512):
                pass
        except BlockingIOError:
            pass

    # ---- the children -------------------------------------------------------------------------------------

    def _fork(self, name: str, run: Callable[[], int]) -> int:
        """Fork a child that runs ``run`` with default signal handling and none of the supervisor's pipes."""
        supervisor = os.getpid()
        pid = os.fork()
        if pid == 0:
            status = 1
            try:
                signal.set_wakeup_fd(-1)
                for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD):
                    signal.signal(sig, signal.SIG_DFL)
                die_with_parent(supervisor)  # a killed supervisor's workers drain and stop, as on SIGTERM
                if self._wake is not None:
                    os.close(self._wake[0])
                    os.close(self._wake[1])
                status = run()
            except BaseException:
                log.exception("%s failed", name)
            finally:
                logging.shutdown()
                os._exit(status)
        return pid

    def _start(self, child: Child) -> None:
        child.pid, child.due, child.started = self._fork(child.name, child.run), None, time.monotonic()

    def _worker(self, index: int) -> Callable[[], int]:
        def work() -> int:
            offer_to_oom_killer()  # under a memory limit the kernel takes a worker, never the supervisor
            if self.metrics is not None:
                self.metrics.socket.close()
            sampler = self.server.sampler
            assert isinstance(sampler, WorkerSampler)
            sampler.take_slot(index)
            self.credentials.follow()  # the current generation, before serving
            if self.audit_writer is not None:
                self.audit_writer.worker(self.server.audit, index)
            return self.work(self.server.balanced(BoardBalance(self.board, index)))

        return work

    def _serve_metrics(self) -> int:
        assert self.metrics is not None
        self.sock.close()
        self.metrics.serve_forever()
        return 0

    def _close_listeners(self) -> None:
        """In a child that serves no one: the inherited listening sockets closed."""
        self.sock.close()
        if self.metrics is not None:
            self.metrics.socket.close()

    def _read_credentials(self) -> int:
        self._close_listeners()
        return self.credentials.serve()

    def _write_audit(self) -> int:
        assert self.audit_writer is not None
        self._close_listeners()
        return self.audit_writer.serve()

    def _publish_figures(self) -> None:
        s = self.sampler
        self.board.write_supervisor(SupervisorFigures(self.restarts, s.ticks, s.errors, s.encodes, s.cpu_seconds))

    def _stopped(self, child: Child) -> bool:
        return self.stopping and child.stop_order <= self.stop_stage

    def _reap(self) -> None:
        """Collect every child that exited; retire a worker's slot, and schedule a restart unless it is stopping."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self._ended(pid, status)

    def _ended(self, pid: int, status: int) -> None:
        child = next((c for c in self.children if c.pid == pid), None)
        if child is None:
            return
        child.pid = 0
        if child.slot is not None:
            if self.metrics is not None:  # workers expose their counters only to a /metrics
                from secure_orca.workers import metrics  # prometheus-client: a tenth of serve's start-up

                metrics.retire(self.board, child.slot)  # its counters stay in the server's /metrics
            self.sampler.retire(child.slot, pid)
        if self._stopped(child):
            return
        now = time.monotonic()
        delay = child.delay(now)
        if child.slot is not None:
            self.restarts += 1
        later = f" in {delay:g}s" if delay > child.restart_delay else ""
        log.warning("%s (pid %d) ended (%s); restarting it%s", child.name, pid, _describe(status), later)
        child.due = now + delay

    def _restart_due(self) -> None:
        now = time.monotonic()
        for child in self.children:
            if child.due is not None and child.due <= now and not self.stopping:
                self._start(child)

    def _stop_all(self) -> int:
        """Stop the children group by group in their stop order: ask each to stop, wait for the group until the
        graceful period and a margin have passed, then kill what is left."""
        for order in sorted({c.stop_order for c in self.children}):
            self.stop_stage = order
            group = [c for c in self.children if c.stop_order == order]
            deadline = time.monotonic() + self.server.options.graceful_timeout + KILL_MARGIN
            for child in group:
                child.due = None
                if child.drains and not child.pid:
                    self._start(child)
                if child.pid:
                    child.stop(child.pid, deadline)
            while any(c.pid for c in group) and time.monotonic() < deadline:
                self._reap()
                time.sleep(0.02)
            for child in group:
                if child.pid:
                    log.warning("%s (pid %d) did not stop in time; killing it", child.name, child.pid)
                    _signal(child.pid, signal.SIGKILL)
            while any(c.pid for c in group):
                pid, status = os.waitpid(-1, 0)
                self._ended(pid, status)
        return 0


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def _describe(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"signal {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exit status {os.waitstatus_to_exitcode(status)}"
