"""Reverse proxy to upstream services (``--proxy PREFIX=URL``), streaming both ways with httpx.

Hop-by-hop headers are not forwarded in either direction. As kube's aggregator does, the authenticated user
goes upstream as ``X-Remote-User``/``-Uid``/``-Group``/``-Extra-*`` (never what the client sent: the
authentication layer removed that), presenting --proxy-client-cert-file when given.
The opt-in header never reaches an upstream (the middleware removed it before this app runs), and
whatever ORCA headers an upstream returns are removed by the middleware on the way out.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import httpx

from secure_orca.authn.requestheader import upstream_headers
from secure_orca.server.asgi import ASGIApp, Receive, Scope, Send, respond_json
from secure_orca.server.authentication import current_user
from secure_orca.server.flags import ProxyRoute

log = logging.getLogger("secure_orca.proxy")
HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
        b"host",
    }
)


def forwardable(headers: Sequence[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """Headers without hop-by-hop fields, including any named in ``Connection``."""
    named = {
        token.strip().lower() for name, value in headers if name.lower() == b"connection" for token in value.split(b",")
    }
    return [(n, v) for n, v in headers if n.lower() not in HOP_BY_HOP and n.lower() not in named]


def identity_headers(scope: Scope) -> list[tuple[bytes, bytes]]:
    """The authenticated user as kube's aggregator sends it upstream (the authentication layer removed every
    identity header the client sent, and put the user in the scope)."""
    user = current_user(scope)
    return upstream_headers(user) if user is not None else []


class ProxyApp:
    """Sends requests under a route's prefix upstream; everything else goes to ``fallback``."""

    def __init__(
        self,
        routes: Sequence[ProxyRoute],
        fallback: ASGIApp,
        timeout: float = 30.0,
        client_cert: tuple[Path, Path] | None = None,
    ) -> None:
        self.routes = sorted(routes, key=lambda r: len(r.prefix), reverse=True)
        self.fallback = fallback
        tls = httpx.create_ssl_context()  # httpx's default trust (SSL_CERT_FILE when set)
        if client_cert is not None:
            tls.load_cert_chain(*client_cert)
        self.client = httpx.AsyncClient(timeout=timeout, follow_redirects=False, verify=tls)

    def route(self, path: str) -> ProxyRoute | None:
        for route in self.routes:
            if path == route.prefix or path.startswith(route.prefix.rstrip("/") + "/"):
                return route
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = self.route(scope["path"]) if scope["type"] == "http" else None
        if route is None:
            await self.fallback(scope, receive, send)
            return
        await self.forward(route, scope, receive, send)

    async def forward(self, route: ProxyRoute, scope: Scope, receive: Receive, send: Send) -> None:
        url = route.upstream + scope["raw_path"].decode("latin-1")
        if scope.get("query_string"):
            url += "?" + scope["query_string"].decode("latin-1")

        async def body() -> AsyncIterator[bytes]:
            while True:
                message = await receive()
                if message["type"] != "http.request":
                    return
                yield message.get("body", b"")
                if not message.get("more_body", False):
                    return

        headers = forwardable(scope["headers"]) + identity_headers(scope)
        request = self.client.build_request(scope["method"], url, headers=headers, content=body())
        try:
            response = await self.client.send(request, stream=True)
        except httpx.TimeoutException:
            log.warning("proxy %s: upstream timed out", route.prefix)
            await respond_json(send, 504, {"kind": "Status", "status": "Failure", "code": 504})
            return
        except httpx.HTTPError as error:
            log.warning("proxy %s: upstream unavailable: %s", route.prefix, type(error).__name__)
            await respond_json(send, 502, {"kind": "Status", "status": "Failure", "code": 502})
            return
        try:
            headers = forwardable(response.headers.raw)
            await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
            async for chunk in response.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        except httpx.HTTPError as error:
            log.warning("proxy %s: upstream broke mid-response: %s", route.prefix, type(error).__name__)
        finally:
            await response.aclose()

    async def aclose(self) -> None:
        await self.client.aclose()
