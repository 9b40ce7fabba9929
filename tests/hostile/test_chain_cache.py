"""The front-proxy chain cache, fed by whatever chains clients present.

Real certificates from the project's PKI generator; the cache and verifier are pure (time is passed in).
"""

from __future__ import annotations

import datetime as dt
import gc
import ssl
import tracemalloc

from cryptography import x509

from secure_orca import pki
from secure_orca.x509.cache import MAX_CHAIN_CERTS, ChainCache
from secure_orca.x509.chainverifier import ChainVerifier, Failure
from tests import x509corpus as shapes

NOW = dt.datetime.now(dt.UTC)
HOUR, DAY = dt.timedelta(hours=1), dt.timedelta(days=1)


def pem(issued: pki.Issued) -> str:
    return issued.cert_pem().decode()


def test_refusal_before_not_before_is_not_kept_once_valid() -> None:
    ca = pki.make_ca("front-proxy-ca")
    early = pki.issue(ca, pki.FRONT_PROXY_CN, not_before=NOW + dt.timedelta(hours=1))
    cache = ChainCache(ChainVerifier([ca.cert], [pki.FRONT_PROXY_CN]))
    first = cache.lookup((pem(early),), NOW)
    assert (first.ok, first.failure) == (False, Failure.EXPIRED)
    assert cache.lookup((pem(early),), NOW + dt.timedelta(minutes=30)).ok is False  # still early: cached
    later = cache.lookup((pem(early),), NOW + dt.timedelta(hours=2))
    assert (later.ok, later.failure) == (True, None)


def test_intermediate_not_yet_valid_is_rechecked() -> None:
    ca = pki.make_ca("front-proxy-ca")
    intermediate = pki.issue(ca, "intermediate", is_ca=True, eku=None, not_before=NOW + dt.timedelta(hours=1))
    leaf = pki.issue(intermediate, pki.FRONT_PROXY_CN)
    cache = ChainCache(ChainVerifier([ca.cert], [pki.FRONT_PROXY_CN]))
    chain = (pem(leaf), pem(intermediate))
    assert not cache.lookup(chain, NOW).ok
    assert cache.lookup(chain, NOW + dt.timedelta(hours=2)).ok


def test_padded_chains_cost_bounded_memory() -> None:
    """A user certificate padded with junk, varied per connection, must not be retained by the cache."""
    ca = pki.make_ca("front-proxy-ca")
    junk = [pem(pki.make_ca(f"junk-{i}")) for i in range(MAX_CHAIN_CERTS - 1)]
    user = pem(pki.issue(pki.make_ca("client-ca"), "user"))
    cache = ChainCache(ChainVerifier([ca.cert], [pki.FRONT_PROXY_CN]))
    chains = 200
    padded_size = sum(len(p) for p in junk) + len(user)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(chains):  # each chain new and distinct (as from a new connection), then dropped
            cache.lookup(tuple(p + "\n" * (i + 1) for p in (user, *junk)), NOW)
        gc.collect()
        retained = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    # The chains total chains * padded_size bytes; the cache may keep a small constant per entry only.
    assert retained < chains * padded_size / 10, (retained, chains * padded_size)


def test_overlong_chains_are_refused_without_verification() -> None:
    ca = pki.make_ca("front-proxy-ca")
    leaf = pem(pki.issue(ca, pki.FRONT_PROXY_CN))
    junk = pem(pki.make_ca("junk"))
    verifier = ChainVerifier([ca.cert], [pki.FRONT_PROXY_CN])
    cache = ChainCache(verifier)
    assert cache.lookup((leaf, *[junk] * MAX_CHAIN_CERTS), NOW).failure == Failure.UNTRUSTED
    assert verifier.verifications == 0
    assert cache.lookup((leaf, *[junk] * (MAX_CHAIN_CERTS - 1)), NOW).ok  # at the bound: verified, granted
    assert verifier.verifications == 1


def _renewed_bundle(start: dt.datetime) -> tuple[list[x509.Certificate], str]:
    """A CA renewed with the same key and bundled as [old, renewed]; the old one expires an hour after ``start``.
    Returns the bundle and a front-proxy leaf issued under that key."""
    key = shapes.ec_key()
    old = shapes.make("front-proxy-ca", key=key, ca=True, not_before=start - DAY, not_after=start + HOUR)
    renewed = shapes.make("front-proxy-ca", key=key, ca=True, not_before=start - HOUR, not_after=start + 365 * DAY)
    leaf = shapes.make(pki.FRONT_PROXY_CN, old, not_before=start - HOUR, not_after=start + 30 * DAY)
    return [old.cert, renewed.cert], ssl.DER_cert_to_PEM_cert(leaf.der)


def test_a_ca_renewed_with_the_same_key_keeps_granting_once_the_old_one_expires() -> None:
    """Go grants through the renewed certificate once the old one expires; so must a result
    made while both were valid (the memo reuses it without a lookup) and every later lookup, for every trust."""
    bundle, leaf = _renewed_bundle(NOW)
    later = NOW + 2 * HOUR
    assert ChainVerifier(bundle, [pki.FRONT_PROXY_CN]).verify_der([ssl.PEM_cert_to_DER_cert(leaf)], later).ok
    for names in ([pki.FRONT_PROXY_CN], [], ["load-reader", pki.FRONT_PROXY_CN]):  # front proxy, client CA, reader
        cache = ChainCache(ChainVerifier(bundle, names))
        first, _ = cache.lookup_until((leaf,), NOW)
        assert first.holds_at(NOW) and first.holds_at(later), names
        assert cache.lookup((leaf,), later).holds_at(later), names


def test_a_cached_result_answers_as_a_new_verification_would_as_windows_end() -> None:
    """Every window a result relied on is kept: around the old CA's expiry and the leaf's, the result made once
    says what verifying again would say, without verifying again."""
    bundle, leaf = _renewed_bundle(NOW)
    cache = ChainCache(ChainVerifier(bundle, [pki.FRONT_PROXY_CN]))
    fresh = ChainVerifier(bundle, [pki.FRONT_PROXY_CN])
    result = cache.lookup((leaf,), NOW)
    tick = dt.timedelta(seconds=1)
    for moment in (NOW, NOW + HOUR - tick, NOW + HOUR + tick, NOW + 30 * DAY - 2 * HOUR, NOW + 31 * DAY):
        held = fresh.verify_der([ssl.PEM_cert_to_DER_cert(leaf)], moment).ok
        assert result.holds_at(moment) == cache.lookup((leaf,), moment).holds_at(moment) == held, moment
    assert cache.verifier.verifications == 1
