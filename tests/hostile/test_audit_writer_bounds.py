"""The one audit writer of ``serve --workers N`` (workers.auditwriter) is bounded and writes only whole lines.

- A message larger than the writer's bound arrives truncated: refused whole and counted, never written in part;
  a malformed message (wrong line count, unknown slot, no header) likewise. A worker's relay refuses a line
  larger than the bound instead of splitting it.
- A client that floods one worker cannot push its events past the bounds while the writer is stalled: the
  worker's queue stays within its bytes, the socket within its send buffer, the requests wait (blocking mode),
  and once the writer runs again every event is written, each once.

Before this row, ``serve --workers 2`` refused ``--audit-log-path`` and workers.auditwriter did not exist: each
test here fails at its import.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import logging
import socket
import struct
import termios
import threading
from pathlib import Path

import pytest

from secure_orca.server.audit import log as audit
from secure_orca.server.audit.file import RotatingFile
from secure_orca.workers import auditwriter
from secure_orca.workers.auditwriter import Channel, Relay, write_until_end

HEADER = struct.Struct("<HI")  # slot, lines: the wire format of workers.auditwriter
END = HEADER.pack(0xFFFF, 0)


def _unread(sock: socket.socket) -> int:
    """Bytes sent on ``sock`` and not yet received (the kernel's count, SIOCOUTQ)."""
    buf = bytearray(4)
    fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, buf)
    return int.from_bytes(buf, "little")


def test_an_oversized_or_malformed_message_is_refused_whole_and_the_rest_written(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    channel = Channel(2)
    if channel.max_message < auditwriter.MAX_MESSAGE:
        pytest.skip("net.core.wmem_max too small to send a message larger than the writer's bound")
    good = b'{"kind":"Event"}\n'
    oversized = b"x" * (auditwriter.MAX_MESSAGE + 10) + b"\n"
    for message in (
        HEADER.pack(0, 1) + oversized,  # truncated at the writer: not one byte of it written
        HEADER.pack(1, 2) + good,  # claims two lines, holds one
        HEADER.pack(7, 1) + good,  # no such worker
        b"\x01",  # no header
        HEADER.pack(1, 1) + good,
        END,
    ):
        channel.sender.send(message)
    log = tmp_path / "audit.log"
    with caplog.at_level(logging.WARNING, "secure_orca.audit"):
        assert write_until_end(channel.receiver, RotatingFile(log, 0, 0), channel.figures) == 0
    assert log.read_bytes() == good
    assert channel.figures.read() == (False, [0, 1], [1, 2])  # written, lost per worker slot
    refusals = [r for r in caplog.records if "truncated or malformed" in r.getMessage()]
    assert len(refusals) == 1  # four refusals, said once (rate-limited)


def test_a_relay_refuses_a_line_larger_than_its_bound_and_never_splits_it(caplog: pytest.LogCaptureFixture) -> None:
    channel = Channel(1)
    channel.max_message = 1000
    relay = Relay(channel, 0)
    small = b'{"kind":"Event"}\n'
    with caplog.at_level(logging.WARNING, "secure_orca.audit"):
        assert relay.send([b"a" * 8000 + b"\n", small, b"b" * 5000 + b"\n"]) == 2
    channel.sender.send(END)
    assert channel.receiver.recv(1 << 20) == HEADER.pack(0, 1) + small  # one message: the line that fits
    assert channel.receiver.recv(1 << 20) == END
    assert sum("larger than 1000" in r.getMessage() for r in caplog.records) == 1


def _record(index: int) -> audit.AuditRecord:
    path = f"/flood/{index}/" + "a" * 8000
    record = audit.AuditRecord(
        {
            "type": "http",
            "method": "GET",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "headers": [],
            "client": ("127.0.0.1", 1),
        }
    )
    record.status, record.stage = 200, record.received
    return record


def test_a_flood_cannot_push_events_past_the_bounds_while_the_writer_is_stalled(tmp_path: Path) -> None:
    """2,000 events of 8 KB (16 MB) in blocking mode against a 256 KiB queue and a writer that does not read: the
    queue stays within its bytes, the socket within its send buffer, requests wait; then the writer reads, and
    every event is written once."""
    channel = Channel(1)
    buffer = channel.sender.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
    log = audit.AuditLog(None, max_bytes=256 * 1024, mode=audit.BLOCKING, period=0.01)
    relay = log.relay = Relay(channel, 0)
    log.start()
    count = 2000
    peaks = {"queued": 0, "unread": 0}

    async def flood() -> int:
        puts = [asyncio.ensure_future(log.put(_record(i))) for i in range(count)]
        for _ in range(500):  # the writer thread fills the socket and blocks, the queue fills, requests wait
            await asyncio.sleep(0.01)
            peaks["queued"] = max(peaks["queued"], log.queued_bytes)
            peaks["unread"] = max(peaks["unread"], _unread(channel.sender))
            if _unread(channel.sender) >= buffer:  # full: the writer thread blocks in send
                break
        waiting = log.waiting
        for _ in range(20):  # stalled: nothing more gets through
            await asyncio.sleep(0.01)
            peaks["queued"] = max(peaks["queued"], log.queued_bytes)
            peaks["unread"] = max(peaks["unread"], _unread(channel.sender))
        assert log.waiting == waiting > 0
        writer = threading.Thread(target=write_until_end, args=(channel.receiver, sink, channel.figures))
        writer.start()
        await asyncio.gather(*puts)
        log.stop()  # drains what is queued to the socket
        channel.sender.send(END)
        await asyncio.to_thread(writer.join, 30)
        return waiting

    sink = RotatingFile(tmp_path / "audit.log", 0, 0)
    waiting = asyncio.run(flood())
    assert waiting > count // 2, waiting  # most requests waited for room: the flood was held back
    assert peaks["queued"] <= 256 * 1024 + 4096  # the queue's bytes (an empty queue takes any one record)
    assert 0 < peaks["unread"] <= buffer + 2 * auditwriter.PACK  # the socket: its send buffer and one message
    lines = (tmp_path / "audit.log").read_bytes().splitlines()
    uris = [json.loads(line)["requestURI"].split("/")[2] for line in lines]
    assert sorted(map(int, uris)) == list(range(count))  # every event, once
    assert channel.figures.read() == (False, [count], [0])
    relay.update(log)  # the writer process's counts of this worker's events, as its writer thread takes them
    assert (log.written, log.dropped, log.write_errors) == (count, 0, 0)
