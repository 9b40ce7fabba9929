"""SIGTERM again and again while the server stops (a supervisor, an impatient operator, the test harness's own
stop after a test's): the server still stops cleanly, exits 0 and logs no traceback. Before the fix a SIGTERM
that came while ``asyncio.Runner`` closed the loop was written to the loop's closed self-pipe ("Exception ignored
... Bad file descriptor"), and one after the loop had removed its handlers killed the process by the signal; with
``--workers``, the supervisor, once it had restored the default action, was killed likewise."""

from __future__ import annotations

import os
import signal
import time

import pytest

from secure_orca import pki
from secure_orca.lab import replicas as launch
from tests.replicas import run_replicas

BOUND = 60.0  # seconds of SIGTERMs at most: a bound on the loop, not a measurement
PACE = 0.001  # between two: many per shutdown, yet not a flood that fills the loop's self-pipe while it serves


@pytest.mark.parametrize(
    "flags",
    [(), ("--event-loop", "uvloop"), ("--workers=2",)],
    ids=["asyncio", "uvloop", "supervisor"],
)
def test_sigterm_during_shutdown_ends_in_a_clean_exit(dev_pki: pki.DevPKI, flags: tuple[str, ...]) -> None:
    if "uvloop" in flags and not _has_uvloop():
        pytest.skip("uvloop is not installed")
    with run_replicas([launch.serve_argv(dev_pki, flags)], fresh=True) as (replica,):  # the interpreter's own exit
        popen = replica.process.popen
        deadline = time.monotonic() + BOUND
        while popen.poll() is None and time.monotonic() < deadline:
            os.kill(popen.pid, signal.SIGTERM)
            time.sleep(PACE)
        status = replica.process.reap(10)
        output = _until_stopped(replica.process) if status == 0 else "".join(replica.process.lines)
    assert status == 0, output[-3000:]
    assert "Exception ignored" not in output, output[-3000:]


def _until_stopped(process: launch.Process) -> str:
    """The whole output, once its last line (the one saying it stopped) has been read from the pipe."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        output = "".join(process.lines)
        if "INFO: stopped" in output:
            return output
        time.sleep(0.02)
    raise AssertionError(f"exited 0 without saying it stopped:\n{process.output(60)}")


def _has_uvloop() -> bool:
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return False
    return True
