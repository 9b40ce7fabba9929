"""The memory a server's processes share: one published load report, and per worker a counter slot and its
/metrics exposition.

An anonymous shared mapping, made by the supervisor before it forks, so every worker maps the same pages and
nothing is on disk. Each region has exactly one writer: the supervisor's sampler writes the report, worker ``i``
writes slot ``i`` and exposition ``i``. Readers never lock: every region starts with a sequence number that is
odd while its writer is in the middle of a write (a seqlock, as Linux's ``seqcount_t``), and the byte regions
also carry a CRC-32 of their bytes, so a reader retries a torn read instead of using it.
"""

from __future__ import annotations

import mmap
import struct
import zlib
from dataclasses import dataclass
from typing import Any

REPORT_MAX = 1024  # bytes of the serialized header value; a report is about 120
EXPOSITION_MAX = 256 * 1024  # bytes of one worker's /metrics exposition (label sets are closed: a few KiB)
_HEAD = struct.Struct("<QII")  # sequence, length, crc32 of the value
_SEQUENCE = struct.Struct("<Q")
_SLOT = struct.Struct("<QQQq")  # pid, requests, errors, in flight (after the slot's sequence)
_HELD = struct.Struct("<QQ")  # pid, connections held: after the slot, in its line, outside its seqlock
_HELD_AT = 48
_SUPERVISOR = struct.Struct("<QQQQd")  # restarts, sampler ticks, errors, encodes, CPU seconds (after a sequence)
_LINE = 64  # one cache line per worker slot: workers never write the same line
_RETRIES = 1000  # a writer holds a region for microseconds; a reader gives up after this many


def _aligned(size: int) -> int:
    return (size + _LINE - 1) // _LINE * _LINE


class Region:
    """Bytes with one writer and many readers: a sequence number (odd while written), the length and a CRC-32."""

    def __init__(self, memory: mmap.mmap, offset: int, capacity: int) -> None:
        self.memory, self.offset, self.capacity = memory, offset, capacity
        self._sequence = 0

    @staticmethod
    def size(capacity: int) -> int:
        return _aligned(_HEAD.size + capacity)

    def publish(self, value: bytes) -> int:
        """Write ``value``; returns its sequence number (even, never 0)."""
        if len(value) > self.capacity:
            raise ValueError(f"{len(value)} bytes do not fit the board's region of {self.capacity}")
        at, sequence = self.offset, self._sequence
        _SEQUENCE.pack_into(self.memory, at, sequence + 1)  # odd: readers wait
        self.memory[at + _HEAD.size : at + _HEAD.size + len(value)] = value
        self._sequence = sequence + 2
        _HEAD.pack_into(self.memory, at, sequence + 2, len(value), zlib.crc32(value))
        return sequence + 2

    def sequence(self) -> int:
        """The sequence number now: a cheap check for a new value (odd: being written)."""
        return int(_SEQUENCE.unpack_from(self.memory, self.offset)[0])

    def read(self) -> tuple[int, bytes] | None:
        """The latest complete value and its sequence number; None before the first one is published."""
        at = self.offset
        for _ in range(_RETRIES):
            sequence, length, crc = _HEAD.unpack_from(self.memory, at)
            if sequence == 0:
                return None
            if sequence & 1 or length > self.capacity:
                continue
            value = bytes(self.memory[at + _HEAD.size : at + _HEAD.size + length])
            if self.sequence() == sequence and zlib.crc32(value) == crc:
                return sequence, value
        return None

    def resume(self) -> None:
        """Continue from the sequence number in memory (a writer that replaces one that died, maybe mid-write)."""
        self._sequence = (self.sequence() + 1) & ~1

    def clear(self) -> None:
        self._sequence = 0
        self.memory[self.offset : self.offset + _HEAD.size] = bytes(_HEAD.size)


class Seqlocked:
    """A fixed set of values with one writer and many readers: a sequence number (odd while written), then the
    values packed by ``layout``. The board's slots, the supervisor's figures and the audit writer's figures."""

    def __init__(self, memory: mmap.mmap, offset: int, layout: struct.Struct) -> None:
        self.memory, self.offset, self.layout = memory, offset, layout

    @staticmethod
    def size(layout: struct.Struct) -> int:
        return _SEQUENCE.size + layout.size

    def sequence(self) -> int:
        return int(_SEQUENCE.unpack_from(self.memory, self.offset)[0])

    def write(self, *values: object) -> None:
        """The one writer; it goes on from the sequence in memory (a successor of a writer that died mid-write
        too)."""
        sequence = (self.sequence() + 1) & ~1
        _SEQUENCE.pack_into(self.memory, self.offset, sequence + 1)  # odd: readers wait
        self.layout.pack_into(self.memory, self.offset + _SEQUENCE.size, *values)
        _SEQUENCE.pack_into(self.memory, self.offset, sequence + 2)

    def read(self) -> tuple[Any, ...] | None:
        """The values of one complete write (zeros before the first); None when a torn read kept failing (the
        writer died in the middle of a write)."""
        for _ in range(_RETRIES):
            sequence = self.sequence()
            if sequence & 1:
                continue
            values = self.latest()
            if self.sequence() == sequence:
                return values
        return None

    def latest(self) -> tuple[Any, ...]:
        """The values as they are, written completely or not (for a writer that starts from its predecessor's)."""
        return self.layout.unpack_from(self.memory, self.offset + _SEQUENCE.size)

    def clear(self) -> None:
        self.memory[self.offset : self.offset + self.size(self.layout)] = bytes(self.size(self.layout))


@dataclass(frozen=True)
class Slot:
    """One worker's cumulative counters, as it last published them (pid 0: the slot is empty)."""

    pid: int
    requests: int
    errors: int
    in_flight: int


EMPTY = Slot(0, 0, 0, 0)


@dataclass(frozen=True)
class SupervisorFigures:
    """What the supervisor publishes about itself for /metrics."""

    restarts: int = 0
    ticks: int = 0
    errors: int = 0
    encodes: int = 0
    cpu_seconds: float = 0.0


class Board:
    """The shared mapping for ``workers`` workers; create it before forking them.

    Regions: the report (the supervisor writes), one counter slot and one /metrics exposition per worker (that
    worker writes), the counters of reaped workers' expositions and the supervisor's own figures (the
    supervisor writes)."""

    def __init__(self, workers: int) -> None:
        if workers < 1:
            raise ValueError("a board needs at least one worker slot")
        self.workers = workers
        report = Region.size(REPORT_MAX)
        exposition = Region.size(EXPOSITION_MAX)
        self._slots_at = report
        self._supervisor_at = self._slots_at + workers * _LINE
        expositions_at = self._supervisor_at + _LINE
        size = expositions_at + (workers + 1) * exposition
        self.memory = mmap.mmap(-1, size)  # MAP_SHARED | MAP_ANONYMOUS: shared with the children forked after
        self.report = Region(self.memory, 0, REPORT_MAX)
        self.expositions = [
            Region(self.memory, expositions_at + i * exposition, EXPOSITION_MAX) for i in range(workers)
        ]
        self.retired = Region(self.memory, expositions_at + workers * exposition, EXPOSITION_MAX)
        self.slots = [Seqlocked(self.memory, self._slots_at + i * _LINE, _SLOT) for i in range(workers)]
        self.supervisor = Seqlocked(self.memory, self._supervisor_at, _SUPERVISOR)

    # ---- the slots: slot i written by worker i, read by the supervisor ------------------------------------

    def write(self, index: int, slot: Slot) -> None:
        """Worker ``index`` publishes its counters (only that worker ever calls this for ``index``)."""
        self.slots[index].write(slot.pid, slot.requests, slot.errors, slot.in_flight)

    def read(self, index: int) -> Slot | None:
        """Worker ``index``'s counters; None when a torn read kept failing (its writer died mid-write)."""
        values = self.slots[index].read()
        return None if values is None else Slot(*values)

    # ---- connections held: written by worker i, read by its siblings (``server.http.accept``) -------------

    def write_held(self, index: int, pid: int, held: int) -> None:
        """Worker ``index`` (``pid``) holds ``held`` connections. Two aligned words, no seqlock: a torn read only
        pairs a live pid with a count one change old, and the count is a hint for accepting in turn."""
        _HELD.pack_into(self.memory, self._slots_at + index * _LINE + _HELD_AT, pid, held)

    def held(self, index: int) -> tuple[int, int]:
        """(pid, connections held) of slot ``index``; pid 0: no live worker has written it."""
        pid, held = _HELD.unpack_from(self.memory, self._slots_at + index * _LINE + _HELD_AT)
        return int(pid), int(held)

    def clear(self, index: int) -> None:
        """Empty a dead worker's slot and exposition (the supervisor, after reaping it)."""
        self.memory[self._slots_at + index * _LINE : self._slots_at + (index + 1) * _LINE] = bytes(_LINE)
        self.expositions[index].clear()

    # ---- the supervisor's own figures ---------------------------------------------------------------------

    def write_supervisor(self, figures: SupervisorFigures) -> None:
        f = figures
        self.supervisor.write(f.restarts, f.ticks, f.errors, f.encodes, f.cpu_seconds)

    def read_supervisor(self) -> SupervisorFigures:
        values = self.supervisor.read()
        return SupervisorFigures() if values is None else SupervisorFigures(*values)

    def close(self) -> None:
        self.memory.close()
