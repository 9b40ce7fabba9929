"""A client sharing the load balancer's address (or IPv6 /64) spends that address's signature
budget. Its refusal is that address's, never the chain's: the same chain from another address is verified, not
refused from a shared cache. And the budget is charged the work done: decoy RSA-8192 "issuers" of a certificate
signed with a 2048-bit key run no public-key operation and cost nothing (counted in cost units, never timed)."""

from __future__ import annotations

import datetime as dt
import ssl

import pytest

from secure_orca.x509.budget import CAPACITY, AddressBudget
from secure_orca.x509.cache import ChainCache
from secure_orca.x509.chainverifier import ChainVerifier
from tests import x509corpus as shapes

NEIGHBOUR, THIRD = "2001:db8:1::7", "2001:db8:2::9"  # the load balancer shares the neighbour's /64
BALANCER = "2001:db8:1::1"


def _pems(*nodes: shapes.Node) -> tuple[str, ...]:
    return tuple(ssl.DER_cert_to_PEM_cert(node.der) for node in nodes)


def test_a_budget_refusal_is_never_served_to_another_address() -> None:
    ca = shapes.root()
    chain = _pems(shapes.leaf(ca))
    budget = AddressBudget()
    cache = ChainCache(ChainVerifier([ca.cert], [shapes.ALLOWED]), budget)
    now = dt.datetime.now(dt.UTC)
    budget.spend(NEIGHBOUR, CAPACITY, now.timestamp())  # the neighbour's flood drained the shared /64
    assert not cache.lookup(chain, now, address=BALANCER).ok
    verifications = cache.verifier.verifications
    assert not cache.lookup(chain, now, address=BALANCER).ok  # remembered for that address: not verified again
    assert cache.verifier.verifications == verifications
    assert cache.lookup(chain, now, address=THIRD).ok, "another address got the neighbour's budget refusal"
    assert cache.lookup(chain, now, address=BALANCER).ok  # the chain's own verdict, once it has one


@pytest.mark.parametrize("ca_key", ["ec", "rsa-2048"])
def test_decoy_issuers_cost_the_work_they_cause(ca_key: str) -> None:
    """A trusted leaf and the seven decoys of the audit (RSA-8192 keys named as its CA): one signature operation,
    that of the real CA, is run and charged. An RSA CA's signature has its 2048-bit key's length, which no
    RSA-8192 key can check (RFC 8017 8.2.2); an EC CA's is no RSA signature at all."""
    ca = shapes.root(key=shapes.rsa_key_with_exponent(65537)) if ca_key == "rsa-2048" else shapes.root()
    decoys = [
        shapes.resign(
            ca, ca.key, shapes.set_field(shapes.SPKI, shapes.rsa_public_key_info((1 << 8191) | (2 * i + 1), 65537))
        )
        for i in range(7)
    ]
    budget = AddressBudget()
    verifier = ChainVerifier([ca.cert], [shapes.ALLOWED])
    cache = ChainCache(verifier, budget)
    now = dt.datetime.now(dt.UTC)
    assert cache.lookup(_pems(shapes.leaf(ca), *decoys), now, address=NEIGHBOUR).ok
    assert (verifier.signature_operations, verifier.signature_cost) == (1, 1)
    assert budget.available(NEIGHBOUR, now.timestamp()) == CAPACITY - 1
