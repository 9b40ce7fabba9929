"""A small real filesystem that fills up: a tmpfs of ``SIZE`` mounted for the test (root only; the test is
skipped, saying why, where mounting is impossible), with a filler file that takes all but a few bytes of it."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

SIZE = "2m"


class Disk:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.filler = root / "filler"

    def free(self) -> int:
        st = os.statvfs(self.root)
        return st.f_bavail * st.f_frsize

    def fill(self, leave: int = 0) -> None:
        """Take the disk's space but ``leave`` bytes (rounded down to its blocks)."""
        with self.filler.open("ab") as file:
            while self.free() > leave:
                try:
                    file.write(b"\0" * min(64 * 1024, max(1, self.free() - leave)))
                    file.flush()
                except OSError:
                    break

    def empty(self) -> None:
        """The space back."""
        self.filler.unlink(missing_ok=True)


@contextmanager
def full_disk(where: Path) -> Iterator[Disk]:
    where.mkdir(parents=True, exist_ok=True)
    mount = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SIZE}", "tmpfs", str(where)], capture_output=True)
    if mount.returncode:
        pytest.skip(f"cannot mount a {SIZE} tmpfs here (root and CAP_SYS_ADMIN needed): {mount.stderr.decode()!r}")
    try:
        yield Disk(where)
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)
