"""The signature work one client address buys is bounded over time, not only per verification.
One client opens 15 connections (the audit's scale), each presenting a new leaf and 7 crafted RSA-8192
"intermediates" named as its issuer (each a signature check that fails): counted in signature operations and
their cost, never timed."""

from __future__ import annotations

import asyncio
import ssl
import time
from typing import Any

from secure_orca.authz.memo import ConnectionMemo
from secure_orca.server.middleware import LoadReportMiddleware
from secure_orca.server.trust import CONNECTION_KEY
from secure_orca.x509.budget import CAPACITY, RATE, AddressBudget, address_key
from secure_orca.x509.verify import MAX_VERIFICATION_COST
from tests import x509corpus as shapes
from tests.asgi_call import run_asgi
from tests.inprocess import FP_PEM, OPT_IN, make, orca

ATTACKER, OTHER = "198.51.100.7", "203.0.113.9"


def crafted_chains(count: int) -> list[list[str]]:
    """``count`` chains sharing 7 decoys (RSA-8192 keys nobody holds, e = 65537): 16 cost units per check. Each
    leaf carries an RSA signature of the decoys' modulus length, so every check runs a real public-key operation
    (a shorter one is refused before any, and costs nothing: test_budget_neighbours)."""
    issuer = shapes.make("crafted", shapes.root(), ca=True)
    decoys = [
        shapes.resign(
            issuer,
            issuer.key,
            shapes.set_field(shapes.SPKI, shapes.rsa_public_key_info((1 << 8191) | (2 * i + 1), 65537)),
        )
        for i in range(7)
    ]
    rsa_sha256 = shapes.algorithm_der_null("1.2.840.113549.1.1.11")
    leaves = [
        shapes.with_signature(
            shapes.leaf(issuer, f"client-{i}"), rsa_sha256, b"\x01" + bytes(range(255)) * 4 + b"\x01\x02\x03"
        )
        for i in range(count)
    ]
    return [[ssl.DER_cert_to_PEM_cert(n.der) for n in (leaf, *decoys)] for leaf in leaves]


async def request(middleware: LoadReportMiddleware, chain: list[str], host: str) -> list[Any]:
    extensions = {CONNECTION_KEY: ConnectionMemo(), "tls": {"client_cert_chain": chain}}
    scope = {"type": "http", "path": "/", "headers": [OPT_IN], "extensions": extensions, "client": (host, 40000)}
    return await run_asgi(middleware, scope)


def test_one_address_buys_at_most_its_budget_of_signature_work() -> None:
    middleware, _, _, decisions = make()
    chains = middleware.authority.chains
    assert chains is not None
    attack = crafted_chains(15)
    started = time.monotonic()
    for chain in attack:  # one new connection each
        assert orca(asyncio.run(request(middleware, chain, ATTACKER))) == []
    elapsed = time.monotonic() - started
    spent = chains.verifier.signature_cost
    assert spent <= CAPACITY + RATE * elapsed, f"{spent} cost units for one address"
    assert chains.verifier.signature_operations < 15 * 7
    assert set(decisions) == {"untrusted-ca"}
    # another address is not refused for it: the real front proxy still gets its report
    assert len(orca(asyncio.run(request(middleware, [FP_PEM], OTHER)))) == 1


def test_the_bucket_refills_at_its_rate_and_forgets_the_oldest_address() -> None:
    budget = AddressBudget(capacity=100, rate=10.0, size=2)
    assert budget.available("192.0.2.1", 0.0) == 100
    budget.spend("192.0.2.1", 100, 0.0)
    assert budget.available("192.0.2.1", 0.0) == 0
    assert budget.available("192.0.2.1", 2.0) == 20
    assert budget.refilled_at("192.0.2.1", 50, 2.0) == 5.0
    budget.spend("192.0.2.2", 1, 2.0)
    budget.spend("192.0.2.3", 1, 2.0)  # a third address: the first is forgotten (full again)
    assert budget.available("192.0.2.1", 2.0) == 100


def test_ipv6_counts_per_64_and_mapped_ipv4_as_ipv4() -> None:
    assert address_key("2001:db8::1") == address_key("2001:db8::ffff:2") != address_key("2001:db8:0:1::1")
    assert address_key("::ffff:192.0.2.1") == address_key("192.0.2.1")
    assert MAX_VERIFICATION_COST < CAPACITY
