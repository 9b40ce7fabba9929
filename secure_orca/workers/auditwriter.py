"""One audit log for ``serve --workers N``: one writer process owns the file, its rotation and its failures.

Each worker keeps the single-process path (server.audit): the request's bounded record, the bounded queue in
events and bytes, the modes, and the writer thread that builds and redacts each line (bounded work per event).
Only the last step differs: instead of writing the file, the writer thread hands its finished lines to a
``Relay``, which packs whole lines into messages on one ``SOCK_SEQPACKET`` socket pair made by the supervisor
before it forks. The audit-writer process (forked by the supervisor like the metrics process, restarted if it
dies) receives them and alone writes the ``RotatingFile``, so rotation, ``--audit-log-maxsize``/``maxbackup`` and
the fresh line after a failed write are exactly the single process's.

Why this shape:

- **No interleaved or partial line.** A seqpacket message is delivered whole or not at all, and only one process
  writes the file. A message holds whole lines only; a line larger than ``max_message`` is refused (counted as
  a write error, logged at most once per ``REFUSAL_LOG_INTERVAL``), never split. Server-made lines are far below
  it: a request's strings come from one header list (hypercorn's 64 KiB for HTTP/2), at most six bytes each
  once escaped (393,682 bytes for a path of 65,535 control characters), and a message may carry 416 KB even with
  the kernel's default ``net.core.wmem_max``. The writer also refuses a message that arrives truncated or
  malformed.
- **Nothing lost, nothing unbounded.** When the writer process is slow, the socket's send buffer (shared by
  every worker, ``SEND_BUFFER`` asked, the kernel's ``net.core.wmem_max`` permitting) fills, a worker's writer
  thread blocks in ``send``, its queue fills, and in the blocking modes the request awaits room: the mechanism
  of one process, with the kernel's buffer as its last bounded stage. A restarted writer (after
  ``RESTART_DELAY``) resumes at the next whole message: the queued messages belong to the socket, which the
  supervisor keeps open. What a writer had received but not yet written when it died (one batch, at most
  ``BATCH_BYTES``) is lost, as the batch a single process holds when it dies.
- **blocking-strict.** The writer process publishes, in a small shared mapping (a seqlock, as the board), whether
  its last write failed and, per worker slot, the events written and lost. A worker's writer thread copies that
  into its AuditLog after every hand-over and every period, so ``broken`` (the 500 of blocking-strict) follows
  the file, and ``secure_orca_audit_events_written`` / ``_write_errors`` count the worker's own events: summed
  over workers by workers.metrics they are the server's. Queue length, bytes and waiting requests are per worker,
  so their sums are what the server holds in its queues (the socket buffer excepted).
- **Shutdown.** SIGTERM reaches the workers; each drains its queue to the socket as one process drains to the
  file. Only when every worker has exited does the supervisor send the writer an end message on the same socket:
  everything sent before it is written, the file flushed and closed, and the writer exits last. The writer
  ignores SIGINT and SIGTERM, so a signal to the whole process group cannot end it before the workers.

Not chosen: every worker appending to the file itself (``O_APPEND`` keeps one ``write`` whole, but rotation by
size would need a lock across processes, and a batch larger than one write could interleave); a length-prefixed
``SOCK_STREAM`` (a writer that died in the middle of a message would leave its successor out of step, and one
stream per worker to keep writers apart); an acknowledgement per message (a round trip per batch where a flag
in shared memory says the same).
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import select
import signal
import socket
import struct
import sys
import time
from collections.abc import Callable
from typing import Any

from secure_orca.server.audit import AuditLog
from secure_orca.server.auditfile import append, errno_text, open_sink
from secure_orca.server.options.audit import AuditConfig

log = logging.getLogger("secure_orca.audit")
MAX_MESSAGE = 1024 * 1024  # bytes of lines in one message at most (the kernel may allow less: ``max_message``)
PACK = 64 * 1024  # lines are packed into messages of about this size
SEND_BUFFER = 2 * MAX_MESSAGE  # asked for the socket's send buffer (the kernel doubles it, capped by wmem_max)
REFUSAL_LOG_INTERVAL = 10.0  # seconds between two "refused" log lines
BATCH_BYTES = 1024 * 1024  # the writer writes at most this much at once
RESTART_DELAY = 1.0  # seconds before a writer that ended is started again (as the metrics process)
_HEADER = struct.Struct("<HI")  # worker slot, lines in the message
_END = 0xFFFF  # the slot of the supervisor's end message
_SEQUENCE = struct.Struct("<Q")
_STATE = struct.Struct("<QQ")  # sequence, the last write failed
_COUNTS = struct.Struct("<QQ")  # per slot: events written, events lost (write errors, refusals)
_RETRIES = 1000


class Figures:
    """The writer process's state, shared with the workers: one writer (the writer process), seqlocked."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self.memory = mmap.mmap(-1, _STATE.size + workers * _COUNTS.size)  # shared with the children forked after
        self._sequence = 0

    def publish(self, broken: bool, written: list[int], lost: list[int]) -> None:
        """The writer process only."""
        sequence = self._sequence = max(self._sequence, self.read_sequence()) + 1
        _SEQUENCE.pack_into(self.memory, 0, sequence)  # odd: readers wait
        for index in range(self.workers):
            _COUNTS.pack_into(self.memory, _STATE.size + index * _COUNTS.size, written[index], lost[index])
        self._sequence = sequence + 1
        _STATE.pack_into(self.memory, 0, sequence + 1, int(broken))

    def read_sequence(self) -> int:
        sequence = int(_SEQUENCE.unpack_from(self.memory, 0)[0])
        return sequence + 1 if sequence & 1 else sequence  # a writer that died mid-write: the next one goes on

    def read(self) -> tuple[bool, list[int], list[int]] | None:
        """Whether the last write failed, and per slot the events written and lost (zeros before any write); None
        when a torn read kept failing (a writer died in the middle of publishing)."""
        for _ in range(_RETRIES):
            sequence = _SEQUENCE.unpack_from(self.memory, 0)[0]
            if sequence & 1:
                continue
            figures = self.latest()
            if _SEQUENCE.unpack_from(self.memory, 0)[0] == sequence:
                return figures
        return None

    def latest(self) -> tuple[bool, list[int], list[int]]:
        """The values as they are, published or not: for a new writer or worker, when no writer is publishing or
        each value is one aligned 8-byte store, old or new."""
        broken = bool(_STATE.unpack_from(self.memory, 0)[1])
        counts = [_COUNTS.unpack_from(self.memory, _STATE.size + i * _COUNTS.size) for i in range(self.workers)]
        return broken, [c[0] for c in counts], [c[1] for c in counts]


class Channel:
    """The socket pair and the shared figures; made by the supervisor before it forks anything. Workers send
    on ``sender`` (blocking, never switched to non-blocking: the file description is shared); the writer process
    receives on ``receiver``. The supervisor keeps both ends open, so queued messages outlive a writer."""

    def __init__(self, workers: int) -> None:
        self.sender, self.receiver = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with contextlib.suppress(OSError):
            self.sender.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
        buffer = self.sender.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
        self.max_message = min(MAX_MESSAGE, buffer - 64 - _HEADER.size)  # Linux refuses len > sndbuf - 32
        self.figures = Figures(workers)


class Relay:
    """A worker's end: whole lines to the writer process, and the writer's figures for this worker's slot
    (counted from when this worker started, so a restarted worker does not count its predecessor's events)."""

    def __init__(self, channel: Channel, index: int) -> None:
        self.sock, self.index, self.figures = channel.sender, index, channel.figures
        self.max_message = channel.max_message
        _, written, lost = self.figures.latest()
        self._seen = (written[index], lost[index])  # the writer's counts already reported (by a predecessor)
        self.failing = False  # the last hand-over failed (the socket refused it)
        self._refusal_logged = -REFUSAL_LOG_INTERVAL

    def send(self, lines: list[bytes]) -> int:
        """Hand ``lines`` (each ending with a newline) to the writer in messages of whole lines; blocks while the
        socket is full. Returns how many lines were refused (too large, or the socket failed)."""
        refused, count = 0, 0
        message: list[bytes] = []
        size = 0
        for data in lines:
            if len(data) > self.max_message:
                refused += 1
                self._refused(f"an event of {len(data)} bytes is larger than {self.max_message}")
                continue
            if message and size + len(data) > min(PACK, self.max_message):
                refused += self._send(message, count)
                message, count, size = [], 0, 0
            message.append(data)
            count, size = count + 1, size + len(data)
        if message:
            refused += self._send(message, count)
        return refused

    def _send(self, lines: list[bytes], count: int) -> int:
        try:
            self.sock.send(_HEADER.pack(self.index, count) + b"".join(lines))
        except OSError as error:
            if not self.failing:
                log.warning("audit log: cannot hand events to the writer process (%s)", errno_text(error))
            self.failing = True
            return count
        self.failing = False
        return 0

    def _refused(self, why: str) -> None:
        now = time.monotonic()
        if now - self._refusal_logged >= REFUSAL_LOG_INTERVAL:
            self._refusal_logged = now
            log.warning("audit log: %s, the most one message to the writer process carries; it is not written", why)

    def update(self, audit: AuditLog) -> None:
        """The writer's news for this slot into ``audit`` (its writer thread): counts, and whether it is broken."""
        figures = self.figures.read()
        if figures is None:  # the writer died in the middle of publishing: its successor publishes again
            return
        broken, written, lost = figures
        seen_written, seen_lost = self._seen
        audit.written += written[self.index] - seen_written
        audit.write_errors += lost[self.index] - seen_lost
        self._seen = (written[self.index], lost[self.index])
        audit.broken = broken or self.failing


class AuditWriter:
    """The supervisor's side: the channel, the writer process's pid, its restart and its end."""

    def __init__(self, config: AuditConfig, workers: int) -> None:
        self.config = config
        self.channel = Channel(workers)
        self.pid = 0
        self.due: float | None = None  # when a restart is due
        self.ending = False

    def worker(self, audit: AuditLog | None, index: int) -> None:
        """In worker ``index`` after the fork: its AuditLog hands lines to the writer process."""
        self.channel.receiver.close()
        if audit is not None:
            audit.relay = Relay(self.channel, index)
            audit.relay.update(audit)  # a writer that is failing already: blocking-strict refuses from the start

    def spawn(self, fork: Callable[[str, Callable[[], int]], int], close: Callable[[], None]) -> None:
        """Fork the writer process (``close``: what it inherited and does not use)."""

        def write() -> int:
            close()
            return self.serve()

        self.pid = fork("the audit writer", write)

    def serve(self) -> int:
        """In the writer process: write what the workers send until the supervisor's end message (or until no
        sender is left: a killed supervisor's children end, see workers.lifeline)."""
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)
        self.channel.sender.close()
        c = self.config
        return write_until_end(self.channel.receiver, open_sink(c.path, c.maxsize, c.maxbackup), self.channel.figures)

    def reaped(self, pid: int, status: str) -> bool:
        """The supervisor reaped ``pid``: True when it was the writer (its restart is scheduled)."""
        if not pid or pid != self.pid:
            return False
        self.pid = 0
        if not self.ending:
            log.warning("the audit writer (pid %d) ended (%s); restarting it", pid, status)
            self.due = time.monotonic() + RESTART_DELAY
        return True

    def restart_due(self, now: float) -> bool:
        if self.due is not None and self.due <= now and not self.ending:
            self.due = None
            return True
        return False

    def end(self, deadline: float, spawn: Callable[[], None]) -> None:
        """After every worker exited: the end message (a dead writer is started again first, to write what is
        queued), then the writer's exit is awaited until ``deadline``; killed after it."""
        if not self.pid:
            spawn()
        self.ending = True
        sender = self.channel.sender
        while time.monotonic() < deadline:
            try:
                sender.send(_HEADER.pack(_END, 0), socket.MSG_DONTWAIT)
                break
            except BlockingIOError:
                select.select([], [sender], [], max(0.0, deadline - time.monotonic()))
        while self.pid and time.monotonic() < deadline:
            try:
                if os.waitpid(self.pid, os.WNOHANG)[0]:
                    self.pid = 0
            except ChildProcessError:  # reaped already
                self.pid = 0
            time.sleep(0.02)
        if self.pid:
            log.warning("the audit writer (pid %d) did not stop in time; killing it", self.pid)
            with contextlib.suppress(ProcessLookupError, ChildProcessError):
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            self.pid = 0


def write_until_end(receiver: socket.socket, sink: Any, figures: Figures) -> int:
    """The writer process's loop: receive whole messages (blocking for the first, then what is queued, up to
    BATCH_BYTES), write them at once, publish the figures; return 0 after the end message."""
    broken, written, lost = figures.latest()  # a restarted writer goes on from its predecessor's
    buffer = bytearray(MAX_MESSAGE + _HEADER.size + 1)  # one byte more: a larger message shows as truncated
    view = memoryview(buffer)
    refusal_logged = -REFUSAL_LOG_INTERVAL
    ended = False
    try:
        while not ended:
            batch: list[bytes] = []
            counts: list[tuple[int, int]] = []
            size, flags = 0, 0
            while size < BATCH_BYTES:
                try:
                    length, _, received, _ = receiver.recvmsg_into([view], 0, flags)
                except BlockingIOError:
                    break
                flags = socket.MSG_DONTWAIT  # the first message is awaited, then what is queued is taken
                if not length and not received & socket.MSG_TRUNC:  # no sender is left (the supervisor died)
                    ended = True
                    break
                slot, count = _HEADER.unpack_from(buffer) if length >= _HEADER.size else (_END - 1, 0)
                if slot == _END:
                    ended = True
                    break
                body = bytes(view[_HEADER.size : length])
                if received & socket.MSG_TRUNC or slot >= figures.workers or body.count(b"\n") != count:
                    if slot < figures.workers:
                        lost[slot] += count
                    now = time.monotonic()
                    if now - refusal_logged >= REFUSAL_LOG_INTERVAL:
                        refusal_logged = now
                        log.warning("audit log: a truncated or malformed message to the writer process; not written")
                    continue
                batch.append(body)
                counts.append((slot, count))
                size += len(body)
            if batch:
                broken = append(sink, b"".join(batch), broken)
                for slot, count in counts:
                    (lost if broken else written)[slot] += count
            figures.publish(broken, written, lost)
    finally:
        close = getattr(sink, "close", None)
        if close is not None and sink is not sys.stdout.buffer:
            close()
    return 0
