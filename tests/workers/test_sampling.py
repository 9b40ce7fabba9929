"""The supervisor's sampler sums the workers' slots; a reaped worker's counts stay, its in-flight requests go."""

from __future__ import annotations

import os

from secure_orca.orca.report import parse_text
from secure_orca.server.sampler import IN_FLIGHT_METRIC, parse_stat_cpu
from secure_orca.workers.board import Board, Slot
from secure_orca.workers.sampling import ServerSampler, WorkerSampler


def test_cpu_seconds_reads_a_stat_line_whose_name_has_spaces() -> None:
    ticks = os.sysconf("SC_CLK_TCK")
    line = f"42 (a b) c) S 1 42 42 0 -1 4194560 100 0 0 0 {3 * ticks} {ticks} 0 0 20 0 1 0 1 1 1"
    assert parse_stat_cpu(line, ticks) == 4.0


def test_the_report_is_the_sum_over_live_workers() -> None:
    board = Board(2)
    pids = {0: 101, 1: 102}
    board.write(0, Slot(101, 10, 1, 3))
    board.write(1, Slot(102, 20, 2, 4))
    sampler = ServerSampler(board, lambda: pids, 0.1)
    _, requests, errors, in_flight = sampler.totals()
    assert (requests, errors, in_flight) == (30, 3, 7)


def test_a_reaped_workers_in_flight_requests_do_not_stick() -> None:
    board = Board(2)
    pids = {0: 101, 1: 102}
    board.write(0, Slot(101, 10, 1, 3))
    board.write(1, Slot(102, 20, 2, 4))
    sampler = ServerSampler(board, lambda: pids, 0.1)
    del pids[0]
    sampler.retire(0, 101)
    _, requests, errors, in_flight = sampler.totals()
    assert (requests, errors, in_flight) == (30, 3, 4)  # its requests still counted, its in-flight gone
    assert board.read(0) == Slot(0, 0, 0, 0)


def test_a_stale_slot_of_another_pid_is_not_counted() -> None:
    board = Board(1)
    board.write(0, Slot(999, 50, 5, 5))  # left by a worker that is not the one in the slot now
    sampler = ServerSampler(board, lambda: {0: 101}, 0.1)
    assert sampler.totals()[1:] == (0, 0, 0)


def test_workers_serve_the_published_bytes_and_publish_their_counters() -> None:
    board = Board(2)
    pids = {0: os.getpid(), 1: 102}
    supervisor = ServerSampler(board, lambda: pids, 0.1)
    worker = WorkerSampler(board, 0.1)
    worker.index = 0
    worker.counters.requests, worker.counters.in_flight = 7, 2
    worker.tick()  # before any report: counters published, no header
    assert worker.header is None and board.read(0) == Slot(os.getpid(), 7, 0, 2)
    supervisor.sample(0.0)
    supervisor.tick()
    worker.tick()
    assert supervisor.header is not None and worker.header == supervisor.header
    assert worker.report is not None
    assert worker.report.named_metrics[IN_FLIGHT_METRIC] == 2.0
    assert worker.report == parse_text(supervisor.header[1].decode())
    same = worker.header
    worker.tick()  # no new sample: the same tuple, so "once per sample" still sees one sample
    assert worker.header is same
