"""workers.auditwriter in one process: the relay packs whole lines, the writer writes them and ends on the end
message, or when no sender is left (the supervisor and every worker gone), never spinning."""

from __future__ import annotations

import threading
from pathlib import Path

from secure_orca.server.auditfile import RotatingFile
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
