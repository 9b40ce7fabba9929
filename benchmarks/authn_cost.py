"""The authentication layer alone, in process: per-request time of AuthenticationMiddleware (as ``serve``
builds it) around the demo backend against the demo backend alone, for an anonymous client, an x509 user,
and the front proxy naming a user; interleaved rounds, medians. Run: ``python -m benchmarks.authn_cost``."""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path
from typing import Any

from secure_orca.credentials import loader
from secure_orca.server import demo
from secure_orca.server.assembly import build_app
from secure_orca.server.authentication import AuthenticationMiddleware
from secure_orca.server.config import build_config
from secure_orca.server.sampler import Sampler

from .common import BenchPKI, Identity, Spread, markdown_table, parse_serve_flags, rotated
from .middleware_cost import _per_request_ns, make_scope


def cases(bench: BenchPKI) -> dict[str, tuple[Identity, list[tuple[bytes, bytes]]]]:
    return {
        "anonymous (no certificate)": (bench.anonymous(optin=None), []),
        "x509 user (client CA)": (bench.user(optin=None), []),
        "front proxy naming a user": (bench.front_proxy(optin=None), [(b"x-remote-user", b"jane")]),
    }


async def measure(bench: BenchPKI, rounds: int, count: int) -> tuple[dict[str, Spread], dict[str, int]]:
    """Added time per request for each case, and how often each certificate check ran (once per chain)."""
    config = build_config(parse_serve_flags(bench.serve_argv(enabled=True)))
    app, _ = build_app(config, Sampler(0.1), loader.load(config.files)[0])
    layer = app.app
    assert isinstance(layer, AuthenticationMiddleware)
    scopes: dict[str, Any] = {}
    for name, (identity, extra) in cases(bench).items():
        scope = make_scope(identity)
        scope["headers"] = [*scope["headers"], *extra]
        scopes[name] = scope
    added: dict[str, list[float]] = {name: [] for name in scopes}
    for index in range(rounds):
        for name in rotated(list(scopes), index):
            alone, _ = await _per_request_ns(demo.app, scopes[name], count, 2.0)
            wrapped, _ = await _per_request_ns(layer, scopes[name], count, 2.0)
            added[name].append(wrapped - alone)
    chains = {"front-proxy": layer.trust.authority.chains, "client-ca": layer.trust.clients}
    verifications = {name: cache.verifier.verifications if cache else 0 for name, cache in chains.items()}
    return {name: Spread.of(values) for name, values in added.items()}, verifications


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--count", type=int, default=20000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as root:
        bench = BenchPKI.create(Path(root))
        result, verifications = asyncio.run(measure(bench, args.rounds, args.count))
    rows = [[name, f"{s.median / 1000:.2f}", f"{s.low / 1000:.2f} - {s.high / 1000:.2f}"] for name, s in result.items()]
    print(markdown_table(["request", "added us (median)", "range"], rows))
    print(f"certificate chain verifications over all requests: {verifications}")


if __name__ == "__main__":
    main()
