"""The audit log's file: kube's ``--audit-log-path`` (``-`` for standard out; mode 0600 in a 0700 directory)
with lumberjack's rotation by size (``--audit-log-maxsize``, ``--audit-log-maxbackup``)."""

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
        self.size += len(data)
        file.write(data)

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None


def append(sink: Any, data: bytes, broken: bool) -> bool:
    """Write whole lines to ``sink`` and flush; returns whether this write failed (then said once, at the first
    failure). After a failed write (``broken``) the data starts on a fresh line: a partial line is never
    continued."""
    try:
        sink.write((b"\n" + data) if broken else data)
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
