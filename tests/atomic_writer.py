"""kubelet's atomic writer, written from its algorithm (kubernetes/kubernetes pkg/volume/util/atomic_writer.go,
read at 00e11024cf8ce5ae5b75ec122545f69b7e42c3f6; the steps are unchanged in later versions): how a Secret or a
ConfigMap volume changes on a node. For tests only.

    <dir>/tls.crt -> ..data/tls.crt          user-visible names: relative symlinks through ..data
    <dir>/..data  -> ..2026_12_03_18_04_05.123456789    the timestamped directory holding the real files

A write: (5) a new timestamped directory ``..YYYY_MM_DD_HH_MM_SS.<random>`` (mode 0755), (6) every file written
into it with its mode, (7) missing user-visible symlinks created, (8) a ``..data_tmp`` symlink to the new directory,
(9) renamed over ``..data`` (the one atomic step), (10) user-visible names no longer in the payload removed,
(11) the previous timestamped directory removed. A payload equal to what is on disk writes nothing (4).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path

DATA = "..data"
DATA_TMP = "..data_tmp"


class AtomicWriter:
    """Projects ``{name: (bytes, mode)}`` into ``target`` as kubelet does; ``writes`` counts real swaps."""

    def __init__(self, target: Path, during_write: Callable[[], None] | None = None) -> None:
        target.mkdir(parents=True, exist_ok=True)
        self.target = target
        self.during_write = during_write  # called between the halves of each file (widens any window)
        self.writes = 0

    def _current(self) -> Path | None:
        try:
            return self.target / os.readlink(self.target / DATA)
        except FileNotFoundError:
            return None

    def write(self, payload: Mapping[str, tuple[bytes, int]]) -> bool:
        for name in payload:
            if name.startswith("..") or "/" in name or not name:
                raise ValueError(f"invalid path: {name!r}")  # (1) top-level names only, in this helper
        old = self._current()
        if old is not None:
            stale = {p.name for p in old.iterdir()} - set(payload)  # (3)
            same = all((old / n).is_file() and (old / n).read_bytes() == d for n, (d, _) in payload.items())
            if same and not stale:  # (4)
                return False
        else:
            stale = set()
        stamp = time.strftime("..%Y_%m_%d_%H_%M_%S.", time.gmtime())
        ts_dir = Path(tempfile.mkdtemp(prefix=stamp, dir=self.target))  # (5)
        ts_dir.chmod(0o755)
        for name, (data, mode) in payload.items():  # (6)
            path = ts_dir / name
            with path.open("wb") as handle:
                handle.write(data[: len(data) // 2])
                handle.flush()
                if self.during_write is not None:
                    self.during_write()
                handle.write(data[len(data) // 2 :])
            path.chmod(mode)
        for name in payload:  # (7)
            visible = self.target / name
            if not visible.is_symlink():
                visible.symlink_to(f"{DATA}/{name}")
        tmp = self.target / DATA_TMP  # (8)
        tmp.symlink_to(ts_dir.name)
        os.rename(tmp, self.target / DATA)  # (9)
        for name in stale:  # (10)
            (self.target / name).unlink(missing_ok=True)
        if old is not None:  # (11)
            shutil.rmtree(old)
        self.writes += 1
        return True
