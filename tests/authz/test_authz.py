"""Every authorization rule, without sockets: kube-apiserver's front-proxy x509 check and the secret set."""

from __future__ import annotations

import datetime as dt

import pytest
from cryptography.x509.oid import ExtendedKeyUsageOID as EKU

from secure_orca import pki
from secure_orca.authz.policy import Mode, Policy, refusal
from secure_orca.authz.reasons import Reason
from secure_orca.authz.secrets import SecretSet
from secure_orca.x509.chainverifier import NO_CERTIFICATE, ChainVerifier

NOW = dt.datetime.now(dt.UTC)
FP_CA = pki.make_ca("front-proxy-ca")
CLIENT_CA = pki.make_ca("client-ca")
INTERMEDIATE = pki.issue(FP_CA, "intermediate", is_ca=True, eku=None)
NOT_A_CA = pki.issue(FP_CA, "leaf-not-ca")
SECRET = "correct-horse-battery-staple"


def verify(leaf: pki.Issued, *chain: pki.Issued, allowed: tuple[str, ...] = ("front-proxy-client",)) -> str:
    verifier = ChainVerifier([FP_CA.cert], allowed)
    # the time of the check, not of the import: the cases' leaves are issued when the test runs, which on a slow
    # run is past the five minutes that pki.issue backdates not_before by
    result = verifier.verify([leaf.cert, *(c.cert for c in chain)], dt.datetime.now(dt.UTC))
    return Reason.FRONT_PROXY if result.ok else refusal(result)


FP_ONLY = Policy(frozenset({Mode.FRONT_PROXY}))


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda: (pki.issue(FP_CA, "front-proxy-client"),), "front-proxy"),
        (lambda: (pki.issue(FP_CA, "front-proxy-client", eku=None),), "front-proxy"),
        (lambda: (pki.issue(FP_CA, "front-proxy-client", eku=(EKU.ANY_EXTENDED_KEY_USAGE,)),), "front-proxy"),
        (lambda: (pki.issue(INTERMEDIATE, "front-proxy-client"), INTERMEDIATE), "front-proxy"),
        (lambda: (pki.issue(INTERMEDIATE, "front-proxy-client"),), "untrusted-ca"),  # intermediate not sent
        (lambda: (pki.issue(FP_CA, "front-proxy-client", eku=(EKU.SERVER_AUTH,)),), "eku"),
        (lambda: (pki.issue(FP_CA, "someone-else"),), "name-not-allowed"),
        (lambda: (pki.issue(FP_CA, "x", dns=("front-proxy-client",)),), "name-not-allowed"),  # SAN ignored
        (lambda: (pki.issue(CLIENT_CA, "front-proxy-client"),), "untrusted-ca"),
        (lambda: (pki.make_ca("front-proxy-client"),), "untrusted-ca"),  # self-signed with the allowed CN
        (lambda: (pki.issue(NOT_A_CA, "front-proxy-client"), NOT_A_CA), "untrusted-ca"),  # leaf as issuer
        (
            lambda: (
                pki.issue(
                    FP_CA,
                    "front-proxy-client",
                    not_before=NOW - dt.timedelta(days=9),
                    not_after=NOW - dt.timedelta(days=1),
                ),
            ),
            "expired",
        ),
        (lambda: (pki.issue(FP_CA, "front-proxy-client", not_before=NOW + dt.timedelta(days=1)),), "expired"),
    ],
)
def test_front_proxy_rules(make, reason: str) -> None:
    assert verify(*make()) == reason


def test_intermediate_with_server_only_eku_fails() -> None:
    restricted = pki.issue(FP_CA, "restricted-int", is_ca=True, eku=(EKU.SERVER_AUTH,))
    # cryptography's CA policy refuses it while building the path; either way no grant.
    assert verify(pki.issue(restricted, "front-proxy-client"), restricted) in {"eku", "untrusted-ca"}


def test_empty_allowed_names_accepts_any_cn_from_the_ca() -> None:
    assert verify(pki.issue(FP_CA, "anything"), allowed=()) == "front-proxy"
    assert verify(pki.issue(CLIENT_CA, "anything"), allowed=()) == "untrusted-ca"


def test_empty_chain_is_no_certificate() -> None:
    assert ChainVerifier([FP_CA.cert]).verify([], NOW) == NO_CERTIFICATE


def test_grant_bounded_by_chain_validity() -> None:
    now = dt.datetime.now(dt.UTC)  # the leaf is issued now, not when the module was imported
    result = ChainVerifier([FP_CA.cert], ()).verify([pki.issue(FP_CA, "a").cert], now)
    assert result.holds_at(now) and not result.holds_at(now + dt.timedelta(days=3650))


def test_secret_set_matches_any_rotated_secret_only() -> None:
    secrets = SecretSet(["old-secret-0123456789", "new-secret-0123456789"])
    assert secrets.matches("old-secret-0123456789") and secrets.matches("new-secret-0123456789")
    for wrong in ("", "old-secret", "old-secret-01234567890", "new-secret-012345678"):
        assert not secrets.matches(wrong)
    assert "secret-0" not in repr(secrets)
    with pytest.raises(ValueError, match="no shared secret"):  # an empty set would silently refuse every secret
        SecretSet([])


FP_OK = ChainVerifier([FP_CA.cert], ()).verify([pki.issue(FP_CA, "a").cert], NOW)
BOTH = Policy(frozenset({Mode.FRONT_PROXY, Mode.SHARED_SECRET}), SecretSet([SECRET]))
FP_WITH_SECRETS = Policy(frozenset({Mode.FRONT_PROXY}), SecretSet([SECRET]))


@pytest.mark.parametrize(
    ("policy", "value", "identity", "attach", "reason"),
    [
        (BOTH, b"TEXT", FP_OK, True, "front-proxy"),
        (BOTH, f"TEXT; secret={SECRET}".encode(), NO_CERTIFICATE, True, "shared-secret"),
        (BOTH, b"TEXT; secret=wrong", NO_CERTIFICATE, False, "secret"),
        (BOTH, b"TEXT", NO_CERTIFICATE, False, "no-certificate"),
        (BOTH, b"Json", FP_OK, False, "unsupported-format"),
        (BOTH, b"JSON", FP_OK, True, "front-proxy"),
        (BOTH, b"BIN", NO_CERTIFICATE, False, "no-certificate"),  # another format, the same entitlement
        (Policy(frozenset({Mode.SHARED_SECRET}), SecretSet([SECRET])), b"TEXT", FP_OK, False, "no-secret"),
        (FP_ONLY, f"TEXT; secret={SECRET}".encode(), NO_CERTIFICATE, False, "secret-not-accepted"),
        # a secret set, but the shared-secret mode off: the right secret is still not accepted
        (FP_WITH_SECRETS, f"TEXT; secret={SECRET}".encode(), NO_CERTIFICATE, False, "secret-not-accepted"),
        (Policy(frozenset({Mode.HEADER_ONLY})), b"TEXT", NO_CERTIFICATE, True, "header-only"),
        (Policy(frozenset({Mode.HEADER_ONLY})), b"XML", NO_CERTIFICATE, False, "unsupported-format"),
        # JSON and BIN need an entitlement: header-only (the KEP's option 1, as kube's handler) serves TEXT alone
        (Policy(frozenset({Mode.HEADER_ONLY})), b"JSON", NO_CERTIFICATE, False, "unsupported-format"),
        (Policy(frozenset({Mode.HEADER_ONLY})), b"BIN", FP_OK, False, "unsupported-format"),
        (Policy(frozenset({Mode.HEADER_ONLY, Mode.FRONT_PROXY})), b"BIN", FP_OK, True, "front-proxy"),
    ],
)
def test_policy_decisions(policy: Policy, value: bytes, identity, attach: bool, reason: str) -> None:
    decision = policy.decide([value], identity, NOW)
    assert (decision.attach, decision.reason) == (attach, reason)


def test_policy_refuses_duplicates_even_for_front_proxy() -> None:
    assert BOTH.decide([b"TEXT", b"TEXT"], FP_OK, NOW).reason == "duplicate-opt-in"


def test_front_proxy_grant_expires_on_the_connection() -> None:
    later = NOW + dt.timedelta(days=3650)
    decision = Policy(frozenset({Mode.FRONT_PROXY})).decide([b"TEXT"], FP_OK, later)
    assert (decision.attach, decision.reason) == (False, "expired")


def test_every_reason_has_a_metrics_label_and_a_shared_decision() -> None:
    """A new Reason can never raise on the request path: metrics and decisions derive from the enum."""
    from secure_orca.authz.policy import DECISIONS
    from secure_orca.authz.reasons import Reason
    from secure_orca.server.metrics import Metrics
    from secure_orca.server.sampler import Sampler

    metrics = Metrics(Sampler(1.0), lambda: 0)
    for reason in Reason:
        assert DECISIONS[reason].attach is reason.grants
        metrics.on_decision(DECISIONS[reason])
    text = metrics.registry.get_sample_value  # one sample per reason, with the right result label
    assert text("secure_orca_load_reports_total", {"result": "refused", "reason": "no-secret"}) == 1
    assert text("secure_orca_load_reports_total", {"result": "attached", "reason": "front-proxy"}) == 1


# ---- option 2b: the load-reader identity (reports only) -------------------------------------------------------

READER = Policy(frozenset({Mode.LOAD_READER}))
READERS = ChainVerifier([CLIENT_CA.cert], ("load-reader",))
READER_OK = READERS.verify([pki.issue(CLIENT_CA, "load-reader").cert], NOW)
READER_WRONG_NAME = READERS.verify([pki.issue(CLIENT_CA, "someone").cert], NOW)


@pytest.mark.parametrize(
    ("policy", "front_proxy", "reader", "attach", "reason"),
    [
        (READER, NO_CERTIFICATE, READER_OK, True, "load-reader"),
        (READER, FP_OK, NO_CERTIFICATE, False, "no-certificate"),  # a front proxy is no load reader
        (READER, NO_CERTIFICATE, READER_WRONG_NAME, False, "name-not-allowed"),
        (BOTH, NO_CERTIFICATE, READER_OK, False, "no-certificate"),  # the mode must be listed to grant
        (Policy(frozenset({Mode.FRONT_PROXY, Mode.LOAD_READER})), NO_CERTIFICATE, READER_OK, True, "load-reader"),
    ],
)
def test_load_reader_decisions(policy: Policy, front_proxy, reader, attach: bool, reason: str) -> None:
    decision = policy.decide([b"TEXT"], front_proxy, NOW, reader)
    assert (decision.attach, decision.reason) == (attach, reason)


def test_load_reader_grant_expires_on_the_connection() -> None:
    decision = READER.decide([b"TEXT"], NO_CERTIFICATE, NOW + dt.timedelta(days=3650), READER_OK)
    assert (decision.attach, decision.reason) == (False, "expired")
