"""A --client-ca-file chain being verified must not stop the event loop. The x509 authenticator's
verification is held open (the verifier waits on an event) while another connection's request is answered;
counted, never timed."""

from __future__ import annotations

import asyncio
import ssl
import threading
from collections.abc import MutableMapping
from typing import Any

from secure_orca.authz.authority import Authority
from secure_orca.authz.memo import ConnectionMemo
from secure_orca.authz.policy import Policy
from secure_orca.server.authentication import USER_KEY, AuthenticationConfig, AuthenticationMiddleware
from secure_orca.server.trust import CONNECTION_KEY, TrustService
from secure_orca.x509.cache import ChainCache
from secure_orca.x509.chainverifier import ChainResult, ChainVerifier
from tests import x509corpus as shapes
from tests.asgi_call import run_asgi


async def app(scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
    user = scope[USER_KEY].name.encode()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"x-user", user)]})
    await send({"type": "http.response.body", "body": b""})


async def request(middleware: AuthenticationMiddleware, chain: list[str] | None, memo: ConnectionMemo) -> list[Any]:
    scope: dict[str, Any] = {"type": "http", "path": "/", "headers": [], "extensions": {CONNECTION_KEY: memo}}
    if chain is not None:
        scope["extensions"]["tls"] = {"client_cert_chain": chain}
    return await run_asgi(middleware, scope)


def answer(sent: list[Any]) -> tuple[int, list[Any]]:
    return sent[0]["status"], sent[0]["headers"]


def test_other_connections_are_answered_while_a_client_ca_chain_is_verified() -> None:
    ca = shapes.root("client-ca")
    user = ssl.DER_cert_to_PEM_cert(shapes.leaf(ca, "alice").der)
    clients = ChainCache(ChainVerifier([ca.cert]))
    config = AuthenticationConfig(client_certs=True, anonymous=True)
    middleware = AuthenticationMiddleware(app, config, TrustService(Authority(Policy(frozenset())), clients))
    verify_der = clients.verifier.verify_der
    started, release = threading.Event(), threading.Event()

    def held(chain: Any, now: Any, *args: Any) -> ChainResult:
        started.set()
        release.wait(5)
        return verify_der(chain, now, *args)

    clients.verifier.verify_der = held  # type: ignore[method-assign, assignment]

    async def scenario() -> tuple[bool, list[Any], list[Any], list[Any]]:
        memo = ConnectionMemo()
        first = asyncio.create_task(request(middleware, [user], memo))
        await asyncio.to_thread(started.wait, 1)
        second = asyncio.create_task(request(middleware, [user], memo))  # same connection: waits, no re-check
        other = await request(middleware, None, ConnectionMemo())  # another connection, while the first verifies
        pending = not first.done() and not second.done()
        release.set()
        return pending, other, await first, await second

    pending, other, first, second = asyncio.run(scenario())
    assert pending, "the other connection was answered only after the client-CA verification"
    assert answer(other) == (200, [(b"x-user", b"system:anonymous")])
    assert answer(first) == answer(second) == (200, [(b"x-user", b"alice")])
    assert clients.verifier.verifications == 1
