"""A chain being verified must not stop the event loop. A verification held open (the verifier
waits on an event) while another connection's request is answered; counted, never timed."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from secure_orca.authz.memo import ConnectionMemo
from secure_orca.server.middleware import LoadReportMiddleware
from secure_orca.server.trust import CONNECTION_KEY
from secure_orca.x509.chainverifier import ChainResult
from tests.asgi_call import run_asgi
from tests.inprocess import FP_PEM, OPT_IN, make, orca


async def request(middleware: LoadReportMiddleware, chain: list[str] | None, memo: ConnectionMemo) -> list[Any]:
    scope: dict[str, Any] = {"type": "http", "path": "/", "headers": [OPT_IN], "extensions": {CONNECTION_KEY: memo}}
    if chain is not None:
        scope["extensions"]["tls"] = {"client_cert_chain": chain}
    return await run_asgi(middleware, scope)


def test_other_connections_are_answered_while_a_chain_is_verified() -> None:
    middleware, _, _, decisions = make()
    chains = middleware.authority.chains
    assert chains is not None
    verify_der = chains.verifier.verify_der
    started, release = threading.Event(), threading.Event()

    def held(chain: Any, now: Any) -> ChainResult:
        started.set()
        release.wait(5)
        return verify_der(chain, now)

    chains.verifier.verify_der = held

    async def scenario() -> tuple[bool, list[Any], list[Any], list[Any], list[Any]]:
        memo = ConnectionMemo()
        proxy = asyncio.create_task(request(middleware, [FP_PEM], memo))
        await asyncio.to_thread(started.wait, 5)
        second = asyncio.create_task(request(middleware, [FP_PEM], memo))  # same connection: waits, no re-check
        third = asyncio.create_task(request(middleware, [FP_PEM], ConnectionMemo()))  # same chain: waits for it
        other = await request(middleware, None, ConnectionMemo())  # another connection, while the first verifies
        pending = not proxy.done() and not second.done() and not third.done()
        release.set()
        return pending, other, await proxy, await second, await third

    pending, other, first, second, third = asyncio.run(scenario())
    assert pending, "the other connection was answered only after the verification"
    assert orca(other) == [] and len(orca(first)) == len(orca(second)) == len(orca(third)) == 1
    assert decisions == ["no-certificate", "front-proxy", "front-proxy", "front-proxy"]
    assert chains.verifier.verifications == 1


def test_a_recheck_on_an_open_connection_is_verified_off_the_loop_too() -> None:
    """When a connection's check may change with time (a certificate becoming valid, an address's refusal
    expiring), its next request verifies again: also in a worker thread, never on the loop."""
    middleware, _, _, decisions = make()
    chains = middleware.authority.chains
    assert chains is not None
    memo = ConnectionMemo()
    assert len(orca(asyncio.run(request(middleware, [FP_PEM], memo)))) == 1
    chains._results.clear()  # the result's time is up: as if its recheck moment had come
    memo.recheck = 0
    verify_der = chains.verifier.verify_der
    started, release = threading.Event(), threading.Event()

    def held(chain: Any, now: Any, *args: Any) -> ChainResult:
        started.set()
        release.wait(5)
        return verify_der(chain, now, *args)

    chains.verifier.verify_der = held

    async def scenario() -> tuple[bool, list[Any], list[Any]]:
        again = asyncio.create_task(request(middleware, [FP_PEM], memo))
        await asyncio.to_thread(started.wait, 1)
        other = await request(middleware, None, ConnectionMemo())
        pending = not again.done()
        release.set()
        return pending, other, await again

    pending, other, again = asyncio.run(scenario())
    assert pending, "the recheck ran on the event loop"
    assert orca(other) == [] and len(orca(again)) == 1 and chains.verifier.verifications == 2
    assert decisions == ["front-proxy", "no-certificate", "front-proxy"]
