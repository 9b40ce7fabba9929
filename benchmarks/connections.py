"""Section 3: the per-connection cost of mTLS. New connections per second (one request each) with and without a
client certificate, interleaved; and, counted in process, that the front-proxy chain is verified once per
connection at most (in fact once per distinct chain, thanks to the chain cache), never once per request."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .common import (
    BenchPKI,
    Identity,
    InProcessServer,
    Load,
    LoadResult,
    Spread,
    inprocess_server,
    markdown_table,
    rotated,
    run_h2load,
)


def settle(server: InProcessServer, expected: int, timeout: float = 5.0) -> None:
    """Wait (bounded) until the server has finished accounting ``expected`` requests."""
    deadline = time.monotonic() + timeout
    while server.requests < expected and time.monotonic() < deadline:
        time.sleep(0.01)


def counted(server: InProcessServer, load: Load, identity: Identity, shim: Path, workdir: Path) -> CountedRun:
    """One h2load run against the in-process server, with the requests and verifications it caused."""
    verifications, before = server.verifications, server.requests
    result = run_h2load(server.url, load, identity, shim, workdir)
    settle(server, before + result.succeeded)
    return CountedRun(result, load.clients, server.requests - before, server.verifications - verifications)


@dataclass(frozen=True)
class CountedRun:
    result: LoadResult
    connections: int
    requests: int
    verifications: int

    def counts(self) -> dict[str, int]:
        return {"connections": self.connections, "requests": self.requests, "verifications": self.verifications}


def run(
    bench: BenchPKI,
    shim: Path,
    workdir: Path,
    *,
    rounds: int,
    connections: int,
    proof_connections: int,
    proof_requests: int,
) -> dict[str, Any]:
    """Proof first, on a fresh server (empty chain cache); then the interleaved connection-rate rounds."""
    identities = {"with-cert": bench.front_proxy(), "without-cert": bench.anonymous()}
    with inprocess_server(bench.serve_argv(enabled=True)) as server:
        proof = counted(
            server, Load(proof_connections, 8, requests=proof_requests), identities["with-cert"], shim, workdir
        )
        rate_load = Load(connections, 1, requests=connections)
        per_round: list[dict[str, float]] = []
        rate_counts = {"connections": 0, "requests": 0, "verifications": 0}
        for index in range(rounds):
            row: dict[str, float] = {}
            for name in rotated(list(identities), index):
                done = counted(server, rate_load, identities[name], shim, workdir)
                row[name] = connections / done.result.elapsed
                if name == "with-cert":
                    rate_counts = {k: rate_counts[k] + v for k, v in done.counts().items()}
            per_round.append(row)
    return {
        "rounds": rounds,
        "connections_per_run": connections,
        "proof": proof.counts(),
        "rate_runs_with_cert": rate_counts,
        "per_round": per_round,
        "rate": {name: Spread.of([r[name] for r in per_round]) for name in identities},
        "ratio": Spread.of([r["with-cert"] / r["without-cert"] for r in per_round]),
    }


def render(result: dict[str, Any]) -> str:
    rate, proof, later = result["rate"], result["proof"], result["rate_runs_with_cert"]
    rows = [
        ["without client certificate", rate["without-cert"].text(0), "1"],
        ["with front-proxy certificate", rate["with-cert"].text(0), result["ratio"].text()],
    ]
    table = markdown_table(["client", "new connections/s (1 request each)", "÷ without"], rows)
    counts = markdown_table(
        ["run", "connections", "requests", "front-proxy verifications"],
        [
            ["fresh server, long-lived connections", proof["connections"], proof["requests"], proof["verifications"]],
            [
                "rate runs with certificate (cache warm)",
                later["connections"],
                later["requests"],
                later["verifications"],
            ],
        ],
    )
    return (
        f"{table}\n\nMedian [min, max] of {result['rounds']} interleaved rounds of "
        f"{result['connections_per_run']} concurrent new connections each.\n\n{counts}"
    )
