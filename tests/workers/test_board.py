"""The shared board on its own: one writer per region, readers that never take a torn value."""

from __future__ import annotations

import os
import struct

import pytest

from secure_orca.workers.board import REPORT_MAX, Board, Slot, SupervisorFigures


def test_a_published_report_is_read_back_with_its_sequence() -> None:
    board = Board(2)
    assert board.report.read() is None
    first = board.report.publish(b"TEXT cpu_utilization=0.5")
    second = board.report.publish(b"TEXT cpu_utilization=0.25")
    assert first < second and second % 2 == 0
    assert board.report.read() == (second, b"TEXT cpu_utilization=0.25")


def test_a_report_being_written_is_never_read() -> None:
    board = Board(1)
    board.report.publish(b"TEXT rps_fractional=1")
    struct.pack_into("<Q", board.memory, 0, board.report.sequence() + 1)  # a writer stopped mid-write
    assert board.report.read() is None


def test_a_corrupted_report_is_never_read() -> None:
    board = Board(1)
    board.report.publish(b"TEXT rps_fractional=1")
    board.memory[16] ^= 0xFF  # the value's first byte, behind an even sequence number
    assert board.report.read() is None


def test_an_oversized_report_is_refused() -> None:
    with pytest.raises(ValueError, match="do not fit"):
        Board(1).report.publish(b"x" * (REPORT_MAX + 1))


def test_slots_are_separate_and_a_cleared_slot_is_empty() -> None:
    board = Board(3)
    board.write(0, Slot(11, 5, 1, 2))
    board.write(2, Slot(13, 7, 0, 4))
    assert board.read(0) == Slot(11, 5, 1, 2) and board.read(1) == Slot(0, 0, 0, 0)
    board.clear(0)
    assert board.read(0) == Slot(0, 0, 0, 0) and board.read(2) == Slot(13, 7, 0, 4)


def test_a_forked_child_writes_what_the_parent_reads() -> None:
    board = Board(1)
    pid = os.fork()
    if pid == 0:
        board.write(0, Slot(os.getpid(), 3, 1, 0))
        os._exit(0)
    os.waitpid(pid, 0)
    assert board.read(0) == Slot(pid, 3, 1, 0)


def test_a_seqlocked_value_being_written_is_never_read_and_a_successor_goes_on() -> None:
    board = Board(1)
    board.write_supervisor(SupervisorFigures(restarts=2))
    struct.pack_into("<Q", board.memory, board.supervisor.offset, board.supervisor.sequence() + 1)  # died mid-write
    assert board.supervisor.read() is None and board.read_supervisor() == SupervisorFigures()
    board.write_supervisor(SupervisorFigures(restarts=3))  # a successor starts from the odd sequence in memory
    assert board.supervisor.sequence() % 2 == 0 and board.read_supervisor() == SupervisorFigures(restarts=3)
