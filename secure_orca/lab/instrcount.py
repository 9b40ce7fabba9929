"""Instruction counts of a real ``secure-orca serve`` under valgrind's callgrind: deterministic costs.

A figure is a difference of two counted windows on the same warm server, a run of N requests minus a run of M,
divided by N - M: start-up, the TLS handshake and the connection's end cancel out, and wall time never enters.
The server runs through ``secure_orca.cli.pinned`` (hash seed, UUIDs, the Date header's clock, the sampler's
timer and the GC pinned; one memory layout per repeat). Windows are marked from outside with
``callgrind_control``; before each, the server gets ``SIGUSR1`` (same GC and UUID state) and the harness waits
until its CPU time stops moving, so no window cuts a connection's close at a random point.

Used by ``benchmarks/instructions.py`` and by ``secure-orca evaluate``.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from secure_orca.errors import SecureOrcaError
from secure_orca.lab import replicas as launch
from secure_orca.lab.loadgen import Identity, Load, run_h2load
from secure_orca.lab.procfs import process_cpu
from secure_orca.workers.lifeline import die_with_parent

VALGRIND = ("valgrind", "--tool=callgrind", "--instr-atstart=no", "--dump-line=no", "--dump-instr=no")
PINNED_ENV = {"PYTHONHASHSEED": "0"}
LAYOUT_ENV = "SECURE_ORCA_BENCH_LAYOUT"  # read by secure_orca.cli.pinned
SETTLE_POLL = 0.1  # seconds between looks at the server's CPU time
SETTLE_QUIET = 3  # looks in a row without CPU time: the server is idle
CLOCK_TICK = os.sysconf("SC_CLK_TCK")
_SUMMARY = re.compile(r"^summary:\s+(\d+)", re.MULTILINE)
_DESC = re.compile(r"^desc: Trigger: (?:Client Request: |dump )?(.*)$", re.MULTILINE)


class CountError(SecureOrcaError, RuntimeError):
    """Instruction counts that could not be taken."""


def valgrind_available(marks: bool = False) -> str | None:
    """Why instruction counts cannot be taken here, or None when they can; ``marks``: also the in-process
    client-request marks (benchmarks/instr_marks.c), which need callgrind.h and a C compiler."""
    for tool in ("valgrind", "callgrind_control", "callgrind_annotate"):
        if shutil.which(tool) is None:
            return f"{tool} not found (Debian package valgrind)"
    if marks and not Path("/usr/include/valgrind/callgrind.h").exists():
        return "valgrind/callgrind.h not found (Debian package valgrind)"
    if marks and shutil.which("cc") is None and shutil.which("gcc") is None:
        return "no C compiler for the callgrind client-request marks"
    return None


def dump_total(path: Path) -> int:
    """Instructions counted in one callgrind dump."""
    found = _SUMMARY.search(path.read_text(errors="replace"))
    if found is None:
        raise CountError(f"no summary line in {path}")
    return int(found.group(1))


def dumps_by_label(directory: Path, prefix: str) -> dict[str, Path]:
    """Dump files of one process (``prefix.N``) keyed by the label given when each was taken."""
    found: dict[str, Path] = {}
    for path in directory.glob(f"{prefix}.*"):
        match = _DESC.search(path.read_text(errors="replace")[:4000])
        if match:
            found[match.group(1).strip()] = path
    return found


@dataclass(frozen=True)
class Counted:
    """Instructions per request (or per connection) of one variant, one value per repeat."""

    values: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def spread(self) -> float:
        """(max - min) / median over the repeats: the relative repeat-to-repeat spread."""
        return (max(self.values) - min(self.values)) / self.median if self.median else 0.0


def ratio_range(on: Counted, off: Counted) -> tuple[float, float, float]:
    """Median, min and max of on/off, taken repeat by repeat."""
    values = [a / b for a, b in zip(on.values, off.values, strict=True)]
    return statistics.median(values), min(values), max(values)


def pinned_env(layout: int) -> dict[str, str]:
    """The environment of a counted server: this checkout first on the path, the hash seed and the layout."""
    env = dict(os.environ) | PINNED_ENV | {LAYOUT_ENV: str(layout)}
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    return env


@dataclass
class CountedServer:
    """``secure-orca serve`` (pinned) under callgrind; windows are zeroed and dumped from outside."""

    process: subprocess.Popen[bytes]
    host: str
    port: int
    prefix: Path

    @property
    def url(self) -> str:
        return f"https://{self.host}:{self.port}"

    def control(self, *args: str) -> None:
        subprocess.run(
            ["callgrind_control", *args, str(self.process.pid)], check=True, capture_output=True, timeout=120
        )

    def settle(self) -> None:
        """Wait until the server has finished what the last client left it (closing the connection, cancelling
        its tasks): its CPU time stops moving. A dump taken earlier would cut that work at a random point."""
        last, quiet = process_cpu(self.process.pid), 0
        while quiet < SETTLE_QUIET:
            time.sleep(SETTLE_POLL)
            now = process_cpu(self.process.pid)
            quiet = quiet + 1 if now == last else 0
            last = now

    @contextmanager
    def window(self, label: str) -> Iterator[None]:
        """Count what happens inside the block as one dump named ``label`` (no shell metacharacters:
        callgrind_control hands it to vgdb through a shell)."""
        self.process.send_signal(signal.SIGUSR1)  # secure_orca.cli.pinned.reset: same GC and UUID state
        self.settle()
        self.control("--zero")
        yield
        self.settle()
        self.control(f"--dump={label}")

    def totals(self) -> dict[str, int]:
        """Instructions of every labelled window so far."""
        found = dumps_by_label(self.prefix.parent, f"{self.prefix.name}.{self.process.pid}")
        return {label: dump_total(path) for label, path in found.items() if "," in label}

    def dumps(self) -> dict[str, Path]:
        return dumps_by_label(self.prefix.parent, f"{self.prefix.name}.{self.process.pid}")


def serve_args(argv: Sequence[str]) -> list[str]:
    """The flags of a ``replicas.serve_argv`` command line after ``serve``, without the address flags (the
    counted server chooses its own port)."""
    args = list(argv[list(argv).index("serve") + 1 :])
    for flag in ("--bind-address", "--secure-port"):
        if flag in args:
            at = args.index(flag)
            del args[at : at + 2]
    return args


@contextmanager
def counted_server(
    serve_args: Sequence[str], prefix: Path, *, host: str = "127.0.0.1", layout: int = 0
) -> Iterator[CountedServer]:
    """``secure-orca serve`` with ``serve_args`` (everything after ``serve`` but the address flags) under
    callgrind, instrumentation off until ``control("--instr=on")``."""
    port = launch.free_port(host)
    argv = [sys.executable, "-m", "secure_orca.cli.pinned", "serve", *serve_args]
    argv += ["--bind-address", host, "--secure-port", str(port), "--credential-reload-interval", "1h"]
    with under_callgrind(argv, pinned_env(layout), prefix, host, port) as process:
        yield CountedServer(process, host, port, prefix)


@contextmanager
def under_callgrind(
    argv: Sequence[str], env: Mapping[str, str], prefix: Path, host: str, port: int
) -> Iterator[subprocess.Popen[bytes]]:
    """Any server ``argv`` that listens on ``host``:``port``, under callgrind (dumps ``prefix.PID.N``, output in
    ``prefix.log``), once it listens; stopped with SIGTERM at the end."""
    command = [*VALGRIND, f"--callgrind-out-file={prefix}.%p", *argv]
    with (prefix.parent / f"{prefix.name}.log").open("wb") as log:
        process = subprocess.Popen(
            command, env=dict(env), stdout=log, stderr=subprocess.STDOUT, preexec_fn=die_with_parent
        )
        try:
            wait_listening(host, port, process)
            yield process
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=120)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def wait_listening(host: str, port: int, process: subprocess.Popen[bytes], timeout: float = 180.0) -> None:
    import socket

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise CountError(f"the counted server exited with {process.returncode} before listening")
        try:
            with socket.create_connection((host, port), timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise CountError(f"the counted server is not listening on {port} after {timeout:.0f}s")


def requests(server: CountedServer, identity: Identity, count: int, path: str, workdir: Path) -> None:
    """``count`` requests on one new connection, one at a time (h2load -c 1 -m 1: the same frames every run). The
    server runs under callgrind, so a loaded machine may take minutes: it is given 10 minutes."""
    run_h2load(server.url + path, Load(1, 1, requests=count), identity, workdir, patience=600.0)


def per_unit(totals: dict[str, int], label: str, long: str, short: str, units: int, repeats: int) -> Counted:
    """(window ``label,long,r`` - window ``label,short,r``) / units for every repeat r."""
    return Counted(
        tuple((totals[f"{label},{long},{r}"] - totals[f"{label},{short},{r}"]) / units for r in range(repeats))
    )
