"""Which process holds which TCP connection, read from procfs: the kernel's own record, so a test can tell
the worker that accepted a connection without the server saying anything; and silent client sockets, with the
listener's accept queue (``ss``) to wait until a server has taken them."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_ESTABLISHED = "01"
_LISTEN = "0A"


def children(pid: int) -> list[int]:
    """The direct children of ``pid`` (a supervisor's workers)."""
    text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    return [int(word) for word in text.split()]


def _inodes(pid: int) -> set[str]:
    found: set[str] = set()
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except FileNotFoundError:  # it ended meanwhile (a killed worker not yet reaped)
        return found
    for fd in fds:
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            found.add(target[8:-1])
    return found


def _sockets(port: int, state: str) -> set[str]:
    """Inodes of the TCP sockets in ``state`` whose local port is ``port``."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == state:
                found.add(fields[9])
    return found


def listening(pids: list[int], port: int) -> list[int]:
    """Those of ``pids`` that hold the socket listening on ``port`` (a supervisor's workers, not its others)."""
    sockets = _sockets(port, _LISTEN)
    return [pid for pid in pids if _inodes(pid) & sockets]


def connections(pids: list[int], port: int) -> dict[int, int]:
    """How many established connections to ``port`` each process holds."""
    live = _sockets(port, _ESTABLISHED)
    return {pid: len(_inodes(pid) & live) for pid in pids}


def accept_queue(port: int) -> int:
    """Connections the kernel holds for the listener on ``port``, not yet accepted (``ss``: a listening socket's
    Recv-Q)."""
    ss = shutil.which("ss")
    if ss is None:
        raise RuntimeError("ss (iproute2) is needed: scripts/setup.sh installs it")
    out = subprocess.run([ss, "-ltnH", f"sport = :{port}"], capture_output=True, text=True, timeout=10, check=True)
    (line,) = out.stdout.splitlines()
    return int(line.split()[1])


def settle(port: int, timeout: float) -> int:
    """Wait (bounded) until the server has taken every queued connection; returns how many are still queued."""
    deadline = time.monotonic() + timeout
    while accept_queue(port) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)  # the server loop's turn after its last accept
    return accept_queue(port)


@contextmanager
def silent_sockets(port: int, count: int, source: str = "127.0.0.2") -> Iterator[list[socket.socket]]:
    """``count`` TCP connections to 127.0.0.1:``port`` from ``source`` that send nothing."""
    opened: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            opened.append(sock)
            sock.bind((source, 0))
            sock.connect(("127.0.0.1", port))
        yield opened
    finally:
        for sock in opened:
            sock.close()
