"""Where a whole server's extra work goes, by Python function: bytecodes executed per request (a tracer).

    python -m benchmarks.opcodes [--requests 300] [--baseline 100] [--top 30]

callgrind sees the interpreter, not the Python functions it runs, so its attribution of the report's cost on the
whole server stops at ``_PyEval_EvalFrameDefault``. This runs the same pinned server as
``benchmarks/instructions.py`` (front proxy with the opt-in, feature off and on) under a ``sys.settrace``
opcode tracer instead of valgrind, and prints the bytecodes executed per request, on minus off, per function:
(window of N requests - window of M) / (N - M), as in the instruction counts. Bytecodes are not instructions
(one costs about 30-70 here), but they name the Python code that runs.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any

DUMP_ENV = "SECURE_ORCA_OPCODE_DUMP"


def _child(argv: Sequence[str]) -> int:
    """The pinned server with a tracer that SIGUSR2 starts (zeroed) and SIGPROF stops, writing its counts."""
    from secure_orca.cli import pinned

    counts: collections.Counter[str] = collections.Counter()
    state = {"windows": 0}

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "opcode":
            code = frame.f_code
            counts[f"{Path(code.co_filename).name}:{code.co_qualname}"] += 1
        return local

    def global_trace(frame: FrameType, event: str, arg: Any) -> Any:
        frame.f_trace_opcodes = True
        return local

    def start(signum: int, frame: Any) -> None:
        counts.clear()
        sys.settrace(global_trace)

    def stop(signum: int, frame: Any) -> None:
        sys.settrace(None)
        state["windows"] += 1
        Path(f"{os.environ[DUMP_ENV]}.{state['windows']}").write_text(json.dumps(counts))

    signal.signal(signal.SIGUSR2, start)
    signal.signal(signal.SIGPROF, stop)
    return pinned.main(argv)


def _window(process: subprocess.Popen[bytes], dump: Path, number: int, run: Any) -> collections.Counter[str]:
    process.send_signal(signal.SIGUSR1)
    time.sleep(1.0)
    process.send_signal(signal.SIGUSR2)
    run()
    time.sleep(1.0)
    process.send_signal(signal.SIGPROF)
    path = Path(f"{dump}.{number}")
    for _ in range(100):
        if path.exists():
            break
        time.sleep(0.1)
    return collections.Counter(json.loads(path.read_text()))


def measure(enabled: bool, requests: int, baseline: int, workdir: Path) -> collections.defaultdict[str, float]:
    """Bytecodes per request, per function, for the front proxy with the opt-in."""
    from secure_orca.lab import instrcount
    from secure_orca.lab.replicas import free_port

    from .common import PATH, BenchPKI

    bench = BenchPKI.create(workdir / "pki")
    host = "127.0.0.1"
    port = free_port(host)
    args = instrcount.serve_args(bench.serve_argv(enabled=enabled))
    args += ["--bind-address", host, "--secure-port", str(port), "--credential-reload-interval", "1h"]
    dump = workdir / f"counts-{'on' if enabled else 'off'}"
    env = instrcount.pinned_env(0) | {DUMP_ENV: str(dump)}
    process = subprocess.Popen([sys.executable, "-m", "benchmarks.opcodes", "--child", "serve", *args], env=env)
    try:
        instrcount.wait_listening(host, port, process)
        server = instrcount.CountedServer(process, host, port, dump)
        identity = bench.front_proxy()
        instrcount.requests(server, identity, baseline, PATH, workdir)
        short = _window(process, dump, 1, lambda: instrcount.requests(server, identity, baseline, PATH, workdir))
        long = _window(process, dump, 2, lambda: instrcount.requests(server, identity, requests, PATH, workdir))
    finally:
        process.terminate()
        process.wait(timeout=60)
    per: collections.defaultdict[str, float] = collections.defaultdict(float)  # bytecodes per request, a mean
    for name in long.keys() | short.keys():
        per[name] = round((long[name] - short[name]) / (requests - baseline), 1)
    return per


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--child"]:
        return _child(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m benchmarks.opcodes", description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--baseline", type=int, default=100)
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="secure-orca-opcodes-") as temp:
        workdir = Path(temp)
        off = measure(False, args.requests, args.baseline, workdir)
        on = measure(True, args.requests, args.baseline, workdir)
    rows = sorted(((on[k] - off[k], on[k], off[k], k) for k in on.keys() | off.keys()), reverse=True)
    print("| function | off | on | on − off |\n|---|---|---|---|")
    for diff, on_count, off_count, name in [r for r in rows if abs(r[0]) >= 0.5][: args.top]:
        print(f"| `{name}` | {off_count:,.1f} | {on_count:,.1f} | {diff:+,.1f} |")
    print(
        f"| total | {sum(off.values()):,.1f} | {sum(on.values()):,.1f} | {sum(on.values()) - sum(off.values()):+,.1f} |"
    )
    print(
        f"\nBytecodes per request: (run of {args.requests} − run of {args.baseline}) ÷ "
        f"{args.requests - args.baseline}, front proxy with the opt-in, one connection (h2load -c 1 -m 1)."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
