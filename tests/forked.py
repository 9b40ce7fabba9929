"""Replicas forked from a process that has already imported the server (multiprocessing's forkserver, one per
test process) instead of started as a fresh ``python -m secure_orca``: the same ``secure_orca.cli.main(args)``
runs in a process of its own, with its own environment, working directory and output pipe, but without the
interpreter's start and the imports. A quiet replica's start and stop cost 0.41 CPU-s fresh and 0.05 forked
(10 of each, CPU from /proc/stat); the suite starts about 300.

What differs: the forkserver is the parent, and the process ends as multiprocessing ends it (``threading``'s
shutdown, the standard streams flushed, ``os._exit``), not through the interpreter's finalization. A test of the
process's own start or exit runs it fresh (``tests.replicas.run_replicas(fresh=True)``).

A ``Forked`` has what ``lab.replicas.Process`` uses of a ``subprocess.Popen``: ``pid``, ``stdout``, ``poll``,
``wait``, ``send_signal`` and ``kill``; the exit status comes from the forkserver."""

from __future__ import annotations

import multiprocessing
import multiprocessing.forkserver
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from multiprocessing import reduction
from pathlib import Path
from typing import IO, Any

# What ``serve`` imports by the time it listens; the forkserver imports them once.
PRELOAD = [
    "secure_orca.cli",
    "secure_orca.cli.serve",
    "secure_orca.server.assembly",
    "secure_orca.server.http.serve",
    "hypercorn.asyncio",
    "hypercorn.asyncio.run",
]

_context = multiprocessing.get_context("forkserver")
_context.set_forkserver_preload(PRELOAD)


def forkable(argv: Sequence[str]) -> bool:
    """Whether ``argv`` is ``python -m secure_orca ...`` with this interpreter."""
    return list(argv[:3]) == [sys.executable, "-m", "secure_orca"]


def _attach(dup: Any) -> int:
    return int(dup.detach())


def reaped_cpu_seconds() -> float:
    """User and system CPU of the forked processes that have ended, as their parent (the forkserver) reaped them:
    its ``cutime`` and ``cstime`` in procfs; 0 before the first fork."""
    pid = multiprocessing.forkserver._forkserver._forkserver_pid  # type: ignore[attr-defined]  # no public handle
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()  # from field 3 (state) on
    return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")  # fields 16 and 17


class _Fd:
    """An open descriptor that the forkserver passes to the child (SCM_RIGHTS) when the child is pickled."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __reduce__(self) -> tuple[Any, tuple[Any]]:
        return _attach, (reduction.DupFd(self.fd),)


def _main(args: list[str], env: dict[str, str], cwd: str, out: int, err: int) -> None:
    """The child: what ``python -m secure_orca ARGS`` does after its imports, with stdout on ``out`` and stderr on
    ``err``."""
    os.dup2(out, 1)
    os.dup2(err, 2)
    os.close(out)
    os.close(err)
    sys.stdout.reconfigure(line_buffering=False)  # type: ignore[union-attr]  # a pipe, whatever the server's was
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    from secure_orca.cli import main

    sys.exit(main(args))


class Forked:
    """A forked replica, used where ``lab.replicas.Process`` expects a ``subprocess.Popen``."""

    def __init__(self, argv: Sequence[str], env: dict[str, str], cwd: str, *, stderr_apart: bool = False) -> None:
        """Output on ``stdout`` (stderr too, as ``stderr=STDOUT``; with ``stderr_apart``, on ``stderr``)."""
        self.args = list(argv)
        read, write = os.pipe()
        read_err, write_err = os.pipe() if stderr_apart else (None, write)
        fds = (_Fd(write), _Fd(write_err))
        self._process = _context.Process(target=_main, args=(self.args[3:], env, cwd, *fds), daemon=True)
        try:
            self._process.start()
        finally:
            os.close(write)
            if read_err is not None:
                os.close(write_err)
        self.pid = int(self._process.pid or 0)
        self.stdout: IO[str] = open(read)  # noqa: SIM115 (text, as Popen's text=True; its reader closes it)
        self.stderr: IO[str] | None = None if read_err is None else open(read_err)  # noqa: SIM115 (likewise)
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and not self._process.is_alive():
            self.returncode = self._process.exitcode
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        if self.poll() is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return int(self.returncode or 0)

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def run(argv: Sequence[str], *, cwd: Path | None = None, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """``subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=cwd)`` of a forked command."""
    child = Forked(argv, dict(os.environ), str(cwd or Path.cwd()), stderr_apart=True)
    assert child.stderr is not None
    with ThreadPoolExecutor(2) as readers, child.stdout, child.stderr:  # both drained at once: neither pipe fills
        out, err = readers.submit(child.stdout.read), readers.submit(child.stderr.read)
        try:
            status = child.wait(timeout)
        except subprocess.TimeoutExpired:
            child.kill()
            raise
        return subprocess.CompletedProcess(child.args, status, out.result(), err.result())
