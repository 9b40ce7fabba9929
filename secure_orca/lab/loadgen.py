"""Load from nghttp2's h2load (a real C HTTP/2 client), parsed into throughput and latency percentiles.

h2load 1.52 cannot present a TLS client certificate; ``h2load_client_cert.c`` (shipped with this package,
compiled on first use with the system C compiler) is an LD_PRELOAD shim that makes every client context it
creates present the certificate and key named in its environment.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from secure_orca.errors import SecureOrcaError
from secure_orca.lab import h2load
from secure_orca.orca.headers import OPTIN

SHIM_SOURCE = Path(__file__).with_name("h2load_client_cert.c")
_FINISHED = re.compile(r"finished in ([\d.]+)(m?s), ([\d.]+) req/s")
_REQUESTS = re.compile(r"requests: (\d+) total, \d+ started, \d+ done, (\d+) succeeded, (\d+) failed")


class LoadError(SecureOrcaError, RuntimeError):
    """A load run that could not run or whose requests failed."""


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of already sorted values (q in 0..100)."""
    if not sorted_values:
        return float("nan")
    rank = max(1, min(len(sorted_values), round(q / 100 * len(sorted_values) + 0.5)))
    return sorted_values[rank - 1]


@dataclass(frozen=True)
class Identity:
    """What a client presents: a certificate (or none) and the opt-in header value (or none)."""

    name: str
    cert: Path | None = None
    key: Path | None = None
    optin: str | None = None

    def headers(self) -> dict[str, str]:
        return {OPTIN: self.optin} if self.optin is not None else {}

    def __repr__(self) -> str:  # the opt-in may hold a secret
        return f"Identity({self.name!r}, cert={self.cert})"


@dataclass(frozen=True)
class Load:
    """An h2load workload: connections, streams per connection, and either a request count or a duration."""

    clients: int
    streams: int
    requests: int | None = None
    duration: float | None = None
    warmup: float | None = None

    @property
    def label(self) -> str:
        return f"c={self.clients} m={self.streams}"


@dataclass(frozen=True)
class LoadResult:
    """One h2load run: throughput over the measured period and latency percentiles from its request log."""

    rps: float
    elapsed: float
    succeeded: int
    failed: int
    p50_ms: float
    p99_ms: float
    server_cpu_us: float = float("nan")  # server CPU per request, where the caller measured it


def h2load_path() -> str:
    found = shutil.which("h2load")
    if found is None:
        raise LoadError("h2load not found (Debian package nghttp2-client)")
    return found


_built_shims: dict[Path | None, Path] = {}


def build_shim(directory: Path | None = None) -> Path:
    """Compile the client-certificate shim (once per process and directory). By default into a private
    directory made for this process (mkdtemp: mode 0700, unpredictable name): a shared, fixed directory would
    let any local user plant the library that gets preloaded into h2load."""
    requested = directory
    if requested in _built_shims and _built_shims[requested].exists():
        return _built_shims[requested]
    directory = requested or Path(tempfile.mkdtemp(prefix="secure-orca-shim-"))
    target = directory / "h2load_client_cert.so"
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise LoadError("no C compiler: cannot build the h2load client-certificate shim")
    directory.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [compiler, "-shared", "-fPIC", "-O2", "-o", str(target), str(SHIM_SOURCE), "-ldl"],
        check=True,
        capture_output=True,
        timeout=60,
    )
    _built_shims[requested] = target
    return target


def parse_h2load(stdout: str, log_text: str) -> LoadResult:
    """h2load's summary plus per-request latencies from its --log-file (third column, microseconds)."""
    finished, requests = _FINISHED.search(stdout), _REQUESTS.search(stdout)
    if finished is None or requests is None:
        raise LoadError(f"cannot parse h2load output:\n{stdout[-2000:]}")
    elapsed = float(finished.group(1)) / (1000 if finished.group(2) == "ms" else 1)
    latencies = sorted(int(row.split("\t")[2]) / 1000 for row in log_text.splitlines() if row.count("\t") >= 2)
    return LoadResult(
        rps=float(finished.group(3)),
        elapsed=elapsed,
        succeeded=int(requests.group(2)),
        failed=int(requests.group(3)),
        p50_ms=percentile(latencies, 50),
        p99_ms=percentile(latencies, 99),
    )


def run_h2load(
    url: str, load: Load, identity: Identity, workdir: Path, shim: Path | None = None, patience: float = 60.0
) -> LoadResult:
    """Run h2load once against ``url`` (a full URL with path); a certificate goes through the shim. It may take
    ``patience`` seconds beyond its duration (more for a server under callgrind, which runs ~50x slower)."""
    log_file = workdir / "h2load-requests.log"
    log_file.unlink(missing_ok=True)
    argv = h2load.argv(
        url,
        clients=load.clients,
        streams=load.streams,
        threads=1,
        requests=load.requests,
        seconds=load.duration,
        warmup=load.warmup,
        headers=[f"{name}: {value}" for name, value in identity.headers().items()],
        log_file=log_file,
        program=h2load_path(),
    )
    env = {"PATH": "/usr/bin:/bin"}
    if identity.cert is not None and identity.key is not None:
        env |= {
            "LD_PRELOAD": str(shim or build_shim()),
            "H2LOAD_CLIENT_CERT": str(identity.cert),
            "H2LOAD_CLIENT_KEY": str(identity.key),
        }
    timeout = patience + (load.duration or 0) + (load.warmup or 0)
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout)
    if done.returncode != 0:
        raise LoadError(f"h2load exited with {done.returncode}: {done.stderr[-1000:]}")
    if identity.cert is not None and "h2load_client_cert: presenting" not in done.stderr:
        raise LoadError(f"the client-certificate shim did not load: {done.stderr[-500:]}")
    result = parse_h2load(done.stdout, log_file.read_text() if log_file.exists() else "")
    if result.failed or not result.succeeded:
        raise LoadError(f"h2load: {result.failed} of {result.succeeded + result.failed} requests failed")
    return result
