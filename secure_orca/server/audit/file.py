"""The audit log's file: kube's ``--audit-log-path`` (``-`` for standard out; mode 0600 in a 0700 directory)
with lumberjack's rotation by size (``--audit-log-maxsize``, ``--audit-log-maxbackup``).

A regular file only ever holds whole lines: a write that fails part-way (a full disk: ENOSPC, or EFBIG) is
rolled back, the file truncated to where that write began, and a file found ending in a partial line when it is
opened (its writer killed in the middle of a write) is cut back to its last newline first."""

from __future__ import annotations

import datetime as dt
import logging
import os
import stat
import sys
from pathlib import Path
from typing import IO, Any

log = logging.getLogger("secure_orca.audit")


class RotatingFile:
    """lumberjack's size rotation: before a write would pass ``max_bytes``, the file is renamed with a UTC
    timestamp and a new one opened; beyond ``max_backups`` (0: keep all) the oldest backups are removed."""

    def __init__(self, path: Path, max_bytes: int, max_backups: int) -> None:
        self.path, self.max_bytes, self.max_backups = path, max_bytes, max_backups
        self.file: IO[bytes] | None = None
        self.size = 0
        self.regular = True

    def _open(self) -> IO[bytes]:
        if self.file is None:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            self.file = os.fdopen(fd, "ab", buffering=0)
            st = os.fstat(fd)
            self.size = st.st_size
            self.regular = stat.S_ISREG(st.st_mode)  # a device or a pipe is never renamed
            if self.regular and self.size:
                self.size = _whole_lines(self.path, fd, self.size)
        return self.file

    def backups(self) -> list[Path]:
        stem, suffix = self.path.stem, self.path.suffix
        found = [p for p in self.path.parent.glob(f"{stem}-*{suffix}") if p != self.path]
        return sorted(found)

    def _rotate(self) -> None:
        self.close()
        stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H-%M-%S.%f")[:-3]
        if self.path.exists():
            self.path.rename(self.path.with_name(f"{self.path.stem}-{stamp}{self.path.suffix}"))
        if self.max_backups:
            for old in self.backups()[: -self.max_backups]:
                old.unlink(missing_ok=True)

    def write(self, data: bytes) -> None:
        file = self._open()
        if self.regular and self.max_bytes and self.size and self.size + len(data) > self.max_bytes:
            self._rotate()
            file = self._open()
        if not self.regular:
            file.write(data)
            return
        start, view = self.size, memoryview(data)
        try:
            while view:  # a short write (the disk filling) is followed by the one that raises
                view = view[file.write(view) or 0 :]
        except OSError:
            os.ftruncate(file.fileno(), start)  # frees what the failed write took: never refused for space
            raise
        self.size = start + len(data)

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None


def _whole_lines(path: Path, fd: int, size: int, chunk: int = 64 * 1024) -> int:
    """Cut the file ``path`` (open for writing as ``fd``) of ``size`` bytes back to its last newline (none:
    empty); returns its new size."""
    end = size
    reader = os.open(path, os.O_RDONLY)
    try:
        while end > 0:
            start = max(0, end - chunk)
            tail = os.pread(reader, end - start, start)
            if end == size and tail.endswith(b"\n"):
                return size
            cut = tail.rfind(b"\n")
            if cut >= 0:
                end = start + cut + 1
                break
            end = start
    finally:
        os.close(reader)
    log.warning("audit log: %d bytes of a partial line at the end of the file removed", size - end)
    os.ftruncate(fd, end)
    return end


def append(sink: Any, data: bytes, broken: bool) -> bool:
    """Write whole lines to ``sink`` and flush; returns whether this write failed (then said once, at the first
    failure). A RotatingFile of a regular file rolls a failed write back; on any other sink (standard out, a
    pipe) the data after a failed write (``broken``) starts on a fresh line: a partial line is never continued."""
    try:
        sink.write((b"\n" + data) if broken and not getattr(sink, "regular", False) else data)
        flush = getattr(sink, "flush", None)
        if flush is not None:
            flush()
    except (OSError, ValueError) as error:
        if not broken:
            log.warning("audit log: cannot write (%s); events are dropped until it can", errno_text(error))
        return True
    if broken:
        log.info("audit log: writing again")
    return False


def errno_text(error: Exception) -> str:
    return os.strerror(error.errno) if isinstance(error, OSError) and error.errno else type(error).__name__


def open_sink(path: str, maxsize_mb: int, maxbackup: int) -> Any:
    """``-`` is standard output; otherwise a RotatingFile (maxsize 0: never rotated)."""
    if path == "-":
        return sys.stdout.buffer
    return RotatingFile(Path(path), maxsize_mb * 1024 * 1024, maxbackup)
