"""Issue 14 items 4 and 5: the front-proxy chain cache, fed by whatever chains clients present.

Real certificates from the project's PKI generator; the cache and verifier are pure (time is passed in).
"""

from __future__ import annotations

import datetime as dt
import gc
import tracemalloc

from secure_orca import pki
from secure_orca.x509.cache import MAX_CHAIN_CERTS, ChainCache
from secure_orca.x509.chainverifier import ChainVerifier, Failure

NOW = dt.datetime.now(dt.UTC)


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
