"""The supervisor's children come from one table: each record names the child and holds its stop order, so a
new kind of child is one more row (and its spawn function), not a branch in reaping, restarting and stopping."""

from __future__ import annotations

import argparse
import os
import signal
import socket
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from secure_orca import pki
from secure_orca.cli import serve as serve_cli
from secure_orca.credentials import devpki
from secure_orca.lab import launcher as lb
from secure_orca.lab import replicas as launch
from secure_orca.server.assembly import Server
from secure_orca.server.config import build_config
from secure_orca.workers.auditwriter import AuditWriter
from secure_orca.workers.board import Board
from secure_orca.workers.sampling import WorkerSampler
from secure_orca.workers.supervisor import Child, Supervisor

WORKERS = 3


def assembled(dev: pki.DevPKI, *extra: str) -> Server:
    parser = argparse.ArgumentParser()
    serve_cli.add_arguments(parser)
    argv = launch.serve_argv(dev, lb.replica_flags(dev, "front-proxy", "--workers", str(WORKERS), *extra))
    config = build_config(parser.parse_args(argv[argv.index("serve") + 1 :]))
    return Server.assemble(config, sampler=WorkerSampler(Board(WORKERS), 1.0))


def table(supervisor: Supervisor) -> list[tuple[str, int, bool, int | None]]:
    return [(c.name, c.stop_order, c.drains, c.slot) for c in supervisor.children]


def test_every_child_is_a_row_and_the_audit_writer_stops_last(tmp_path: Path) -> None:
    server = assembled(devpki.generate(tmp_path / "pki"), "--audit-log-path", str(tmp_path / "audit.log"))
    metrics = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    with socket.socket() as sock, metrics:
        writer = AuditWriter(server.config.audit, WORKERS)
        supervisor = Supervisor(server, sock, WORKERS, lambda _: 0, metrics, audit_writer=writer)
        assert table(supervisor) == [
            ("the metrics process", 0, False, None),
            ("the credential reader", 0, False, None),
            ("the audit writer", 1, True, None),
            ("worker 0", 0, False, 0),
            ("worker 1", 0, False, 1),
            ("worker 2", 0, False, 2),
        ]
        assert all(c.pid == 0 and c.due is None for c in supervisor.children)  # nothing forked before run()


def test_without_metrics_or_audit_log_the_table_holds_the_reader_and_the_workers(tmp_path: Path) -> None:
    server = assembled(devpki.generate(tmp_path / "pki"))
    with socket.socket() as sock:
        supervisor = Supervisor(server, sock, WORKERS, lambda _: 0)
        assert [name for name, *_ in table(supervisor)] == ["the credential reader", "worker 0", "worker 1", "worker 2"]


def test_a_new_row_is_reaped_restarted_and_stopped_in_its_order(tmp_path: Path) -> None:
    """Real forked children, only the table's rows: one killed is restarted after its delay; on stop, group 0
    ends by SIGTERM before group 1 is asked, and a dead child that drains is started again for its stop."""
    server = assembled(devpki.generate(tmp_path / "pki"))
    stopped = tmp_path / "stopped"

    def pause() -> int:
        signal.pause()  # SIGTERM (default handling in a child) ends it
        return 0

    def drain() -> int:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        while not stopped.exists():
            time.sleep(0.01)
        (tmp_path / "drained").touch()
        return 0

    def ask(pid: int, deadline: float) -> None:
        assert not any(c.pid for c in supervisor.children if c.stop_order == 0)  # group 0 exited first
        stopped.touch()

    with socket.socket() as sock:
        supervisor = Supervisor(server, sock, WORKERS, lambda _: 0)
        sixth = Child("a sixth child", pause, restart_delay=0.0)
        last = Child("a draining child", drain, stop_order=1, stop=ask, drains=True)
        supervisor.children = [sixth, last]
        for child in supervisor.children:
            supervisor._start(child)
        first = sixth.pid
        os.kill(first, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while sixth.due is None and time.monotonic() < deadline:
            supervisor._reap()
            time.sleep(0.01)
        assert sixth.pid == 0 and sixth.due is not None
        supervisor._restart_due()
        assert sixth.pid not in (0, first) and sixth.due is None
        os.kill(last.pid, signal.SIGKILL)  # dead when its stop begins: started again to drain
        while last.pid and time.monotonic() < deadline:
            supervisor._reap()
            time.sleep(0.01)
        assert last.pid == 0 and last.due is not None
        supervisor.stopping = True
        assert supervisor._stop_all() == 0
        assert (tmp_path / "drained").exists() and all(c.pid == 0 and c.due is None for c in supervisor.children)
