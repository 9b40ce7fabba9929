"""The model-server stand-ins of tests/live (``vllm_like``, ``triton_like``), each run as its own process."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from secure_orca.lab import replicas as launch

ROOT = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def running(module: str, *args: str, tls: tuple[Path, Path] | None = None) -> Iterator[str]:
    """``python -m tests.live.<module>`` on a free loopback port (over TLS with ``tls``: certificate and key), until
    the block ends: its URL. Its stderr must hold no traceback."""
    port = launch.free_port()
    argv = [sys.executable, "-m", f"tests.live.{module}", "--port", str(port), *args]
    if tls is not None:
        argv += ["--certfile", str(tls[0]), "--keyfile", str(tls[1])]
    process = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            assert process.poll() is None and time.monotonic() < deadline, process.stderr and process.stderr.read()
            time.sleep(0.05)
        yield f"{'https' if tls else 'http'}://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=10)
        err = process.stderr.read() if process.stderr else ""
        assert "Traceback" not in err, err
