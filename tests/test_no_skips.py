"""tests/no_skips.py under real pytest: with SECURE_ORCA_NO_SKIPS=1 a skip (marked or called) fails and names its
reason, and a whole module's skip is a collection error; without it a skip stays a skip; an xfail stays an xfail."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import no_skips

ROOT = Path(__file__).parents[1]

CASES = """
import pytest

@pytest.mark.skipif(True, reason="no such peer")
def test_marked():
    pass

def test_called():
    pytest.skip("no such tool")

@pytest.mark.xfail(reason="known", strict=True)
def test_expected():
    assert False
"""
MODULE = 'import pytest\npytest.skip("no such library", allow_module_level=True)\n'


def run(tmp_path: Path, flag: str | None, *files: str) -> str:
    (tmp_path / "test_cases.py").write_text(CASES)
    (tmp_path / "test_module.py").write_text(MODULE)
    env = {k: v for k, v in os.environ.items() if k != no_skips.ENV} | ({no_skips.ENV: flag} if flag else {})
    env["PYTHONPATH"] = str(ROOT)
    argv = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-rA",
        "-p",
        "no:xdist",
        "-p",
        "tests.no_skips",
        "-p",
        "no:cacheprovider",
    ]
    paths = [str(tmp_path / f) for f in files] or [str(tmp_path)]
    done = subprocess.run([*argv, *paths], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
    return done.stdout


@pytest.mark.parametrize("flag", [None, "0"])
def test_without_the_flag_a_skip_stays_a_skip(tmp_path: Path, flag: str | None) -> None:
    out = run(tmp_path, flag)
    assert "3 skipped, 1 xfailed" in out, out
    assert "failed" not in out.replace("xfailed", ""), out


def test_with_the_flag_every_skip_fails_with_its_reason(tmp_path: Path) -> None:
    out = run(tmp_path, "1", "test_cases.py")
    assert out.strip().splitlines()[-1].startswith("1 failed, 1 xfailed, 1 error"), out  # skipif: in setup
    for reason in ("no such peer", "no such tool"):
        assert f"{no_skips.ENV}=1 (CI installs every peer): {reason}" in out, out


def test_with_the_flag_a_skipped_module_stops_the_run_with_its_reason(tmp_path: Path) -> None:
    """A whole module's skip is a collection error: pytest runs nothing else, and CI fails at once."""
    out = run(tmp_path, "1", "test_module.py")
    assert "1 error" in out and "no such library" in out and f"{no_skips.ENV}=1" in out, out
