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
from dataclasses import replace
from http.server import ThreadingHTTPServer
from types import FrameType

from secure_orca.server.assembly import Server
from secure_orca.server.http.serve import bind_address
from secure_orca.server.options.serving import MAX_WORKERS
from secure_orca.server.sampler import Sources
from secure_orca.workers import metrics
from secure_orca.workers.auditwriter import AuditWriter
from secure_orca.workers.balance import BoardBalance
from secure_orca.workers.board import SupervisorFigures
from secure_orca.workers.credentials import CredentialReader
from secure_orca.workers.lifeline import die_with_parent, offer_to_oom_killer
from secure_orca.workers.sampling import ServerSampler, WorkerSampler

log = logging.getLogger("secure_orca.workers")
KILL_MARGIN = 5.0  # seconds after the graceful period before a worker that has not stopped is killed
_QUICK_DEATH = 1.0  # a worker that dies sooner than this after its start is restarted with a back-off


def default_workers(sources: Sources | None = None) -> int:
    """One worker per CPU the cgroup quota grants, rounded up, as Go's GOMAXPROCS does since Go 1.25."""
    return max(1, min(MAX_WORKERS, math.ceil((sources or Sources()).cpu_capacity())))


class Supervisor:
    """Forks ``workers`` copies of ``server`` (assembled with a ``WorkerSampler``) and samples for them all.

    ``work`` is what a worker runs (serve until SIGTERM; returns the exit status)."""

    def __init__(
        self,
        server: Server,
        sock: socket.socket,
        workers: int,
        work: Callable[[], int],
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
        self.pids: dict[int, int] = {}  # slot -> live worker
        self.started: dict[int, float] = {}
        self.pending: dict[int, float] = {}  # slot -> when its restart is due
        self.quick_deaths: dict[int, int] = {}
        self.restarts = 0
        self.stopping = False
        self.workers = workers
        load = server.config.load_metrics
        self.sampler = ServerSampler(self.board, lambda: self.pids, load.interval, load.decimals)
        self._wake: tuple[int, int] | None = None
        self.metrics = metrics  # bound by the caller; served by a process of its own (workers.metrics)
        self.metrics_pid = 0
        self.metrics_due: float | None = None
        self.credentials = credentials or CredentialReader(server)  # the one reader of credential files
        self.audit_writer = audit_writer  # --audit-log-path: the one process that writes it (workers.auditwriter)

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
            if self.metrics is not None:
                self._spawn_metrics()
            self._spawn_reader()
            if self.audit_writer is not None:
                self._spawn_audit_writer()
            for index in range(self.workers):
                self._spawn(index)
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
                signal.signal(sig, handler)
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

    # ---- workers ------------------------------------------------------------------------------------------

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

    def _spawn(self, index: int) -> None:
        def work() -> int:
            offer_to_oom_killer()  # under a memory limit the kernel takes a worker, never the supervisor
            if self.metrics is not None:
                self.metrics.socket.close()
            sampler = self.server.sampler
            assert isinstance(sampler, WorkerSampler)
            sampler.index = index
            self.server.options = replace(self.server.options, balance=BoardBalance(self.board, index))
            self.credentials.follow()  # the current generation, before serving
            if self.audit_writer is not None:
                self.audit_writer.worker(self.server.audit, index)
            return self.work()

        self.pids[index] = self._fork(f"worker {index}", work)
        self.started[index] = time.monotonic()

    def _spawn_metrics(self) -> None:
        metrics = self.metrics
        assert metrics is not None

        def serve() -> int:
            self.sock.close()
            metrics.serve_forever()
            return 0

        self.metrics_pid = self._fork("the metrics process", serve)

    def _close_listeners(self) -> None:
        """In a child that serves no one: the inherited listening sockets closed."""
        self.sock.close()
        if self.metrics is not None:
            self.metrics.socket.close()

    def _spawn_reader(self) -> None:
        self.credentials.spawn(self._fork, self._close_listeners)

    def _spawn_audit_writer(self) -> None:
        assert self.audit_writer is not None
        self.audit_writer.spawn(self._fork, self._close_listeners)

    def _publish_figures(self) -> None:
        s = self.sampler
        self.board.write_supervisor(SupervisorFigures(self.restarts, s.ticks, s.errors, s.encodes, s.cpu_seconds))

    def _reap(self) -> None:
        """Collect every child that exited; retire a worker's slot, and schedule a restart unless stopping."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == self.metrics_pid:
                self.metrics_pid = 0
                if not self.stopping:
                    log.warning("the metrics process (pid %d) ended (%s); restarting it", pid, _describe(status))
                    self.metrics_due = time.monotonic() + 1.0
                continue
            if pid == self.credentials.pid:
                self.credentials.pid = 0
                if not self.stopping:
                    log.warning("the credential reader (pid %d) ended (%s); restarting it", pid, _describe(status))
                    self.credentials.due = time.monotonic() + 1.0
                continue
            if self.audit_writer is not None and self.audit_writer.reaped(pid, _describe(status)):
                continue
            index = next((i for i, p in self.pids.items() if p == pid), None)
            if index is None:
                continue
            del self.pids[index]
            metrics.retire(self.board, index)  # its counters stay in the server's /metrics
            self.sampler.retire(index, pid)
            if self.stopping:
                continue
            self.restarts += 1
            lived = time.monotonic() - self.started.pop(index, 0.0)
            deaths = self.quick_deaths.get(index, 0) + 1 if lived < _QUICK_DEATH else 0
            self.quick_deaths[index] = deaths
            delay = min(30.0, 2.0 ** (deaths - 1)) if deaths else 0.0
            log.warning(
                "worker %d (pid %d) ended (%s); restarting it%s",
                index,
                pid,
                _describe(status),
                f" in {delay:g}s" if delay else "",
            )
            self.pending[index] = time.monotonic() + delay

    def _restart_due(self) -> None:
        now = time.monotonic()
        if self.metrics_due is not None and self.metrics_due <= now and not self.stopping:
            self.metrics_due = None
            self._spawn_metrics()
        if self.credentials.due is not None and self.credentials.due <= now and not self.stopping:
            self.credentials.due = None
            self._spawn_reader()
        if self.audit_writer is not None and not self.stopping and self.audit_writer.restart_due(now):
            self._spawn_audit_writer()
        for index, due in list(self.pending.items()):
            if due <= now and not self.stopping:
                del self.pending[index]
                self._spawn(index)

    def _stop_all(self) -> int:
        """SIGTERM to every worker; wait for them to drain, then kill what is left."""
        for pid in (*self.pids.values(), self.metrics_pid, self.credentials.pid):
            if pid:
                _signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + self.server.options.graceful_timeout + KILL_MARGIN
        while (self.pids or self.metrics_pid or self.credentials.pid) and time.monotonic() < deadline:
            self._reap()
            time.sleep(0.02)
        for pid in (*self.pids.values(), self.metrics_pid, self.credentials.pid):
            if pid:
                log.warning("pid %d did not stop in time; killing it", pid)
                _signal(pid, signal.SIGKILL)
        while self.pids or self.metrics_pid or self.credentials.pid:
            pid, _ = os.waitpid(-1, 0)
            self.pids = {i: p for i, p in self.pids.items() if p != pid}
            self.metrics_pid = 0 if pid == self.metrics_pid else self.metrics_pid
            self.credentials.pid = 0 if pid == self.credentials.pid else self.credentials.pid
        if self.audit_writer is not None:  # last: it writes what the workers sent before they exited
            deadline = time.monotonic() + self.server.options.graceful_timeout + KILL_MARGIN
            self.audit_writer.end(deadline, self._spawn_audit_writer)
        return 0


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def _describe(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"signal {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exit status {os.waitstatus_to_exitcode(status)}"
