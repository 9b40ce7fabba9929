"""Section 2: the ASGI middleware alone, in process. Per-request time of LoadReportMiddleware around the demo
backend against a pass-through middleware around the same backend, for each request path; interleaved rounds,
reported as ratios. Encoder calls are counted across every request: the request path must never serialize."""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from secure_orca.authz.memo import ConnectionMemo
from secure_orca.credentials import loader
from secure_orca.orca import report
from secure_orca.orca.headers import OPTIN_BYTES as OPTIN
from secure_orca.orca.headers import REPORT as REPORT_HEADER
from secure_orca.server import demo
from secure_orca.server.assembly import build_app, verifications
from secure_orca.server.config import ServeConfig, build_config
from secure_orca.server.sampler import Sampler
from secure_orca.server.trust import CONNECTION_KEY

from .common import BenchError, BenchPKI, Identity, Spread, markdown_table, parse_serve_flags, rotated

Scope = dict[str, Any]
App = Any
TARGET = 1.05
_CHECK_EVERY = 64  # iterations between deadline checks


class PassThrough:
    """The baseline: an ASGI middleware that only forwards."""

    def __init__(self, app: App) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        await self.app(scope, receive, send)


async def _receive() -> dict[str, Any]:
    return {"type": "http.request", "body": b"", "more_body": False}


async def _discard(message: dict[str, Any]) -> None:
    return None


def make_scope(identity: Identity) -> Scope:
    """A request scope as ``serve`` builds it for an h2load GET of /healthz: the TLS extension and the
    connection's memo (one connection per scope)."""
    headers = [(b"user-agent", b"h2load nghttp2/1.52.0"), (b"accept", b"*/*"), (b"host", b"127.0.0.1")]
    if identity.optin is not None:
        headers.append((OPTIN, identity.optin.encode()))
    chain = [identity.cert.read_text()] if identity.cert is not None else []
    tls = {"client_cert_chain": chain, "client_cert_name": None, "tls_version": 0x0304, "cipher_suite": None}
    return {
        "type": "http",
        "asgi": {"spec_version": "2.1", "version": "3.0"},
        "http_version": "2",
        "method": "GET",
        "scheme": "https",
        "path": "/healthz",
        "raw_path": b"/healthz",
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 6443),
        "extensions": {"tls": tls, CONNECTION_KEY: ConnectionMemo()},  # as the server's adapter puts them
    }


@dataclass(frozen=True)
class RequestPath:
    """One request path through the middleware: who asks, on which server, and whether a report is due."""

    key: str
    title: str
    identity: Identity
    enabled: bool
    attached: bool


def paths(bench: BenchPKI) -> list[RequestPath]:
    return [
        RequestPath("attach-fp", "attach: front proxy authorised", bench.front_proxy(), True, True),
        RequestPath("attach-secret", "attach: shared secret", bench.shared_secret(), True, True),
        RequestPath("refuse", "refuse: bypass client (client-CA user, opt-in)", bench.user(), True, False),
        RequestPath("no-opt-in", "no opt-in (front proxy, no header)", bench.front_proxy(optin=None), True, False),
        RequestPath("feature-off", "feature off (front proxy, opt-in)", bench.front_proxy(), False, False),
    ]


@contextmanager
def counting_encoders() -> Iterator[dict[str, int]]:
    """Count every TEXT and binary ORCA encoding made by anyone in this process while the block runs."""
    counts = {"format_number": 0, "encode_proto": 0}
    originals = {name: getattr(report, name) for name in counts}

    def counted(name: str) -> Any:
        original = originals[name]

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            counts[name] += 1
            return original(*args, **kwargs)

        return wrapper

    for name in counts:
        setattr(report, name, counted(name))
    try:
        yield counts
    finally:
        for name, original in originals.items():
            setattr(report, name, original)


def build_middleware(bench: BenchPKI, sampler: Sampler, enabled: bool) -> tuple[App, ServeConfig]:
    """The middleware exactly as ``serve`` builds it around the demo backend (no sockets)."""
    config = build_config(parse_serve_flags(bench.serve_argv(enabled=enabled)))
    app, _proxy = build_app(config, sampler, loader.load(config.files)[0])
    return app, config


async def _attached(app: App, scope: Scope) -> bool:
    sent: list[dict[str, Any]] = []

    async def keep(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, _receive, keep)
    start = next(m for m in sent if m["type"] == "http.response.start")
    return any(name == REPORT_HEADER.encode() for name, _ in start["headers"])


async def _per_request_ns(app: App, scope: Scope, count: int, seconds: float) -> tuple[float, int]:
    """Mean ns per request over at most ``count`` requests and about ``seconds``; and how many ran."""
    gc.collect()
    start = time.perf_counter_ns()
    deadline = start + int(seconds * 1e9)
    done = 0
    while done < count:
        for _ in range(min(_CHECK_EVERY, count - done)):
            await app(scope, _receive, _discard)
        done += min(_CHECK_EVERY, count - done)
        if time.perf_counter_ns() > deadline:
            break
    return (time.perf_counter_ns() - start) / done, done


async def _measure(bench: BenchPKI, rounds: int, count: int, seconds: float) -> dict[str, Any]:
    sampler = Sampler(0.1)
    sampler.tick()  # one published report, as after start(); no loop timer runs here: no tick can hide a call
    on, _config = build_middleware(bench, sampler, True)
    off, _ = build_middleware(bench, sampler, False)
    baseline = PassThrough(demo.app)
    chosen = paths(bench)
    scopes = {p.key: make_scope(p.identity) for p in chosen}
    for p in chosen:
        got = await _attached(on if p.enabled else off, scopes[p.key])
        if got != p.attached:
            raise BenchError(f"middleware path {p.key}: report attached={got}, expected {p.attached}")
    encodes_before, verifications_before = sampler.encodes, verifications(on)
    per_round: list[dict[str, float]] = []
    requests = 0
    with counting_encoders() as encoder_calls:
        for index in range(rounds):
            row: dict[str, float] = {}
            for p in rotated(chosen, index):
                pair = [("pass", baseline), ("mw", on if p.enabled else off)]
                for label, app in pair if index % 2 == 0 else reversed(pair):
                    row[f"{p.key}/{label}"], ran = await _per_request_ns(app, scopes[p.key], count, seconds)
                    requests += ran
            per_round.append(row)
    return {
        "paths": {p.key: p.title for p in chosen},
        "rounds": rounds,
        "per_round_ns": per_round,
        "ratios": {p.key: Spread.of([r[f"{p.key}/mw"] / r[f"{p.key}/pass"] for r in per_round]) for p in chosen},
        "added_ns": {p.key: Spread.of([r[f"{p.key}/mw"] - r[f"{p.key}/pass"] for r in per_round]) for p in chosen},
        "pass_ns": {p.key: Spread.of([r[f"{p.key}/pass"] for r in per_round]) for p in chosen},
        "requests": requests,
        "sampler_encodes_during_requests": sampler.encodes - encodes_before,
        "encoder_calls_during_requests": dict(encoder_calls),
        "front_proxy_verifications": verifications(on) - verifications_before,
    }


def run(bench: BenchPKI, rounds: int, count: int, seconds: float = 2.0) -> dict[str, Any]:
    """Measure each path ``rounds`` times; each measurement is ``count`` requests (or ``seconds``)."""
    return asyncio.run(_measure(bench, rounds, count, seconds))


def render(result: dict[str, Any]) -> str:
    rows = [
        [
            title,
            result["ratios"][key].text(),
            f"{result['added_ns'][key].median / 1000:.2f}",
            f"{result['pass_ns'][key].median / 1000:.2f}",
            "yes" if result["ratios"][key].median <= TARGET else "**no**",
        ]
        for key, title in result["paths"].items()
    ]
    header = ["path", "middleware ÷ pass-through", "added µs/request", "pass-through µs/request", "≤ 1.05"]
    calls = result["encoder_calls_during_requests"]
    return (
        f"{markdown_table(header, rows)}\n\n"
        f"Ratios: median [min, max] of {result['rounds']} interleaved rounds. Across {result['requests']} requests "
        f"through both middlewares: sampler.encodes +{result['sampler_encodes_during_requests']}, "
        f"report.format_number calls {calls['format_number']}, report.encode_proto calls {calls['encode_proto']}, "
        f"front-proxy chain verifications {result['front_proxy_verifications']} (each chain was verified once, "
        "before the timed requests, by the outcome check)."
    )
