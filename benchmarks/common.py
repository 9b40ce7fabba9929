"""Shared pieces of the benchmarks: spreads of interleaved ratios, the benchmark PKI and client identities,
server flags, an h2load runner (with an LD_PRELOAD shim for client certificates), and an in-process server."""

from __future__ import annotations

import argparse
import asyncio
import logging
import socket
import ssl
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

from secure_orca import pki
from secure_orca.cli import serve as serve_cli
from secure_orca.credentials import devpki
from secure_orca.lab import instrcount, loadgen
from secure_orca.lab import replicas as launch
from secure_orca.lab.loadgen import Identity, Load, LoadResult
from secure_orca.lab.procfs import process_cpu
from secure_orca.orca.headers import REPORT as REPORT_HEADER
from secure_orca.server import assembly
from secure_orca.server.config import build_config

HOST = "127.0.0.1"
PATH = "/healthz"  # the cheapest route of the demo backend: the feature's share of a request is largest here
MAX_REQUESTS = 1_000_000_000  # keep connections open: per-connection cost is measured on its own (section 3)


# ---- statistics -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Spread:
    """Median and range of per-round values (ratios from interleaved rounds)."""

    median: float
    low: float
    high: float
    rounds: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        if not values:
            raise ValueError("no values")
        return cls(statistics.median(values), min(values), max(values), len(values))

    def text(self, digits: int = 3) -> str:
        return f"{self.median:.{digits}f} [{self.low:.{digits}f}, {self.high:.{digits}f}]"


def ratios(rounds: Sequence[dict[str, float]], variant: str, baseline: str) -> Spread:
    """Spread of ``variant / baseline`` computed within each round."""
    return Spread.of([r[variant] / r[baseline] for r in rounds if r.get(baseline)])


def rotated(items: Sequence[Any], round_index: int) -> list[Any]:
    """``items`` rotated by the round number, so no variant always runs first."""
    shift = round_index % len(items)
    return [*items[shift:], *items[:shift]]


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def jsonable(value: Any) -> Any:
    """Dataclasses (such as Spread) and paths made JSON-friendly, recursively."""
    if hasattr(value, "__dataclass_fields__"):
        return jsonable(asdict(value))
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


# ---- identities and flags ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class BenchPKI:
    """The development PKI of one benchmark run and the client identities made from it."""

    dev: pki.DevPKI

    @classmethod
    def create(cls, root: Path) -> BenchPKI:
        devpki.ensure(root)  # completes what is missing, overwrites nothing
        return cls(pki.DevPKI(root))

    @property
    def secret(self) -> str:
        return self.dev.secret.read_text().splitlines()[0].strip()

    def front_proxy(self, optin: str | None = "TEXT") -> Identity:
        return Identity("front-proxy", self.dev.cert("front_proxy_client"), self.dev.key("front_proxy_client"), optin)

    def user(self, optin: str | None = "TEXT") -> Identity:
        """An ordinary client-CA user sending the opt-in: a client bypassing the load balancer."""
        return Identity("bypass-user", self.dev.cert("user"), self.dev.key("user"), optin)

    def shared_secret(self) -> Identity:
        return Identity("shared-secret", optin=f"TEXT; secret={self.secret}")

    def anonymous(self, optin: str | None = "TEXT") -> Identity:
        return Identity("no-certificate", optin=optin)

    def server_flags(self, *, enabled: bool, interval: str = "100ms") -> list[str]:
        """``serve`` flags after the TLS ones of ``launch.serve_argv``: the same trust either way, the feature
        gate and --enable-endpoint-load-metrics only when ``enabled``."""
        flags = [
            "--requestheader-client-ca-file",
            str(self.dev.cert("front_proxy_ca")),
            "--requestheader-allowed-names",
            pki.FRONT_PROXY_CN,
            "--endpoint-load-metrics-secret-file",
            str(self.dev.secret),
            "--endpoint-load-metrics-auth",
            "front-proxy,shared-secret",
            "--endpoint-load-metrics-interval",
            interval,
            "--max-requests-per-connection",
            str(MAX_REQUESTS),
        ]
        if enabled:
            flags += ["--feature-gates", "RequestCostAggregation=true", "--enable-endpoint-load-metrics"]
        return flags

    def serve_argv(self, *, enabled: bool, interval: str = "100ms") -> list[str]:
        return launch.serve_argv(self.dev, self.server_flags(enabled=enabled, interval=interval), host=HOST)


def report_attached(url: str, identity: Identity, ca: Path) -> bool:
    """One HTTP/2 request as ``identity``; True when the response carries a load report."""
    context = ssl.create_default_context(cafile=str(ca))
    if identity.cert is not None and identity.key is not None:
        context.load_cert_chain(identity.cert, identity.key)
    with httpx.Client(http2=True, verify=context, timeout=10) as client:
        response = client.get(url + PATH, headers=identity.headers())
        response.raise_for_status()
        if response.http_version != "HTTP/2":
            raise RuntimeError(f"expected HTTP/2, got {response.http_version}")
        return REPORT_HEADER in response.headers


def tree_cpu(pid: int) -> float:
    """CPU seconds of ``pid`` and its live children (a supervisor and its workers)."""
    children = [int(word) for word in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    return sum(process_cpu(p) for p in (pid, *children))


# ---- h2load -----------------------------------------------------------------------------------------------


BenchError = loadgen.LoadError


def run_h2load(url: str, load: Load, identity: Identity, shim: Path, workdir: Path) -> LoadResult:
    """h2load against the benchmark route of ``url`` (see secure_orca.lab.loadgen)."""
    return loadgen.run_h2load(url + PATH, load, identity, workdir, shim)


# ---- a server in this process (to count verifications and requests) --------------------------------------


@dataclass
class InProcessServer:
    """``secure-orca serve`` running in a thread of this process, assembled by the same code from the same flags."""

    server: assembly.Server
    port: int
    loop: asyncio.AbstractEventLoop | None = None  # the serving loop, for readings taken on it

    @property
    def url(self) -> str:
        return f"https://{HOST}:{self.port}"

    @property
    def verifications(self) -> int:
        return assembly.verifications(self.server.app)

    @property
    def requests(self) -> int:
        return self.server.sampler.counters.requests


def parse_serve_flags(argv: Sequence[str]) -> argparse.Namespace:
    """The flags of a ``launch.serve_argv`` command line (everything after ``serve``), parsed by ``serve``."""
    parser = argparse.ArgumentParser()
    serve_cli.add_arguments(parser)
    return parser.parse_args(list(argv)[list(argv).index("serve") + 1 :])


def wait_listening(port: int, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((HOST, port), timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    raise BenchError(f"in-process server not listening on {port} after {timeout:.0f}s")


@contextmanager
def inprocess_server(argv: Sequence[str], *, profiler: Any = None) -> Iterator[InProcessServer]:
    """Serve in a background thread; ``profiler`` (e.g. cProfile.Profile) is enabled in that thread only."""
    config = build_config(parse_serve_flags(argv))
    config.serving.port = launch.free_port(HOST)
    server = assembly.Server.assemble(config)
    server.options.graceful_timeout = 2.0
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    failure: list[BaseException] = []

    def run() -> None:
        if profiler is not None:
            profiler.enable()
        try:
            loop.run_until_complete(server.run(stop.wait))
        except BaseException as error:
            failure.append(error)
        finally:
            if profiler is not None:
                profiler.disable()
            loop.close()

    # h2load drops its connections when a timed run ends: asyncio would log every unsent write and cancelled task.
    asyncio_log = logging.getLogger("asyncio")
    asyncio_level = asyncio_log.level
    asyncio_log.setLevel(logging.CRITICAL)
    thread = threading.Thread(target=run, name="bench-server", daemon=True)
    thread.start()
    try:
        wait_listening(config.serving.port)
        yield InProcessServer(server, config.serving.port, loop)
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(timeout=15)
        asyncio_log.setLevel(asyncio_level)
    if failure:
        raise BenchError(f"in-process server failed: {failure[0]!r}")


def variants_per_request(
    bench: BenchPKI, workdir: Path, variants: dict[str, list[str]], requests: int, baseline: int, repeats: int
) -> dict[str, instrcount.Counted]:
    """Instructions per request of the feature-on server with each variant's extra flags, under callgrind, in
    one run: windows of ``requests`` and ``baseline`` requests on one warm pinned server, their difference per
    request, one memory layout per repeat; for the front proxy with the opt-in and without. Keys:
    ``variant/front-proxy`` and ``variant/no-opt-in``."""
    identities = {"front-proxy": (bench.front_proxy(), True), "no-opt-in": (bench.front_proxy(optin=None), False)}
    totals: dict[str, int] = {}
    for repeat in range(repeats):
        for name, extra in variants.items():
            args = [*instrcount.serve_args(bench.serve_argv(enabled=True)), *extra]
            with instrcount.counted_server(args, workdir / f"variant-{name}", layout=repeat) as server:
                for key, (identity, attached) in identities.items():
                    if report_attached(server.url, identity, bench.dev.cert("ca")) != attached:
                        raise RuntimeError(f"{name}/{key}: unexpected report outcome")
                    instrcount.requests(server, identity, baseline, PATH, workdir)
                server.control("--instr=on")
                for key, (identity, _) in identities.items():
                    for count in (baseline, requests):
                        with server.window(f"{name}/{key},{count},{repeat}"):
                            instrcount.requests(server, identity, count, PATH, workdir)
                server.control("--instr=off")
                totals |= server.totals()
    return {
        f"{name}/{key}": instrcount.per_unit(
            totals, f"{name}/{key}", str(requests), str(baseline), requests - baseline, repeats
        )
        for name in variants
        for key in identities
    }


def print_variants(
    counted: dict[str, instrcount.Counted], base: tuple[str, str], other: tuple[str, str], ratio: str
) -> None:
    """The Markdown table of a two-variant ``variants_per_request`` run: per request kind, the instructions per
    request of ``base`` and ``other`` (each a variant's key and its column title) and ``ratio``, other / base:
    median [min, max] over the memory layouts."""
    print(f"| request | {base[1]} (instr/request) | {other[1]} | {ratio} |")
    print("|---|---|---|---|")
    for key in ("front-proxy", "no-opt-in"):
        low_side, high_side = counted[f"{base[0]}/{key}"], counted[f"{other[0]}/{key}"]
        median, low, high = instrcount.ratio_range(high_side, low_side)
        print(f"| {key} | {low_side.median:,.0f} | {high_side.median:,.0f} | {median:.4f} [{low:.4f}, {high:.4f}] |")


def variants_arguments(
    prog: str, doc: str, output: str, repeats: int, argv: Sequence[str] | None
) -> argparse.Namespace:
    """The command line of a ``variants_per_request`` benchmark; valgrind checked, old dumps removed."""
    parser = argparse.ArgumentParser(prog=f"python -m {prog}", description=doc.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=600)
    parser.add_argument("--baseline", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=repeats)
    parser.add_argument("--output", type=Path, default=Path(tempfile.gettempdir()) / output)
    args = parser.parse_args(argv)
    reason = instrcount.valgrind_available()
    if reason is not None:
        raise SystemExit(f"cannot count instructions: {reason}")
    args.output.mkdir(parents=True, exist_ok=True)
    for old in args.output.glob("variant-*"):
        old.unlink()
    return args
