"""A child's ties to the supervisor that started it.

- It ends when the supervisor dies: Linux's ``prctl(PR_SET_PDEATHSIG)``, so no worker (or server under valgrind)
  outlives a supervisor that was killed, and goes on holding the port and the CPU.
- A worker is the OOM killer's choice: it raises its own ``/proc/self/oom_score_adj`` (any process may raise
  its own; only lowering needs CAP_SYS_RESOURCE). The kernel adds ``oom_score_adj / 1000`` of the memory limit
  (the cgroup's, under a Kubernetes limit) to a process's badness, so a worker always outranks the supervisor,
  which keeps what it inherited: killing a worker costs the requests it holds and a restart, killing the
  supervisor the whole server (``oom_badness`` in Linux ``mm/oom_kill.c``).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal

_PR_SET_PDEATHSIG = 1
WORKER_OOM_SCORE_ADJ = 800  # of -1000..1000: 80 % of the memory limit added to a worker's badness


def die_with_parent(parent: int | None = None, sig: int = signal.SIGTERM) -> None:
    """In the child: ``sig`` when its parent dies. With ``parent`` (the pid before the fork), a parent that died
    before this call is caught too: the child is then re-parented already, and sends itself ``sig``."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, sig)
    if parent is not None and os.getppid() != parent:
        os.kill(os.getpid(), sig)


def offer_to_oom_killer(score: int = WORKER_OOM_SCORE_ADJ) -> None:
    """In a worker: raise its own ``oom_score_adj`` to ``score`` (never lower it; no procfs: nothing done)."""
    with contextlib.suppress(OSError, ValueError), open("/proc/self/oom_score_adj", "r+") as file:
        if int(file.read()) < score:
            file.seek(0)
            file.write(str(score))
