"""The ASGI middleware in process (no sockets): stripping, opt-in removal, attach only when granted."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

import pytest

from secure_orca.authz.authority import Authority
from secure_orca.authz.memo import ConnectionMemo
from secure_orca.authz.policy import Policy
from secure_orca.server.middleware import LoadReportMiddleware
from secure_orca.server.sampler import Sampler
from secure_orca.server.trust import TrustService
from tests.inprocess import FP_PEM, OPT_IN, OTHER_PEM, SECRET, Backend, call, make, orca


@pytest.mark.parametrize(
    ("headers", "chain", "reason"),
    [
        ([OPT_IN], [FP_PEM], "front-proxy"),
        ([(b"endpoint-load-metrics-request", f"TEXT; secret={SECRET}".encode())], None, "shared-secret"),
        ([OPT_IN], None, "no-certificate"),
        ([OPT_IN], [OTHER_PEM], "untrusted-ca"),
        ([OPT_IN], ["not a pem"], "untrusted-ca"),
        ([OPT_IN, OPT_IN], [FP_PEM], "duplicate-opt-in"),
        ([(b"Endpoint-Load-Metrics-Request", b"TEXT"), OPT_IN], [FP_PEM], "duplicate-opt-in"),
        ([(b"endpoint-load-metrics-request", b"TEXT; secret=guess")], [OTHER_PEM], "secret"),
        ([], [FP_PEM], "no-opt-in"),
    ],
)
def test_attach_only_when_granted_and_always_strip(headers, chain, reason) -> None:
    middleware, backend, sampler, decisions = make()
    sent = call(middleware, [(b"accept", b"*/*"), *headers], chain)
    granted = reason in ("front-proxy", "shared-secret")
    assert decisions == ([] if reason == "no-opt-in" else [reason])
    assert orca(sent) == ([sampler.header] if granted else [])
    assert backend.seen == [(b"accept", b"*/*")]  # opt-in (and secret) never reach the application
    start = sent[0]
    assert start["status"] == 200 and (b"x-kept", b"1") in start["headers"]
    assert sent[1]["body"] == b"hello"


def test_feature_off_never_attaches() -> None:
    middleware, _, _, decisions = make(enabled=False)
    assert orca(call(middleware, [OPT_IN], [FP_PEM])) == []
    assert orca(call(middleware, [], [FP_PEM])) == []
    assert decisions == ["feature-off"]  # requests without the opt-in are not decided (nor counted)


def test_no_encoding_and_one_verification_per_chain() -> None:
    middleware, _, sampler, _ = make()
    encodes = sampler.encodes
    for _ in range(50):
        assert len(orca(call(middleware, [OPT_IN], [FP_PEM]))) == 1
    assert sampler.encodes == encodes
    assert middleware.authority.chains is not None and middleware.authority.chains.verifier.verifications == 1


def test_counters_track_requests_errors_and_in_flight() -> None:
    middleware, _, sampler, _ = make()
    call(middleware, [])
    counters = sampler.counters
    assert (counters.requests, counters.errors, counters.in_flight) == (1, 0, 0)


def test_non_http_scopes_pass_through() -> None:
    seen = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append(scope["type"])

    trust = TrustService(Authority(Policy(frozenset())))
    middleware = LoadReportMiddleware(app, enabled=True, trust=trust, sampler=Sampler())
    asyncio.run(middleware({"type": "lifespan"}, None, None))  # type: ignore[arg-type]
    assert seen == ["lifespan"]


def test_cached_grant_expires_with_the_certificate() -> None:
    middleware, *_ = make()
    assert middleware.authority.chains is not None
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=3650)
    result = middleware.authority.chains.lookup((FP_PEM,), dt.datetime.now(dt.UTC))
    assert result.ok and not result.holds_at(later)


def test_once_per_sample_attaches_each_sample_once_per_connection() -> None:
    middleware, _, sampler, _ = make()
    middleware.once_per_sample = True
    memo, other = ConnectionMemo(), ConnectionMemo()

    def report_count(memo: ConnectionMemo) -> int:
        return len(orca(call(middleware, [OPT_IN], [FP_PEM], memo)))

    assert [report_count(memo) for _ in range(3)] == [1, 0, 0]
    assert report_count(other) == 1  # another connection gets the same sample
    sampler.header = (b"endpoint-load-metrics", b"TEXT cpu_utilization=0.2")  # the next tick
    assert [report_count(memo) for _ in range(2)] == [1, 0]


def test_unknown_attach_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="attach mode"):
        trust = TrustService(Authority(Policy(frozenset())))
        LoadReportMiddleware(Backend(), enabled=True, trust=trust, sampler=Sampler(), attach="sometimes")


@pytest.mark.parametrize(
    ("value", "fmt"),
    [
        (b"TEXT", "TEXT"),
        (b"JSON", "JSON"),
        (b"BIN; secret=abc", "BIN"),
        (b" \tJSON", "JSON"),
        (b"\tTEXT;secret=x", "TEXT"),
    ],
)
def test_a_granted_opt_in_gets_the_format_it_asked_for(value: bytes, fmt: str) -> None:
    """The middleware reads a granted opt-in's format from its first byte, or past leading blanks by parsing: both
    give the format ``optin.parse`` read, and TEXT is the one shared grant the fast path checks by identity."""
    from secure_orca.orca import optin
    from secure_orca.server.middleware import _BY_FIRST_BYTE, GRANTS, TEXT_GRANT, grant_of

    grant = _BY_FIRST_BYTE.get(value[0]) or grant_of([value])
    assert grant is GRANTS[fmt] and grant.format == optin.parse([value]).format
    assert (grant is TEXT_GRANT) == (fmt == "TEXT")
