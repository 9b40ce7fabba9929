"""What carries over to Go: KEP-6315's options 1, 2, 2b and 3 in the Go peer (benchmarks/gopeer, a filter as
kube-apiserver would have it) beside ``secure-orca serve``, in one run.

    python -m benchmarks.go_options                                   # writes docs/kep-6315-go.json
    python -m benchmarks.go_options --python-repeats 0 --output /tmp/go.json

- **cost**: instructions per request under callgrind, each option's server against the feature-off one, with the
  load balancer's identity of that option: ``/healthz``, h2load ``-c 1 -m 1``, (run of N - run of M) / (N - M),
  ratios repeat by repeat (``secure_orca.lab.instrcount``, the same windows as ``evaluate``'s cost column). The Go
  peer runs with GOMAXPROCS=1 and GODEBUG=asyncpreemptoff=1; its windows get no SIGUSR1 (callgrind asserts on a
  signal that Go's handler takes), so its garbage collections fall where the heap puts them.
- **exposure**: ``secure-orca probe`` as a bypass client against the Go peer and against ``serve`` per option; the
  two verdicts must agree, and the Go one is written.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from secure_orca import pki
from secure_orca.credentials import devpki
from secure_orca.lab import instrcount, options
from secure_orca.lab import launcher as lb
from secure_orca.lab import replicas as launch
from secure_orca.lab.evaluate import lb_identity, probe_config, provenance
from secure_orca.lab.instrcost import INSTR_PATH, off_flags
from secure_orca.lab.loadgen import Identity
from secure_orca.probe.audit import probe

from .common import BenchError, markdown_table
from .go_peer import GO_OPTIONS, binary, go_peer, peer_args

OPTIONS = tuple(o for o in options.OPTIONS if o in GO_OPTIONS)  # 1, 2, 2b and 3, in the evaluation's order
OUTPUT = Path(__file__).resolve().parents[1] / "docs" / "kep-6315-go.json"
GO_ENV = {"GOMAXPROCS": "1", "GODEBUG": "asyncpreemptoff=1"}  # one P, no preemption signals under callgrind
METHOD = (
    "callgrind instructions per request, option / feature off, /healthz over TLS 1.3 + HTTP/2 (h2load -c 1 -m 1, "
    "the load balancer's identity), (run of {requests} - run of {baseline}) / {units}, ratios repeat by repeat: "
    "Go peer (benchmarks/gopeer, GOMAXPROCS=1, GODEBUG=asyncpreemptoff=1) and secure-orca serve in one run; "
    "exposure: secure-orca probe against both, verdicts equal"
)

Start = Callable[[str, Path, int], AbstractContextManager[instrcount.CountedServer]]


class GoCountedServer(instrcount.CountedServer):
    """A Go peer under callgrind: windows as ``CountedServer``'s, without the SIGUSR1 reset (Python's)."""

    @contextmanager
    def window(self, label: str) -> Iterator[None]:
        self.settle()
        self.control("--zero")
        yield
        self.settle()
        self.control(f"--dump={label}")


@contextmanager
def go_counted(dev: pki.DevPKI, option: str, prefix: Path, host: str = "127.0.0.1") -> Iterator[GoCountedServer]:
    """The Go peer in ``option``'s mode under callgrind, instrumentation off until ``control("--instr=on")``."""
    port = launch.free_port(host)
    argv = [str(binary()), *peer_args(dev, option), "-listen", f"{host}:{port}"]
    with instrcount.under_callgrind(argv, os.environ | GO_ENV, prefix, host, port) as process:
        yield GoCountedServer(process, host, port, prefix)


def python_counted(
    dev: pki.DevPKI, option: str, prefix: Path, layout: int
) -> AbstractContextManager[instrcount.CountedServer]:
    """``secure-orca serve`` with ``option``'s flags (``off``: every option's trust material, the feature off)."""
    flags = off_flags(dev) if option == "off" else lb.replica_flags(dev, option)
    return instrcount.counted_server(instrcount.serve_args(launch.serve_argv(dev, flags)), prefix, layout=layout)


@dataclass(frozen=True)
class Ratio:
    """One option's instructions per request ÷ the feature-off server's, over the repeats."""

    median: float
    min: float
    max: float
    n: int
    on: float  # instructions per request, medians
    off: float

    def to_json(self) -> dict[str, float | int]:
        return {"median": round(self.median, 4), "min": round(self.min, 4), "max": round(self.max, 4), "n": self.n}


def per_request_ratios(
    start: Start, identities: Mapping[str, Identity], requests: int, baseline: int, repeats: int, workdir: Path
) -> dict[str, Ratio]:
    """Each option's server and the feature-off one (``start(name, prefix, repeat)``) counted with the load
    balancer's identity of each option; the off server serves every identity. No repeats: nothing measured."""
    if repeats < 1:
        return {}
    totals: dict[str, int] = {}
    for repeat in range(repeats):
        for name in ("off", *identities):
            clients = dict(identities) if name == "off" else {name: identities[name]}
            with start(name, workdir / f"count-{name}", repeat) as server:
                for client in clients.values():  # warm-up, not counted
                    instrcount.requests(server, client, baseline, INSTR_PATH, workdir)
                server.control("--instr=on")
                for option, client in clients.items():
                    for count in (baseline, requests):
                        with server.window(f"{name}/{option},{count},{repeat}"):
                            instrcount.requests(server, client, count, INSTR_PATH, workdir)
                server.control("--instr=off")
                totals |= server.totals()
    window = (str(requests), str(baseline), requests - baseline, repeats)
    out = {}
    for option in identities:
        on = instrcount.per_unit(totals, f"{option}/{option}", *window)
        off = instrcount.per_unit(totals, f"off/{option}", *window)
        out[option] = Ratio(*instrcount.ratio_range(on, off), repeats, on.median, off.median)
    return out


def exposure(dev: pki.DevPKI, option: str) -> str:
    """The probe's verdict against the Go peer in ``option``'s mode, which must equal its verdict against
    ``serve`` with the same option (a bypass client, no timing samples)."""
    config = probe_config(dev, option, 0)
    with go_peer(dev, option=option) as peer:
        go = probe(peer.url, config)
    with launch.replicas([launch.serve_argv(dev, lb.replica_flags(dev, option), demo_work=False)]) as [replica]:
        python = probe(replica.url, config)
    if go.verdict != python.verdict or go.verdict not in ("leak", "no-leak"):
        raise BenchError(f"{option}: the probe says {go.verdict} of the Go peer ({go.reason}) and {python.verdict} "
                         f"of serve ({python.reason})")  # fmt: skip
    return go.verdict


def document(
    commit: str, method: str, go: Mapping[str, Ratio], python: Mapping[str, Ratio], exposures: Mapping[str, str]
) -> dict[str, Any]:
    """docs/kep-6315-go.json: per option the Go ratio, the Python one (None when not measured) and the verdict."""
    return {
        "commit": commit,
        "method": method,
        "options": {
            option: {
                "ratio_per_request": go[option].to_json(),
                "python_ratio_per_request": python[option].to_json() if option in python else None,
                "exposure": exposures[option],
            }
            for option in OPTIONS
        },
    }


def table(go: Mapping[str, Ratio], python: Mapping[str, Ratio], exposures: Mapping[str, str]) -> str:
    def cells(ratio: Ratio | None) -> list[str]:
        if ratio is None:
            return ["—", "—", "—"]
        return [f"{ratio.off:,.0f}", f"{ratio.on:,.0f}", f"{ratio.median:.4f} [{ratio.min:.4f}, {ratio.max:.4f}]"]

    rows = [[o, *cells(go[o]), *cells(python.get(o)), exposures[o]] for o in OPTIONS]
    head = ["option", "Go off", "Go on", "Go on ÷ off", "Python off", "Python on", "Python on ÷ off", "exposure"]
    return markdown_table(head, rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.go_options", description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=400, help="the long window (requests)")
    parser.add_argument("--baseline", type=int, default=100, help="the short window (requests)")
    parser.add_argument("--go-repeats", type=int, default=10, help="Go peer processes per option")
    parser.add_argument("--python-repeats", type=int, default=2, help="serve processes per option (0: not measured)")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)
    if instrcount.valgrind_available() is not None:
        raise SystemExit(f"cannot count instructions: {instrcount.valgrind_available()}")
    commit = provenance(time.gmtime())["commit"]
    with tempfile.TemporaryDirectory(prefix="secure-orca-go-options-") as tmp:
        workdir = Path(tmp)
        dev = devpki.generate(workdir / "pki")
        identities = {o: lb_identity(dev, o) for o in OPTIONS}
        exposures = {o: exposure(dev, o) for o in OPTIONS}
        print(f"exposure: {exposures}", file=sys.stderr, flush=True)

        def go_start(name: str, prefix: Path, repeat: int) -> AbstractContextManager[instrcount.CountedServer]:
            return go_counted(dev, name, prefix)

        def python_start(name: str, prefix: Path, repeat: int) -> AbstractContextManager[instrcount.CountedServer]:
            return python_counted(dev, name, prefix, repeat)

        window = (args.requests, args.baseline)
        (workdir / "go").mkdir()
        (workdir / "python").mkdir()
        with ThreadPoolExecutor(2, thread_name_prefix="count") as pool:  # counts do not depend on the CPU share
            go_run = pool.submit(per_request_ratios, go_start, identities, *window, args.go_repeats, workdir / "go")
            python_run = pool.submit(
                per_request_ratios, python_start, identities, *window, args.python_repeats, workdir / "python"
            )
            go, python = go_run.result(), python_run.result()
    ended = provenance(time.gmtime())["commit"]
    commit = commit if ended == commit else f"{commit}..{ended}"  # the code moved during the run: not clean
    method = METHOD.format(requests=args.requests, baseline=args.baseline, units=args.requests - args.baseline)
    args.output.write_text(json.dumps(document(commit, method, go, python, exposures), indent=2) + "\n")
    print(table(go, python, exposures))
    print(f"\ncommit {commit}; written to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
