"""Chain verification that a client cannot make expensive. Counts signature operations (public-key
operations run), never wall time."""

from __future__ import annotations

import itertools
import ssl

import pytest

import secure_orca.x509.cache as cache_module
from secure_orca.x509 import chainverifier
from secure_orca.x509.cache import ChainCache
from secure_orca.x509.chainverifier import ChainVerifier, Failure
from secure_orca.x509.parse import GoCertificate, parse_certificate
from secure_orca.x509.verify import MAX_SIGNATURE_CHECKS, MAX_VERIFICATION_COST, Pool, signature_cost, verify
from tests import x509corpus as shapes


def _pems(*nodes: shapes.Node) -> tuple[str, ...]:
    return tuple(ssl.DER_cert_to_PEM_cert(node.der) for node in nodes)


def test_rsa_exponents_go_refuses_cost_no_signature_operation() -> None:
    """Seven self-issued intermediates whose RSA exponent is 2^63-25 (Go refuses any exponent above 2^31-1 before
    exponentiating): refused, and not one signature operation runs with such a key."""
    ca = shapes.root()
    key = shapes.rsa_key_with_exponent(shapes.LARGEST_PRIME_BELOW_2_63)
    crafted = [shapes.make("crafted", None, ca=True, key=key) for _ in range(6)]
    mid = shapes.make("crafted", ca, ca=True, key=key)
    leaf = shapes.leaf(mid)
    verifier = ChainVerifier([ca.cert], [shapes.ALLOWED])
    result = verifier.verify_der([leaf.der, mid.der, *(c.der for c in crafted)], shapes.NOW)
    assert (result.ok, result.failure) == (False, Failure.UNTRUSTED)
    assert verifier.signature_operations == 0


def test_a_usable_exponent_still_verifies() -> None:
    ca = shapes.root()
    mid = shapes.make("intermediate", ca, ca=True, key=shapes.rsa_key_with_exponent(shapes.GO_MAX_EXPONENT))
    verifier = ChainVerifier([ca.cert], [shapes.ALLOWED])
    assert verifier.verify_der([shapes.leaf(mid).der, mid.der], shapes.NOW).ok
    assert verifier.signature_operations == 2


def test_reordering_the_intermediates_buys_no_new_verification() -> None:
    """Every order of the same presented intermediates is one cache entry: 4! orders, one verification."""
    ca = shapes.root()
    mid = shapes.make("intermediate", ca, ca=True)
    junk = [shapes.make(f"junk-{i}", ca, ca=True) for i in range(3)]
    leaf = shapes.leaf(mid)
    verifier = ChainVerifier([ca.cert], [shapes.ALLOWED])
    cache = ChainCache(verifier)
    results = {cache.lookup(_pems(leaf, *order), shapes.NOW) for order in itertools.permutations([mid, *junk])}
    assert len(results) == 1 and next(iter(results)).ok
    assert verifier.verifications == 1


def test_the_leaf_and_the_count_of_each_intermediate_stay_in_the_key() -> None:
    ca = shapes.root()
    mid = shapes.make("intermediate", ca, ca=True)
    leaf, other = shapes.leaf(mid), shapes.leaf(mid, "another")
    assert ChainCache.key(_pems(leaf, mid)) != ChainCache.key(_pems(other, mid))
    assert ChainCache.key(_pems(leaf, mid)) != ChainCache.key(_pems(mid, leaf))
    assert ChainCache.key(_pems(leaf, mid)) != ChainCache.key(_pems(leaf, mid, mid))


def test_signature_cost_grows_with_the_modulus_and_the_exponent() -> None:
    ca = shapes.root()
    big = (1 << 8191) | 1
    fake = shapes.resign(shapes.leaf(ca), ca.key, shapes.set_field(shapes.SPKI, shapes.rsa_public_key_info(big, 65537)))
    wide = shapes.resign(fake, ca.key, shapes.set_field(shapes.SPKI, shapes.rsa_public_key_info(big, (1 << 31) - 1)))
    rsa2048 = shapes.leaf(ca, key=shapes.rsa_key_with_exponent(65537))
    costs = [signature_cost(parse_certificate(n.der)) for n in (ca, rsa2048, fake, wide)]
    assert costs == [1, 1, 16, 29]
    assert MAX_SIGNATURE_CHECKS * costs[-1] > MAX_VERIFICATION_COST  # Go's own bound allows far more


def test_one_verification_stops_at_its_budget_whatever_the_order() -> None:
    """Seven presented CAs with the issuer's name and other keys: each is a signature check that fails. The
    budget stops the search; without it, all of them are tried."""
    ca = shapes.root()
    mid = shapes.make("intermediate", ca, ca=True)
    decoys = [shapes.make("intermediate", ca, ca=True) for _ in range(7)]
    leaf = parse_certificate(shapes.leaf(mid).der)
    roots = Pool([parse_certificate(ca.der)])
    presented = [parse_certificate(n.der) for n in (mid, *decoys)]
    for order in (presented, presented[::-1], presented[3:] + presented[:3]):
        bounded = verify(leaf, order, roots, shapes.NOW, budget=3)
        assert bounded.cost <= 3 and bounded.operations <= 3
    unbounded = verify(leaf, presented[::-1], roots, shapes.NOW)
    assert unbounded.chains and unbounded.cost > 3


def test_a_verification_parses_each_presented_certificate_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A connection's cache miss reads each certificate once (the recheck time reuses the verifier's parse)."""
    ca = shapes.root()
    mid = shapes.make("intermediate", ca, ca=True)
    decoys = [shapes.make("intermediate", ca, ca=True) for _ in range(3)]
    chain = _pems(shapes.leaf(mid), mid, *decoys)
    parsed: list[bytes] = []

    def counted(der: bytes) -> GoCertificate:
        parsed.append(der)
        return parse_certificate(der)

    clear = getattr(chainverifier, "parsed", None)
    if clear is not None:
        clear.cache_clear()
    cache = ChainCache(ChainVerifier([ca.cert], [shapes.ALLOWED]))
    monkeypatch.setattr(chainverifier, "parse_certificate", counted)
    monkeypatch.setattr(cache_module, "parse_certificate", counted, raising=False)
    assert cache.lookup(chain, shapes.NOW).ok
    assert len(parsed) == len(set(parsed)) == len(chain)
