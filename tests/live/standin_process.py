"""The model-server stand-ins of tests/live (``vllm_like``, ``triton_like``), each run as its own process."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

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


def parser(description: str) -> argparse.ArgumentParser:
    """A stand-in's command line: its port, and TLS for the probe (each speaks HTTP/1.1 as the real one does)."""
    out = argparse.ArgumentParser(description=description)
    out.add_argument("--port", type=int, required=True)
    out.add_argument("--certfile", help="serve over TLS with this certificate (HTTP/1.1; for the probe)")
    out.add_argument("--keyfile")
    return out


def serve(app: Callable[..., Any], args: argparse.Namespace) -> None:
    """Serve ``app`` with hypercorn on loopback until killed; print ``ready`` once listening."""
    from hypercorn.asyncio import serve as hypercorn_serve
    from hypercorn.config import Config

    config = Config()
    config.bind = [f"127.0.0.1:{args.port}"]
    config.accesslog = None
    config.keep_alive_timeout = 75
    config.backlog = 1024
    if args.certfile:
        config.certfile, config.keyfile = args.certfile, args.keyfile
        config.alpn_protocols = ["http/1.1"]  # vLLM's uvicorn and Triton's libevhtp speak HTTP/1.1

    async def run() -> None:
        print("ready", flush=True)
        await hypercorn_serve(app, config)

    asyncio.run(run())
