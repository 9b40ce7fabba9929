"""Start ``secure-orca serve`` replicas as real subprocesses on free loopback ports, wait until they serve,
and stop them (SIGTERM, then SIGKILL) on exit or failure. Used by the tests, the evaluation and Envoy runs."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from secure_orca import credential_flags as flags
from secure_orca.errors import SecureOrcaError
from secure_orca.pki import DevPKI

READY = re.compile(r"Running on https://(\S+):(\d+) ")
KILL_WAIT = 10.0  # seconds to wait for a process to go after SIGKILL


class LaunchError(SecureOrcaError, RuntimeError):
    """A process that did not start; the message carries the tail of its output."""


@dataclass
class Process:
    """A started subprocess whose combined output is collected by a thread."""

    name: str
    popen: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)

    def output(self, tail: int = 20) -> str:
        return "".join(self.lines[-tail:])

    def stop(self, timeout: float = 10.0) -> int:
        """SIGTERM, wait, then SIGKILL; returns the exit status."""
        self.terminate()
        return self.reap(timeout)

    def terminate(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)

    def reap(self, timeout: float) -> int:
        """Wait up to ``timeout`` for the exit that SIGTERM asked for, then SIGKILL."""
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(KILL_WAIT)
        return self.popen.returncode


def stop_all(processes: Sequence[Process], timeout: float = 10.0) -> None:
    """Stop several processes at once: SIGTERM to all, then each gets what is left of one shared ``timeout``
    before SIGKILL. Stopped one after another, each replica that is still draining a connection would add its
    own wait."""
    for process in processes:
        process.terminate()
    deadline = time.monotonic() + timeout
    for process in processes:
        process.reap(max(0.0, deadline - time.monotonic()))


def start_process(
    name: str, argv: Sequence[str], env: dict[str, str] | None = None, cwd: Path | None = None
) -> Process:
    popen = subprocess.Popen(
        list(argv),
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **(env or {})},
    )
    process = Process(name, popen)

    def drain() -> None:
        assert popen.stdout is not None
        for line in popen.stdout:
            process.lines.append(line)

    threading.Thread(target=drain, name=f"drain-{name}", daemon=True).start()
    return process


def wait_for(process: Process, pattern: re.Pattern[str], timeout: float = 30.0) -> re.Match[str]:
    """Wait until a line of the process's output matches ``pattern``."""
    deadline = time.monotonic() + timeout
    seen = 0
    while time.monotonic() < deadline:
        lines = process.lines
        for line in lines[seen:]:
            match = pattern.search(line)
            if match:
                return match
        seen = len(lines)
        if process.popen.poll() is not None:
            time.sleep(0.1)  # let the drain thread collect the last lines
            raise LaunchError(f"{process.name} exited with status {process.popen.returncode}:\n{process.output()}")
        time.sleep(0.02)
    raise LaunchError(f"{process.name} not ready after {timeout:.0f}s:\n{process.output()}")


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@dataclass
class Replica:
    """A running ``secure-orca serve``."""

    process: Process
    host: str
    port: int

    @property
    def url(self) -> str:
        return f"https://{self.host}:{self.port}"


def serve_argv(
    pki: DevPKI, extra: Sequence[str] = (), *, host: str = "127.0.0.1", port: int = 0, demo_work: bool = True
) -> list[str]:
    """Arguments of a replica that uses ``pki`` with the feature on (modes and material from ``extra``); lab
    replicas serve the demo's /work load generator unless ``demo_work`` is False."""
    return [
        sys.executable,
        "-m",
        "secure_orca",
        "serve",
        "--bind-address",
        host,
        "--secure-port",
        str(port),
        flags.TLS_CERT,
        str(pki.cert("server")),
        flags.TLS_KEY,
        str(pki.key("server")),
        flags.CLIENT_CA,
        str(pki.cert("client_ca")),
        # The lab's load balancers and load generators act as the front proxy without naming users.
        "--requestheader-missing-user=anonymous",
        # One process, whatever the machine: the lab compares options per process (``extra`` may say otherwise).
        "--workers=1",
        *(["--demo-work"] if demo_work else []),
        *extra,
    ]


@contextmanager
def replicas(argvs: Sequence[Sequence[str]], timeout: float = 30.0) -> Iterator[list[Replica]]:
    """Start one replica per argv (in parallel) and stop them all on exit (in parallel too)."""
    with ExitStack() as stack:
        started: list[Replica] = []
        processes: list[Process] = []
        stack.callback(stop_all, processes)
        for i, argv in enumerate(argvs):
            processes.append(start_process(f"replica-{i}", argv))
        for process in processes:
            match = wait_for(process, READY, timeout)
            started.append(Replica(process, match.group(1).strip("[]"), int(match.group(2))))
        yield started
