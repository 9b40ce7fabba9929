"""Run ``python -m secure_orca`` as a user would, and write the files its flags name."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from secure_orca import pki
from secure_orca.lab import replicas as launch


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "secure_orca", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
    )


def write(path: Path, data: bytes, mode: int = 0o600) -> str:
    path.write_bytes(data)
    path.chmod(mode)
    return str(path)


def base(p: pki.DevPKI) -> list[str]:
    return launch.serve_argv(p, [])[3:]  # "serve" and its flags, without the interpreter
