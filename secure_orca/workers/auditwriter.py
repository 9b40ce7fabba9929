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
  ``supervisor.RESTART_DELAY``) resumes at the next whole message: the queued messages belong to the socket, which the
  supervisor keeps open. What a writer had received but not yet written when it died (one batch, at most
  ``BATCH_BYTES``) is lost, as the batch a single process holds when it dies.
- **A worker's death loses no answered event** (``blocking``, ``blocking-strict``). The worker's event loop builds
  the line of a response about to end and sends it itself (``Relay.deliver``, ``MSG_DONTWAIT`` on the shared
  blocking socket, the socket's room awaited on the loop); only then does the response's last message go out.
  A sent message belongs to the socket, which the supervisor holds: a worker killed after it answered cannot
  take the event with it. kube's blocking backend writes before the response is sent (``ModeBlocking`` in
  ``pkg/server/options/audit.go`` at 24a394e516bfda066d7e2221d7d92c052de27c54). ``batch`` keeps the writer
  thread's packed hand-over: kube's buffered backend drops what it holds when the process dies.
- **blocking-strict: written, not only handed over.** Such a message carries the worker's pid and a sequence
  number; after each write the writer process sends, on the slot's own acknowledgement socket pair, what it
  knows of that worker: the first and last sequence number it handled, and the last one it lost. The worker
  resolves its waiting responses from it: written, or lost, or unknown (handled by a writer that died since:
  lost). A response waits for this at most ``ACK_TIMEOUT``; then it counts as lost.
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

import asyncio
import collections
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
from typing import Any

from secure_orca.server.audit.file import append, errno_text, open_sink
from secure_orca.server.audit.log import AuditLog
from secure_orca.server.options.audit import AuditConfig
from secure_orca.workers.board import Seqlocked

log = logging.getLogger("secure_orca.audit")
MAX_MESSAGE = 1024 * 1024  # bytes of lines in one message at most (the kernel may allow less: ``max_message``)
PACK = 64 * 1024  # lines are packed into messages of about this size
SEND_BUFFER = 2 * MAX_MESSAGE  # asked for the socket's send buffer (the kernel doubles it, capped by wmem_max)
REFUSAL_LOG_INTERVAL = 10.0  # seconds between two "refused" log lines
BATCH_BYTES = 1024 * 1024  # the writer writes at most this much at once
_HEADER = struct.Struct("<HI")  # worker slot, lines in the message
_END = 0xFFFF  # the slot of the supervisor's end message
_ACKED = 0x8000  # slot flag: the header is followed by _TAG and the writer acknowledges the message
_TAG = struct.Struct("<IQ")  # the worker's pid, the message's sequence number
_ACK = struct.Struct("<IQQQ")  # pid, first and last sequence number handled by this writer, last one lost
ACK_TIMEOUT = 5.0  # seconds a blocking-strict response waits for its acknowledgement (a writer restart is 1 s)


class Figures:
    """The writer process's state, shared with the workers: one writer (the writer process), seqlocked
    (``board.Seqlocked``): whether the last write failed, then per worker slot the events written and lost."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        layout = struct.Struct(f"<Q{2 * workers}Q")
        self.memory = mmap.mmap(-1, Seqlocked.size(layout))  # shared with the children forked after
        self.values = Seqlocked(self.memory, 0, layout)

    def publish(self, broken: bool, written: list[int], lost: list[int]) -> None:
        """The writer process only."""
        self.values.write(int(broken), *(n for counts in zip(written, lost, strict=True) for n in counts))

    def read(self) -> tuple[bool, list[int], list[int]] | None:
        """Whether the last write failed, and per slot the events written and lost (zeros before any write); None
        when a torn read kept failing (a writer died in the middle of publishing)."""
        values = self.values.read()
        return None if values is None else _figures(values)

    def latest(self) -> tuple[bool, list[int], list[int]]:
        """The values as they are, published or not: for a new writer or worker, when no writer is publishing or
        each value is one aligned 8-byte store, old or new."""
        return _figures(self.values.latest())


def _figures(values: tuple[int, ...]) -> tuple[bool, list[int], list[int]]:
    return bool(values[0]), list(values[1::2]), list(values[2::2])


class Channel:
    """The socket pair and the shared figures; made by the supervisor before it forks anything. Workers send
    on ``sender`` (blocking, never switched to non-blocking: the file description is shared); the writer process
    receives on ``receiver``. The supervisor keeps both ends open, so queued messages outlive a writer."""

    def __init__(self, workers: int) -> None:
        self.sender, self.receiver = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with contextlib.suppress(OSError):
            self.sender.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
        buffer = self.sender.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
        self.max_message = min(MAX_MESSAGE, buffer - 64 - _HEADER.size - _TAG.size)  # Linux: len <= sndbuf - 32
        self.figures = Figures(workers)
        pair = socket.socketpair
        self.acks = [pair(socket.AF_UNIX, socket.SOCK_SEQPACKET) for _ in range(workers)]  # (writer's, worker's)

    def keep(self, index: int | None) -> None:
        """In a child: the acknowledgement sockets closed but the writer's ends (``index`` None) or the ends of
        worker ``index``."""
        for slot, (writer, worker) in enumerate(self.acks):
            for end in (writer, worker):
                if end is not (writer if index is None else worker if slot == index else None):
                    end.close()


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
        self.pid = os.getpid()
        self.sequence = 0  # of the last acknowledged message sent
        self.acks = channel.acks[index][1] if index < len(channel.acks) else None
        self.refused_here = 0  # lines the event loop could not hand over (counted as write errors by ``update``)
        self._refused_seen = 0
        self._waiting: collections.deque[tuple[int, asyncio.Future[bool]]] = collections.deque()
        self._room: asyncio.Future[None] | None = None
        self._listening = False

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

    async def deliver(self, data: bytes, acknowledged: bool) -> bool:
        """On the event loop: ``data`` (one line) sent to the writer process before this returns, the socket's
        room awaited; False when it cannot be (too large, the socket failed). With ``acknowledged``, returns
        once the writer process says it wrote it (True) or lost it, or after ACK_TIMEOUT (False)."""
        if len(data) > self.max_message:
            self.refused_here += 1
            self._refused(f"an event of {len(data)} bytes is larger than {self.max_message}")
            return False
        loop = asyncio.get_running_loop()
        if acknowledged and self.acks is not None:
            self.sequence += 1
            message = b"".join((_HEADER.pack(self.index | _ACKED, 1), _TAG.pack(self.pid, self.sequence), data))
        else:
            acknowledged, message = False, _HEADER.pack(self.index, 1) + data
        while True:
            try:
                self.sock.send(message, socket.MSG_DONTWAIT)
                break
            except BlockingIOError:  # the writer is slow or being restarted: blocking means waiting
                await self._writable(loop)
            except OSError as error:
                self.refused_here += 1
                if not self.failing:
                    log.warning("audit log: cannot hand events to the writer process (%s)", errno_text(error))
                self.failing = True
                return False
        self.failing = False  # the socket takes messages again: blocking-strict stops refusing
        if not acknowledged:
            return True
        fate: asyncio.Future[bool] = loop.create_future()
        self._waiting.append((self.sequence, fate))
        if not self._listening:
            assert self.acks is not None
            loop.add_reader(self.acks.fileno(), self._acknowledged)
            self._listening = True
        try:
            return await asyncio.wait_for(fate, ACK_TIMEOUT)
        except TimeoutError:
            return False

    async def _writable(self, loop: asyncio.AbstractEventLoop) -> None:
        room = self._room
        if room is None or room.done():
            room = self._room = loop.create_future()
            fd = self.sock.fileno()

            def ready() -> None:
                loop.remove_writer(fd)
                if not room.done():
                    room.set_result(None)

            loop.add_writer(fd, ready)
        await asyncio.shield(room)  # shared by every waiting response: one leaving must not cancel it

    def _acknowledged(self) -> None:
        """On the loop: the writer process's acknowledgements for this slot; settle the responses they cover."""
        assert self.acks is not None
        while True:
            try:
                data = self.acks.recv(_ACK.size, socket.MSG_DONTWAIT)
            except OSError:  # BlockingIOError: all read
                return
            if len(data) != _ACK.size:
                continue
            pid, first, last, lost = _ACK.unpack(data)
            if pid != self.pid:  # a predecessor's, still queued
                continue
            waiting = self._waiting
            while waiting and waiting[0][0] <= last:
                sequence, fate = waiting.popleft()
                if not fate.done():  # unknown (before ``first``: a writer that died since handled it) is lost
                    fate.set_result(first <= sequence and sequence > lost)

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
        refused_here = self.refused_here
        lost_here = lost[self.index] - seen_lost + refused_here - self._refused_seen
        self._seen = (written[self.index], lost[self.index])
        self._refused_seen = refused_here
        audit.relayed(written[self.index] - seen_written, lost_here, broken or self.failing)


class AuditWriter:
    """The supervisor's side: the channel, what the writer process runs, and its end message (the supervisor
    forks, restarts and stops it as its other children: workers.supervisor)."""

    def __init__(self, config: AuditConfig, workers: int) -> None:
        self.config = config
        self.channel = Channel(workers)

    def worker(self, audit: AuditLog | None, index: int) -> None:
        """In worker ``index`` after the fork: its AuditLog hands lines to the writer process."""
        self.channel.receiver.close()
        self.channel.keep(index)
        if audit is not None:
            relay = Relay(self.channel, index)
            audit.attach(relay)
            relay.update(audit)  # a writer that is failing already: blocking-strict refuses from the start

    def serve(self) -> int:
        """In the writer process: write what the workers send until the supervisor's end message (or until no
        sender is left: a killed supervisor's children end, see workers.lifeline)."""
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)
        self.channel.sender.close()
        self.channel.keep(None)
        c = self.config
        sink = open_sink(c.path, c.maxsize, c.maxbackup)
        return write_until_end(self.channel.receiver, sink, self.channel.figures, [w for w, _ in self.channel.acks])

    def ask_to_end(self, deadline: float) -> None:
        """The supervisor, after every worker exited: the end message (everything sent before it is written, then
        the writer exits), sent when the socket has room, until ``deadline``."""
        sender = self.channel.sender
        while time.monotonic() < deadline:
            try:
                sender.send(_HEADER.pack(_END, 0), socket.MSG_DONTWAIT)
                return
            except BlockingIOError:
                select.select([], [sender], [], max(0.0, deadline - time.monotonic()))


class Acknowledgements:
    """The writer process's news for the workers that wait (blocking-strict): per slot, for the pid of its last
    acknowledged message, the first and last sequence number this writer handled and the last one it lost. Sent
    after every write; a worker that is not reading gets the newest state later (it is cumulative)."""

    def __init__(self, sockets: list[socket.socket]) -> None:
        self.sockets = sockets
        self.known: dict[int, tuple[int, int, int, int]] = {}  # slot -> pid, first, last, lost
        self.unsent: set[int] = set()

    def handled(self, slot: int, pid: int, sequence: int, written: bool) -> None:
        pid_, first, last, lost = self.known.get(slot, (-1, 0, 0, 0))
        if pid_ != pid:  # a new worker in the slot
            first, last, lost = sequence, 0, 0
        self.known[slot] = (pid, first, max(last, sequence), lost if written else max(lost, sequence))
        self.unsent.add(slot)

    def send(self) -> None:
        for slot in list(self.unsent):
            if slot >= len(self.sockets):
                self.unsent.discard(slot)
                continue
            try:
                self.sockets[slot].send(_ACK.pack(*self.known[slot]), socket.MSG_DONTWAIT)
            except BlockingIOError:  # the worker's loop is behind (or it died): sent again after the next write
                continue
            except OSError:
                pass
            self.unsent.discard(slot)


def write_until_end(
    receiver: socket.socket, sink: Any, figures: Figures, ack_sockets: list[socket.socket] | None = None
) -> int:
    """The writer process's loop: receive whole messages (blocking for the first, then what is queued, up to
    BATCH_BYTES), write them at once, publish the figures and the acknowledgements; return 0 after the end
    message."""
    broken, written, lost = figures.latest()  # a restarted writer goes on from its predecessor's
    buffer = bytearray(MAX_MESSAGE + _HEADER.size + _TAG.size + 1)  # one byte more: a larger one shows truncated
    view = memoryview(buffer)
    acks = Acknowledgements(ack_sockets or [])
    refusal_logged = -REFUSAL_LOG_INTERVAL
    ended = False
    try:
        while not ended:
            batch: list[bytes] = []
            counts: list[tuple[int, int, int, int]] = []  # slot, lines, pid, sequence (0: not acknowledged)
            size, flags = 0, 0
            if acks.unsent and not select.select([receiver], [], [], 0.05)[0]:
                acks.send()
                continue
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
                start, pid, sequence = _HEADER.size, 0, 0
                if slot & _ACKED and length >= _HEADER.size + _TAG.size:
                    slot, start = slot & ~_ACKED, _HEADER.size + _TAG.size
                    pid, sequence = _TAG.unpack_from(buffer, _HEADER.size)
                body = bytes(view[start:length])
                if (
                    received & socket.MSG_TRUNC
                    or len(body) > MAX_MESSAGE
                    or slot >= figures.workers
                    or body.count(b"\n") != count
                ):
                    if slot < figures.workers:
                        lost[slot] += count
                        if sequence:
                            acks.handled(slot, pid, sequence, False)
                    now = time.monotonic()
                    if now - refusal_logged >= REFUSAL_LOG_INTERVAL:
                        refusal_logged = now
                        log.warning("audit log: a truncated or malformed message to the writer process; not written")
                    continue
                batch.append(body)
                counts.append((slot, count, pid, sequence))
                size += len(body)
            if batch:
                broken = append(sink, b"".join(batch), broken)
                for slot, count, pid, sequence in counts:
                    (lost if broken else written)[slot] += count
                    if sequence:
                        acks.handled(slot, pid, sequence, not broken)
            figures.publish(broken, written, lost)
            acks.send()
    finally:
        close = getattr(sink, "close", None)
        if close is not None and sink is not sys.stdout.buffer:
            close()
    return 0
