"""The load-report middleware in process, for the tests that drive it without sockets: a front-proxy CA and
chain, a recording backend that injects ORCA headers, ``make`` (the middleware with its trust and sampler),
``call`` (one request through it) and ``orca`` (the ORCA headers of what it sent)."""

from __future__ import annotations

import asyncio
from typing import Any

from secure_orca import pki
from secure_orca.authz.authority import Authority
from secure_orca.authz.memo import ConnectionMemo
from secure_orca.authz.policy import Mode, Policy
from secure_orca.authz.secrets import SecretSet
from secure_orca.server.asgi import Message, Receive, Scope, Send
from secure_orca.server.middleware import LoadReportMiddleware
from secure_orca.server.sampler import Sampler
from secure_orca.server.trust import CONNECTION_KEY, TrustService
from secure_orca.x509.chainverifier import ChainVerifier

FP_CA = pki.make_ca("front-proxy-ca")
FP_PEM = pki.issue(FP_CA, "front-proxy-client").cert_pem().decode()
OTHER_PEM = pki.issue(pki.make_ca("other"), "front-proxy-client").cert_pem().decode()
SECRET = "0123456789abcdef-secret"


class Backend:
    """An application that records what it saw and injects ORCA headers into its response and trailers."""

    def __init__(self) -> None:
        self.seen: list[tuple[bytes, bytes]] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.seen = list(scope["headers"])
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "trailers": True,
                "headers": [
                    (b"content-type", b"text/plain"),
                    (b"Endpoint-Load-Metrics", b"TEXT cpu_utilization=0.99"),
                    (b"endpoint-load-metrics-bin", b"CQAAAAAAAPA/"),
                    (b"endpoint-load-metrics-json", b'{"cpu_utilization": 0.99}'),  # older Envoys read it
                    (b"x-kept", b"1"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": b"hello"})
        await send({"type": "http.response.trailers", "headers": [(b"endpoint-load-metrics", b"TEXT eps=1")]})


def make(enabled: bool = True, modes: frozenset[Mode] = frozenset({Mode.FRONT_PROXY, Mode.SHARED_SECRET})):
    sampler = Sampler()
    sampler.header = (b"endpoint-load-metrics", b"TEXT cpu_utilization=0.1")
    backend = Backend()
    decisions: list[str] = []
    middleware = LoadReportMiddleware(
        backend,
        enabled=enabled,
        trust=TrustService(
            Authority.build(Policy(modes, SecretSet([SECRET])), ChainVerifier([FP_CA.cert], ["front-proxy-client"]))
        ),
        sampler=sampler,
        on_decision=lambda d: decisions.append(d.reason),
    )
    return middleware, backend, sampler, decisions


def call(
    middleware: LoadReportMiddleware,
    headers: list[tuple[bytes, bytes]],
    chain: list[str] | None = None,
    memo: ConnectionMemo | None = None,
) -> list[Message]:
    scope: dict[str, Any] = {"type": "http", "path": "/", "headers": headers, "extensions": {}}
    if memo is not None:
        scope["extensions"][CONNECTION_KEY] = memo
    if chain is not None:
        scope["extensions"]["tls"] = {"client_cert_chain": chain}
    sent: list[Message] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b""}

    async def send(message: Message) -> None:
        sent.append(message)

    asyncio.run(middleware(scope, receive, send))
    return sent


def orca(sent: list[Message]) -> list[tuple[bytes, bytes]]:
    return [h for m in sent if "headers" in m for h in m["headers"] if h[0].lower().startswith(b"endpoint-load")]


OPT_IN = (b"endpoint-load-metrics-request", b"TEXT")
