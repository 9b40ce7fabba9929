"""``tests.forked`` beside a fresh ``python -m secure_orca``: the command gets the same arguments, environment and
working directory, and gives back the same output, files and exit status; a signal ends it as it ends a
subprocess; its CPU is counted for ``--cpu-time`` once it has ended."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from secure_orca import pki
from secure_orca.lab import replicas as launch
from tests import forked
from tests.replicas import run_replicas

CASES = {
    "a refused flag": (["serve", "--secure-port", "port"], {}),
    "the environment": (["serve", "--secure-port", "0"], {"SECURE_ORCA_EVENT_LOOP": "bogus"}),
    "the working directory": (["certs", "--dir", "relative"], {}),
}


def _run(argv: list[str], env: dict[str, str], cwd: Path, fresh: bool) -> tuple[int, str]:
    if fresh:
        done = subprocess.run(
            argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60
        )
        return done.returncode, done.stdout
    child = forked.Forked(argv, env, str(cwd))
    try:
        with child.stdout:
            return child.wait(60), child.stdout.read()
    finally:
        child.kill()


@pytest.mark.parametrize(("args", "extra"), CASES.values(), ids=CASES.keys())
def test_a_forked_command_does_what_a_fresh_one_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], extra: dict[str, str]
) -> None:
    monkeypatch.delenv("SECURE_ORCA_EVENT_LOOP", raising=False)
    argv = [sys.executable, "-m", "secure_orca", *args]
    assert forked.forkable(argv)
    outcomes = []
    for fresh in (True, False):
        cwd = tmp_path / ("fresh" if fresh else "forked")
        cwd.mkdir()
        status, output = _run(argv, {**os.environ, **extra}, cwd, fresh)
        outcomes.append((status, output, sorted(str(path.relative_to(cwd)) for path in cwd.rglob("*"))))
    assert outcomes[0] == outcomes[1]


def test_signals_end_a_forked_replica_as_they_end_a_subprocess(dev_pki: pki.DevPKI) -> None:
    argv = launch.serve_argv(dev_pki)
    with run_replicas([argv, argv]) as (graceful, killed):
        assert isinstance(graceful.process.popen, forked.Forked)
        killed.process.popen.kill()
        assert killed.process.reap(10) == -signal.SIGKILL
        assert graceful.process.stop() == 0
        assert graceful.process.popen.poll() == 0


def test_a_forked_replicas_cpu_is_counted_once_it_has_ended(dev_pki: pki.DevPKI) -> None:
    before = forked.reaped_cpu_seconds()
    with run_replicas([launch.serve_argv(dev_pki)]):
        pass
    assert forked.reaped_cpu_seconds() > before


@pytest.mark.parametrize("args", [["certs", "--dir", "made"], ["serve", "--secure-port", "port"]], ids=["out", "err"])
def test_run_captures_stdout_and_stderr_apart_as_subprocess_run_does(tmp_path: Path, args: list[str]) -> None:
    argv = [sys.executable, "-m", "secure_orca", *args]
    (tmp_path / "fresh").mkdir()
    (tmp_path / "forked").mkdir()
    fresh = subprocess.run(argv, cwd=tmp_path / "fresh", capture_output=True, text=True, timeout=60)
    made = forked.run(argv, cwd=tmp_path / "forked")
    assert (made.returncode, made.stdout, made.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)
    assert bool(made.stdout) != bool(made.stderr)  # one stream each: a swap or a merge shows


def test_run_kills_a_command_that_outlives_its_timeout(dev_pki: pki.DevPKI) -> None:
    with pytest.raises(subprocess.TimeoutExpired):
        forked.run(launch.serve_argv(dev_pki), timeout=1)
