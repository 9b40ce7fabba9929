"""Connections that present the same chain while its first verification finishes: a waiter that arrives when the
verification has finished but its result is not stored yet must store it, not spin. Before the fix, the event
loop spun in ``TrustService._fill`` for ever (seen as h2load hanging on 1 in 4 fresh servers with 4 connections
presenting the front-proxy certificate at once)."""

from __future__ import annotations

import asyncio
import threading

import trustme
from cryptography import x509

from secure_orca.server.trust import TrustService, at, chain_key, now_us
from secure_orca.x509.cache import Cached, ChainCache
from secure_orca.x509.chainverifier import ChainVerifier


def test_a_waiter_on_a_finished_verification_stores_it_and_returns() -> None:
    ca = trustme.CA()
    leaf = ca.issue_cert("front-proxy-client")
    root = x509.load_pem_x509_certificate(ca.cert_pem.bytes())
    cache = ChainCache(ChainVerifier([root], ("front-proxy-client",)))
    trust = TrustService(None)  # type: ignore[arg-type]  # only its verification is used here
    chain = tuple(blob.bytes().decode() for blob in leaf.cert_chain_pems)
    extensions = {"tls": {"client_cert_chain": chain}}
    key = chain_key(extensions, chain)
    finished: list[bool] = []

    def run() -> None:
        async def waiter() -> None:
            now = at(now_us())
            done: asyncio.Future[Cached] = asyncio.get_running_loop().create_future()
            done.set_result(cache.compute(chain, now, "192.0.2.1"))  # finished, its store not yet run
            trust._in_flight[(id(cache), key)] = done
            await trust.verify([cache], extensions, "192.0.2.1")
            finished.append(cache.fresh(key, now, "192.0.2.1"))

        asyncio.run(waiter())

    thread = threading.Thread(target=run, daemon=True)  # a spinning loop cannot be interrupted from inside
    thread.start()
    thread.join(10)
    assert not thread.is_alive(), "the waiter spun on the event loop instead of storing the finished result"
    assert finished == [True]
