"""Run ``python -m secure_orca`` as a user would (forked from a pre-imported server, ``tests.forked``, which
``tests/test_forked.py`` holds to a fresh interpreter), and write the files its flags name."""

from __future__ import annotations

import contextlib
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

from secure_orca import pki
from secure_orca.lab import replicas as launch
from tests import forked


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return forked.run([sys.executable, "-m", "secure_orca", *args], cwd=cwd)


def write(path: Path, data: bytes, mode: int = 0o600) -> str:
    path.write_bytes(data)
    path.chmod(mode)
    return str(path)


def base(p: pki.DevPKI) -> list[str]:
    return launch.serve_argv(p, [])[3:]  # "serve" and its flags, without the interpreter


def unassigned_port(host: str = "127.0.0.1") -> int:
    """A free port below the kernel's ephemeral range, for a block that names its ports: between this choice and
    the block's bind, no replica or Envoy that binds port 0 can be handed it (``launch.free_port`` returns an
    ephemeral port, which they can; Envoy then failed the README block with "Address already in use")."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for _ in range(100):
        port = random.randrange(max(1024, low - 12000), low)
        with socket.socket() as probe, contextlib.suppress(OSError):
            probe.bind((host, port))
            return port
    raise AssertionError(f"no free port below {low}")


def run_block(script: str, ports: tuple[str, ...], cwd: Path, env: dict[str, str] | None = None) -> str:
    """A documented ``sh`` block run as written with ``bash -e`` in ``cwd`` (the venv's bin first on PATH), each
    documented port replaced by a free one; everything the block leaves running is killed once it ends, so a
    block that stops at a failed line fails at once. Its output, once it exited 0 with no traceback (else the test
    fails, showing the output)."""
    for port in ports:
        script = re.sub(rf"\b{port}\b", str(unassigned_port()), script)
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", **(env or {})}
    process = subprocess.Popen(
        ["bash", "-e", "-c", script],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    lines: list[str] = []
    assert process.stdout is not None
    reader = threading.Thread(target=lambda: lines.extend(process.stdout or ()), daemon=True)
    reader.start()
    try:
        process.wait(timeout=180)  # the block's end, not its output's: what it left running may hold the pipe open
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # anything the block left behind
        reader.join(10)
    output = "".join(lines)
    assert process.returncode == 0, output
    assert "Traceback" not in output, output
    return output
