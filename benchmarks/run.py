"""Run the performance benchmarks (the cost of the load report on the request path) and write Markdown and JSON results.

    python -m benchmarks.run                 # the request path's sections (about 12 minutes on 2 cores)
    python -m benchmarks.run --smoke         # every section with small counts: checks that everything runs
    python -m benchmarks.run --only middleware --output /tmp/bench
    python -m benchmarks.run --only audit-cost --only handshake-cost

The request path's sections: endtoend (h2load against replicas), middleware (in process), connections (mTLS per
connection), sampler (idle CPU), profile (where server time goes). Every comparison is interleaved in rounds and
reported as ratios with their spread, so a shared, noisy machine cancels out.

The other sections are named by the question they answer (``SCRIPTS``); each is also its own script,
``python -m benchmarks.MODULE`` with that script's arguments, and run here as that script with its default
arguments (small ones under ``--smoke``, or skipped with the reason printed when it cannot run small). Their
section of results.md is what the script printed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.metadata
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from secure_orca.lab.loadgen import build_shim, h2load_path

from . import connections, endtoend, middleware_cost, profile, sampler_cpu
from .common import BenchPKI, Load, jsonable

REQUEST_PATH = ("endtoend", "middleware", "connections", "sampler", "profile")
DEFAULT_OUTPUT = Path(tempfile.gettempdir()) / "secure-orca-bench"


@dataclass(frozen=True)
class Settings:
    """Counts of one run; ``SMOKE`` only proves the benchmarks run."""

    e2e_rounds: int
    e2e_loads: tuple[Load, ...]
    mw_rounds: int
    mw_requests: int
    mw_seconds: float
    conn_rounds: int
    conn_count: int
    proof_connections: int
    proof_requests: int
    sampler_rounds: int
    sampler_window: float
    profile_load: Load


FULL = Settings(
    e2e_rounds=7,
    e2e_loads=tuple(Load(c, m, duration=3, warmup=1) for c, m in ((1, 1), (4, 8), (16, 32))),
    mw_rounds=15,
    mw_requests=20_000,
    mw_seconds=2.0,
    conn_rounds=7,
    conn_count=100,
    proof_connections=4,
    proof_requests=4_000,
    sampler_rounds=3,
    sampler_window=20.0,
    profile_load=Load(4, 8, duration=5, warmup=1),
)
SMOKE = Settings(
    e2e_rounds=1,
    e2e_loads=(Load(1, 1, requests=40), Load(2, 4, requests=80)),
    mw_rounds=2,
    mw_requests=200,
    mw_seconds=0.5,
    conn_rounds=1,
    conn_count=4,
    proof_connections=2,
    proof_requests=60,
    sampler_rounds=1,
    sampler_window=1.0,
    profile_load=Load(2, 4, requests=80),
)


@dataclass(frozen=True)
class Script:
    """A benchmark that is its own script, ``python -m benchmarks.<module>``, as a section: the question it
    answers, the arguments of a smoke run (``None``: it cannot run small, for ``reason``)."""

    module: str
    question: str
    smoke: tuple[str, ...] | None
    reason: str = ""


CALLGRIND = "runs under callgrind: minutes before the first figure"
SCRIPTS = {
    "audit-cost": Script("audit_cost", "What the audit log costs per request, in instructions", None, CALLGRIND),
    "audit-flood": Script(
        "audit_flood",
        "Another client's p99 while a hostile flood fills the audit log",
        ("--rounds", "1", "--requests", "60", "--samples", "10"),
    ),
    "audit-workers": Script(
        "audit_workers",
        "What the audit log costs under serve --workers 1 and 2, in requests per CPU-second",
        ("1", "1"),
    ),
    "authn-cost": Script(
        "authn_cost", "What authentication adds per request, in process", ("--rounds", "1", "--count", "200")
    ),
    "connection-memory": Script("connection_memory", "Memory a starved HTTP/2 connection leaves behind", ("5",)),
    "connection-loop-work": Script(
        "connection_loop_work", "The event loop's CPU per new connection, handshake steps on it and off it", ("1", "1")
    ),
    "event-loop-cost": Script(
        "event_loop", "Instructions per request on asyncio's event loop and on uvloop's", None, CALLGRIND
    ),
    "go-options": Script(
        "go_options",
        "What each KEP option costs per request in Go (kube's filters) beside serve, and whether both leak alike",
        None,
        f"{CALLGRIND}; it rewrites docs/kep-6315-go.json",
    ),
    "handshake-flood": Script("handshake_flood", "Another client's latency under a flood of handshakes", ("20",)),
    "handshake-cost": Script(
        "handshakes", "Server CPU per TLS handshake, by key exchange and signature scheme", ("5", "1")
    ),
    "header-block-cost": Script(
        "header_block_cost",
        "What one inbound header block costs the HTTP/2 connection, in instructions",
        None,
        CALLGRIND,
    ),
    "header-block-flood": Script(
        "header_block_flood",
        "Server CPU of a header block of HPACK size updates, and a bystander's worst latency meanwhile",
        ("--rounds", "1", "--requests", "3", "--samples", "10"),
    ),
    "header-field-cost": Script(
        "hpack_field_cost", "What one more response header field costs h2 and hpack", None, CALLGRIND
    ),
    "report-instructions": Script(
        "instructions", "What the load report costs per request, in instructions", None, CALLGRIND
    ),
    "report-bytecodes": Script(
        "opcodes",
        "Where the report's extra work goes, by Python function",
        ("--requests", "30", "--baseline", "10", "--top", "5"),
    ),
    "oob-instructions": Script("oob_instructions", "Instructions per streamed out-of-band report", None, CALLGRIND),
    "poll-parse-cost": Script(
        "poll_parse_cost", "What reading one polled backend load answer costs, in instructions", None, CALLGRIND
    ),
    "oob-staleness": Script(
        "oob_staleness",
        "How long a load step takes to move Envoy's weight, in band and out of band",
        None,
        "waits, in wall time, for Envoy's weights to move at every rate and period",
    ),
    "oob-wire": Script("oob_wire", "Bytes on the wire per out-of-band report", ("--reports", "3", "--interval", "0.1")),
    "pending-bodies": Script(
        "pending_bodies",
        "Memory per connection when every stream is a POST whose body never comes",
        ("--connections", "2", "--streams", "5", "--waves", "1"),
    ),
    "reconnect-bursts": Script(
        "reconnect_bursts", "Another client's latency while a load balancer fleet reconnects", ("0.5", "1")
    ),
    "silent-sockets": Script(
        "silent_sockets",
        "Memory per silent socket, the load balancer under a descriptor limit, a stalled hello",
        ("20",),
    ),
    "request-walk": Script(
        "request_walk", "The modules one request walks through: stays, returns to a module left, climbs", ()
    ),
    "resumption-cost": Script("resumption", "What turning TLS session tickets off costs per connection", ("10",)),
    "verification-cost": Script(
        "verification",
        "What a presented chain costs to verify, and what crafted chains do to another client",
        ("--repeats", "1", "--rounds", "1", "--samples", "20", "--decoys", "1", "--skip-instructions"),
    ),
    "proxy-cost": Script(
        "proxy_cost", "Proxied GET requests per gateway CPU-second beside the demo path (vLLM-like backend)", ("1", "1")
    ),
    "worker-spread": Script(
        "spread",
        "How a load balancer's few connections spread over two workers, and what that does to req/s",
        ("1", "1"),
    ),
    "workers-throughput": Script(
        "workers", "Requests per CPU-second: serve --workers 1 and 2, asyncio and uvloop, and the Go peer", ("1", "1")
    ),
}
SECTIONS = (*REQUEST_PATH, *SCRIPTS)
ROOT = Path(__file__).resolve().parent.parent


def run_script(script: Script, smoke: bool) -> dict[str, Any]:
    """Run the script in its own process (its default arguments, or the smoke ones) and keep what it printed;
    a script that cannot run small is skipped under ``--smoke``, with the reason printed."""
    if smoke and script.smoke is None:
        print(f"benchmarks: skipped in smoke: {script.reason}", file=sys.stderr, flush=True)
        return {"skipped": script.reason}
    argv = [sys.executable, "-m", f"benchmarks.{script.module}", *(script.smoke if smoke and script.smoke else ())]
    done = subprocess.run(argv, cwd=ROOT, stdout=subprocess.PIPE, text=True, check=True)
    return {"command": shlex.join(["python", *argv[1:]]), "output": done.stdout}


def render_script(result: dict[str, Any]) -> str:
    if "skipped" in result:
        return f"Skipped: {result['skipped']}."
    return f"`{result['command']}`\n\n{result['output'].rstrip()}"


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    h2load = subprocess.run([h2load_path(), "--version"], capture_output=True, text=True, timeout=10).stdout.strip()
    commit = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True, text=True, timeout=10)
    return {
        "nproc": os.cpu_count(),
        "usable_cpus": len(os.sched_getaffinity(0)),
        "cpu": cpu,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "hypercorn": importlib.metadata.version("hypercorn"),
        "h2": importlib.metadata.version("h2"),
        "h2load": h2load,
        "git": commit.stdout.strip() or "unknown",
    }


def sections(settings: Settings, bench: BenchPKI, work: Path) -> dict[str, Callable[[], dict[str, Any]]]:
    """Each section as a thunk; the client-certificate shim is built only by sections that use h2load."""

    def shim() -> Path:
        return build_shim(work)

    smoke = settings is SMOKE
    scripts = {name: (lambda script=script: run_script(script, smoke)) for name, script in SCRIPTS.items()}
    return {
        **scripts,
        "endtoend": lambda: endtoend.run(bench, settings.e2e_loads, settings.e2e_rounds, shim(), work),
        "middleware": lambda: middleware_cost.run(bench, settings.mw_rounds, settings.mw_requests, settings.mw_seconds),
        "connections": lambda: connections.run(
            bench,
            shim(),
            work,
            rounds=settings.conn_rounds,
            connections=settings.conn_count,
            proof_connections=settings.proof_connections,
            proof_requests=settings.proof_requests,
        ),
        "sampler": lambda: sampler_cpu.run(bench, settings.sampler_rounds, settings.sampler_window),
        "profile": lambda: profile.run(bench, shim(), work, settings.profile_load),
    }


RENDER: dict[str, Callable[[dict[str, Any]], str]] = {
    "endtoend": endtoend.render,
    "middleware": middleware_cost.render,
    "connections": connections.render,
    "sampler": sampler_cpu.render,
    "profile": profile.render,
    **dict.fromkeys(SCRIPTS, render_script),
}
TITLES = {
    "endtoend": "1. End to end: h2load over TLS + HTTP/2",
    "middleware": "2. Middleware alone, in process",
    "connections": "3. Per-connection cost of mTLS",
    "sampler": "4. Sampler CPU, server idle",
    "profile": "Where the server's time goes (variant b)",
    **{name: script.question for name, script in SCRIPTS.items()},
}


def run_all(settings: Settings, output: Path, only: Sequence[str] = REQUEST_PATH) -> dict[str, Any]:
    """Run the chosen sections in order; returns their results (keyed by section) with timings."""
    output.mkdir(parents=True, exist_ok=True)
    bench = BenchPKI.create(output / "pki")
    work = output / "work"
    work.mkdir(exist_ok=True)
    thunks = sections(settings, bench, work)
    results: dict[str, Any] = {}
    for name in only:
        started = time.monotonic()
        print(f"benchmarks: {name} ...", file=sys.stderr, flush=True)
        results[name] = thunks[name]()
        results[name]["seconds"] = round(time.monotonic() - started, 1)
    return results


def markdown(results: dict[str, Any], info: dict[str, Any], command: str) -> str:
    lines = [
        f"Command: `{command}`",
        "",
        f"Machine: {info['nproc']} CPUs ({info['usable_cpus']} usable), {info['cpu']}, Linux {info['kernel']}; "
        f"Python {info['python']}, hypercorn {info['hypercorn']}, h2 {info['h2']}, {info['h2load']}; "
        f"git {info['git']}; {info['date']}.",
    ]
    for name, result in results.items():
        lines += ["", f"### {TITLES[name]}", "", RENDER[name](result), "", f"({result['seconds']} s)"]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="small counts: check that the benchmarks run")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help=f"results directory ({DEFAULT_OUTPUT})")
    parser.add_argument("--json", type=Path, help="also write the JSON results to this file")
    parser.add_argument("--only", action="append", choices=SECTIONS, help="run only this section (repeatable)")
    parser.add_argument("--list", action="store_true", help="list the sections and the question each answers")
    args = parser.parse_args(argv)
    if args.list:
        print("\n".join(f"{name:20} {TITLES[name]}" for name in SECTIONS))
        return 0
    command = shlex.join(["python", "-m", "benchmarks.run", *(sys.argv[1:] if argv is None else argv)])
    info = machine() | {"date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")}
    everything = SECTIONS if args.smoke else REQUEST_PATH  # a full run of every section takes hours
    results = run_all(SMOKE if args.smoke else FULL, args.output, args.only or everything)
    text = markdown(results, info, command)
    payload = json.dumps(jsonable({"command": command, "machine": info, "results": results}), indent=1)
    (args.output / "results.md").write_text(text)
    (args.output / "results.json").write_text(payload)
    if args.json is not None:
        args.json.write_text(payload)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
