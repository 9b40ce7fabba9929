"""Attacks on the per-connection decision memo (ConnectionMemo): a decision made for one request must never
be replayed for a request it does not fit, on the same connection or another one."""

from __future__ import annotations

import datetime as dt
from types import SimpleNamespace

import pytest

from secure_orca import pki
from secure_orca.authz.authority import Authority
from secure_orca.authz.memo import ConnectionMemo, microseconds
from secure_orca.authz.policy import Policy
from secure_orca.authz.secrets import SecretSet
from secure_orca.server import trust as trust_module
from secure_orca.x509.chainverifier import ChainVerifier
from tests.inprocess import FP_CA, FP_PEM, OPT_IN, SECRET, call, make, orca

OPTIN_NAME = OPT_IN[0]


def secret_optin(secret: str) -> tuple[bytes, bytes]:
    return (OPTIN_NAME, f"TEXT; secret={secret}".encode())


def test_a_wrong_secret_after_the_right_one_is_refused_on_the_same_connection() -> None:
    middleware, _, _, decisions = make()
    memo = ConnectionMemo()
    assert len(orca(call(middleware, [secret_optin(SECRET)], None, memo))) == 1
    wrong = SECRET[:-1] + ("x" if SECRET[-1] != "x" else "y")  # same length: only the last character differs
    assert orca(call(middleware, [secret_optin(wrong)], None, memo)) == []
    assert orca(call(middleware, [OPT_IN], None, memo)) == []  # the bare opt-in without a certificate
    assert len(orca(call(middleware, [secret_optin(SECRET)], None, memo))) == 1
    assert decisions == ["shared-secret", "secret", "no-certificate", "shared-secret"]


def test_reloaded_secrets_apply_to_open_connections() -> None:
    middleware, _, _, decisions = make()
    memo = ConnectionMemo()
    assert len(orca(call(middleware, [secret_optin(SECRET)], None, memo))) == 1
    modes = middleware.authority.policy.modes
    middleware.trust.authority = Authority.build(Policy(modes, SecretSet(["rotated-secret-0123456789"])), None)
    assert orca(call(middleware, [secret_optin(SECRET)], None, memo)) == []
    assert decisions == ["shared-secret", "secret"]


def test_reloaded_front_proxy_trust_applies_to_open_connections() -> None:
    middleware, _, _, decisions = make()
    memo = ConnectionMemo()
    assert len(orca(call(middleware, [OPT_IN], [FP_PEM], memo))) == 1
    other_ca = pki.make_ca("another-front-proxy-ca")
    policy = middleware.authority.policy
    middleware.trust.authority = Authority.build(policy, ChainVerifier([other_ca.cert], ["front-proxy-client"]))
    assert orca(call(middleware, [OPT_IN], [FP_PEM], memo)) == []
    assert decisions == ["front-proxy", "untrusted-ca"]


@pytest.mark.parametrize(
    ("headers", "reason"),
    [
        ([OPT_IN, OPT_IN], "duplicate-opt-in"),
        ([(OPTIN_NAME, b"Json")], "unsupported-format"),
        ([(OPTIN_NAME, b"")], "malformed-opt-in"),
        ([(OPTIN_NAME, b"TEXT ;")], "malformed-opt-in"),
    ],
)
def test_another_opt_in_after_a_grant_is_decided_again(headers: list[tuple[bytes, bytes]], reason: str) -> None:
    middleware, _, _, decisions = make()
    memo = ConnectionMemo()
    assert len(orca(call(middleware, [OPT_IN], [FP_PEM], memo))) == 1
    assert orca(call(middleware, headers, [FP_PEM], memo)) == []
    assert len(orca(call(middleware, [OPT_IN], [FP_PEM], memo))) == 1
    assert decisions == ["front-proxy", reason, "front-proxy"]


def test_connections_do_not_share_decisions() -> None:
    middleware, _, _, decisions = make()
    proxy, bypass = ConnectionMemo(), ConnectionMemo()
    assert len(orca(call(middleware, [OPT_IN], [FP_PEM], proxy))) == 1
    assert orca(call(middleware, [OPT_IN], None, bypass)) == []
    assert decisions == ["front-proxy", "no-certificate"]


def test_grant_ends_the_microsecond_the_certificate_expires(monkeypatch: pytest.MonkeyPatch) -> None:
    start = dt.datetime.now(dt.UTC).replace(microsecond=0)
    not_after = start + dt.timedelta(hours=1)
    leaf = pki.issue(FP_CA, "front-proxy-client", not_before=start - dt.timedelta(hours=1), not_after=not_after)
    pem = leaf.cert_pem().decode()
    clock = {"us": microseconds(start)}
    monkeypatch.setattr(trust_module, "time", SimpleNamespace(time_ns=lambda: clock["us"] * 1000 + 999))
    middleware, _, _, decisions = make()
    memo = ConnectionMemo()
    for at in (microseconds(start), microseconds(not_after), microseconds(not_after) + 1, microseconds(start)):
        clock["us"] = at
        call(middleware, [OPT_IN], [pem], memo)
    # The last request is back inside the validity period (a clock stepped back): granted again, as holds_at says.
    assert decisions == ["front-proxy", "front-proxy", "expired", "front-proxy"]


def test_a_certificate_refused_before_its_not_before_is_granted_once_valid(monkeypatch: pytest.MonkeyPatch) -> None:
    """The memo must not keep a refusal that time alone lifts (on the same connection)."""
    start = dt.datetime.now(dt.UTC).replace(microsecond=0)
    not_before = start + dt.timedelta(minutes=10)
    leaf = pki.issue(FP_CA, "front-proxy-client", not_before=not_before, not_after=not_before + dt.timedelta(days=1))
    pem = leaf.cert_pem().decode()
    clock = {"us": microseconds(start)}
    monkeypatch.setattr(trust_module, "time", SimpleNamespace(time_ns=lambda: clock["us"] * 1000))
    middleware, _, _, decisions = make()
    memo = ConnectionMemo()
    for moment in (start, not_before - dt.timedelta(microseconds=1), not_before, not_before + dt.timedelta(hours=1)):
        clock["us"] = microseconds(moment)
        call(middleware, [OPT_IN], [pem], memo)
    assert decisions[:2] != ["front-proxy", "front-proxy"] and decisions[2:] == ["front-proxy", "front-proxy"]
