"""``serve --event-loop``: uvloop serves the same gate as asyncio (the probe finds the same outcome for every
vector), a loop that cannot run is one line at start-up."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from secure_orca import pki
from secure_orca.lab import replicas as launch
from secure_orca.probe.audit import probe
from tests.replicas import run_replicas

from ..conftest import fp_flags, probe_config

pytest.importorskip("uvloop")


def _serve_error(dev_pki: pki.DevPKI, prelude: str, *flags: str, env: dict[str, str] | None = None) -> str:
    argv = [*launch.serve_argv(dev_pki)[3:], *flags]
    code = f"import sys; {prelude}; from secure_orca.cli import main; sys.exit(main({argv!r}))"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env={**os.environ, **(env or {})}
    )
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    return result.stderr.strip().splitlines()[-1]


def test_uvloop_not_installed_is_one_line(dev_pki: pki.DevPKI) -> None:
    # A None entry in sys.modules is how Python marks a module that cannot be imported.
    last = _serve_error(dev_pki, "sys.modules['uvloop'] = None", "--event-loop", "uvloop")
    assert last.startswith("secure-orca serve: error: --event-loop uvloop: uvloop is not installed"), last


def test_unknown_loop_from_the_environment_is_one_line(dev_pki: pki.DevPKI) -> None:
    last = _serve_error(dev_pki, "pass", env={"SECURE_ORCA_EVENT_LOOP": "trio"})
    assert last == "secure-orca serve: error: SECURE_ORCA_EVENT_LOOP: 'trio' is not one of asyncio, uvloop", last


def _loaded(pid: int, library: str) -> bool:
    return library in Path(f"/proc/{pid}/maps").read_text()


def test_uvloop_serves_the_same_gate(dev_pki: pki.DevPKI) -> None:
    """Every vector of the bypass audit gets the same outcome from a uvloop replica as from an asyncio one."""
    flags = fp_flags(dev_pki)
    argvs = [launch.serve_argv(dev_pki, [*flags, "--event-loop", loop]) for loop in ("asyncio", "uvloop")]
    config = probe_config(dev_pki)
    with run_replicas(argvs) as (plain, fast):
        assert not _loaded(plain.process.popen.pid, "uvloop") and _loaded(fast.process.popen.pid, "uvloop")
        results = [probe(replica.url, config) for replica in (plain, fast)]
    outcomes = [{r.vector.name: r.outcome for r in result.results} for result in results]
    assert outcomes[0] == outcomes[1]
    assert all(result.verdict == "no-leak" and result.control_ok for result in results)
    assert "no-report" in outcomes[1].values() and "refused-handshake" in outcomes[1].values()
