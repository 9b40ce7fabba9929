"""A child that ends when the process that started it dies: Linux's ``prctl(PR_SET_PDEATHSIG)``, so no worker
(or server under valgrind) outlives a supervisor that was killed, and goes on holding the port and the CPU."""

from __future__ import annotations

import ctypes
import os
import signal

_PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int | None = None, sig: int = signal.SIGTERM) -> None:
    """In the child: ``sig`` when its parent dies. With ``parent`` (the pid before the fork), a parent that died
    before this call is caught too: the child is then re-parented already, and sends itself ``sig``."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, sig)
    if parent is not None and os.getppid() != parent:
        os.kill(os.getpid(), sig)
