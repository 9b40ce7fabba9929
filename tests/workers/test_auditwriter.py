"""workers.auditwriter in one process: the relay packs whole lines, the writer writes them and ends on the end
message, or when no sender is left (the supervisor and every worker gone), never spinning."""

from __future__ import annotations

import asyncio
import os
import struct
import threading
from pathlib import Path

from secure_orca.server.audit.file import RotatingFile
from secure_orca.workers.auditwriter import PACK, Channel, Relay, write_until_end


def test_lines_are_packed_whole_and_written_in_order(tmp_path: Path) -> None:
    channel = Channel(2)
    lines = [b'{"n":%d,"pad":"%s"}\n' % (i, b"x" * 1000) for i in range(300)]  # about 5 messages of PACK
    assert Relay(channel, 1).send(lines) == 0
    assert Relay(channel, 0).send(lines[:1]) == 0
    sink = RotatingFile(tmp_path / "audit.log", 0, 0)
    done = threading.Thread(target=write_until_end, args=(channel.receiver, sink, channel.figures), daemon=True)
    done.start()
    channel.sender.send(b"\xff\xff\x00\x00\x00\x00")  # the end message
    done.join(10)
    assert not done.is_alive()
    assert (tmp_path / "audit.log").read_bytes() == b"".join(lines) + lines[0]
    assert channel.figures.read() == (False, [1, 300], [0, 0])
    assert len(b"".join(lines)) > 4 * PACK


def test_the_writer_ends_when_no_sender_is_left(tmp_path: Path) -> None:
    channel = Channel(1)
    Relay(channel, 0).send([b"{}\n"])
    channel.sender.close()  # the supervisor and every worker gone
    sink = RotatingFile(tmp_path / "audit.log", 0, 0)
    done = threading.Thread(target=write_until_end, args=(channel.receiver, sink, channel.figures), daemon=True)
    done.start()
    done.join(10)
    assert not done.is_alive()  # before: a zero-length read taken for a malformed message, forever
    assert (tmp_path / "audit.log").read_bytes() == b"{}\n"


class _Failing:
    """A sink whose every write fails, as a full disk."""

    def write(self, data: bytes) -> None:
        raise OSError(28, "No space left on device")


def _writer(channel: Channel, sink: object) -> threading.Thread:
    acks = [writer for writer, _ in channel.acks]
    done = threading.Thread(target=write_until_end, args=(channel.receiver, sink, channel.figures, acks), daemon=True)
    done.start()
    return done


def _end(channel: Channel, done: threading.Thread) -> None:
    channel.sender.send(b"\xff\xff\x00\x00\x00\x00")
    done.join(10)
    assert not done.is_alive()


def test_an_acknowledged_line_is_written_before_deliver_returns(tmp_path: Path) -> None:
    channel = Channel(2)
    done = _writer(channel, RotatingFile(tmp_path / "audit.log", 0, 0))
    relay = Relay(channel, 1)

    async def deliver() -> list[bool]:
        return [await relay.deliver(b'{"n":%d}\n' % n, True) for n in range(3)] + [await relay.deliver(b"{}\n", False)]

    assert asyncio.run(deliver()) == [True, True, True, True]
    assert (tmp_path / "audit.log").read_bytes().startswith(b'{"n":0}\n{"n":1}\n{"n":2}\n')
    _end(channel, done)
    assert channel.figures.read() == (False, [0, 4], [0, 0])


def test_a_line_the_writer_could_not_write_is_acknowledged_as_lost() -> None:
    channel = Channel(1)
    done = _writer(channel, _Failing())
    relay = Relay(channel, 0)
    assert asyncio.run(relay.deliver(b"{}\n", True)) is False  # blocking-strict: this response is a 500
    _end(channel, done)
    assert channel.figures.read() == (True, [0], [1])


def test_a_predecessors_acknowledgement_settles_nothing(tmp_path: Path) -> None:
    """A restarted worker finds its slot's acknowledgement socket holding its predecessor's news: ignored."""
    channel = Channel(1)
    channel.acks[0][0].send(struct.pack("<IQQQ", os.getpid() + 1, 1, 5, 5))  # another pid's: 1 to 5 lost
    done = _writer(channel, RotatingFile(tmp_path / "audit.log", 0, 0))
    assert asyncio.run(Relay(channel, 0).deliver(b"{}\n", True)) is True
    _end(channel, done)
