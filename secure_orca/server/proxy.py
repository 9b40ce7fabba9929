r"""Reverse proxy to upstream services (``--proxy PREFIX=URL``), streaming both ways with httpx.

A request reaches only its route's upstream, under its prefix. As kube-aggregator's proxy handler does
(kubernetes/kubernetes 008b3652959ca58af8be3fb5b6ecfe9ae7638282,
staging/src/k8s.io/kube-aggregator/pkg/apiserver/handler_proxy.go), the upstream URL is built from parts, its
scheme and host fixed by the route, never by joining strings with the client's path. Where kube forwards
the decoded path as is, we refuse (400) every raw path whose meaning a URL library or the upstream could
change: one not starting with ``/``, a ``.`` or ``..`` segment (plain or percent-encoded), an encoded
``/`` or ``\``, a backslash, and any byte outside RFC 3986's path characters (``#``, space, controls,
non-ASCII). See ``steered_path``.

Hop-by-hop headers are not forwarded in either direction. The opt-in header never reaches an upstream
(the middleware removed it before this app runs), and whatever ORCA headers an upstream returns are removed
by the middleware on the way out.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator, Sequence
from urllib.parse import unquote_to_bytes

import httpx

from secure_orca.server.asgi import respond_json
from secure_orca.server.flags import ProxyRoute
from secure_orca.server.middleware import ASGIApp, Receive, Scope, Send

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


# RFC 3986 path characters: unreserved, sub-delims, ":", "@", "/" and well-formed percent-escapes.
_PATH = re.compile(rb"(?:[A-Za-z0-9\-._~!$&'()*+,;=:@/]|%[0-9A-Fa-f]{2})*")
_QUERY = re.compile(rb"(?:[A-Za-z0-9\-._~!$&'()*+,;=:@/?]|%[0-9A-Fa-f]{2})*")
_ENCODED_SEPARATOR = re.compile(rb"%(?:2[Ff]|5[Cc])")
BAD_PATH = {"kind": "Status", "status": "Failure", "reason": "BadRequest", "code": 400}


def steered_path(raw_path: bytes, prefix: str) -> bytes | None:
    """``raw_path`` when it stays under ``prefix`` whatever a URL library or the upstream makes of it, else
    None (pure). Refused: no leading ``/``, characters outside RFC 3986 paths, encoded ``/`` or ``\\``,
    ``.`` and ``..`` segments (also percent-encoded), and a decoded path outside the prefix."""
    if not raw_path.startswith(b"/") or not _PATH.fullmatch(raw_path) or _ENCODED_SEPARATOR.search(raw_path):
        return None
    decoded = unquote_to_bytes(raw_path)
    if any(segment in (b".", b"..") for segment in decoded.split(b"/")):
        return None
    text = decoded.decode("latin-1")
    if not (text == prefix or text.startswith(prefix.rstrip("/") + "/")):
        return None
    return raw_path


def forwardable(headers: Sequence[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """Headers without hop-by-hop fields, including any named in ``Connection``."""
    named = {
        token.strip().lower() for name, value in headers if name.lower() == b"connection" for token in value.split(b",")
    }
    return [(n, v) for n, v in headers if n.lower() not in HOP_BY_HOP and n.lower() not in named]


class ProxyApp:
    """Sends requests under a route's prefix upstream; everything else goes to ``fallback``."""

    def __init__(self, routes: Sequence[ProxyRoute], fallback: ASGIApp, timeout: float = 30.0) -> None:
        self.routes = sorted(routes, key=lambda r: len(r.prefix), reverse=True)
        self.fallback = fallback
        # No Accept-Encoding of our own: a client that asked for none gets an uncompressed body.
        identity = {"accept-encoding": "identity"}
        self.client = httpx.AsyncClient(timeout=timeout, follow_redirects=False, headers=identity)
        self.upstreams = {route.prefix: httpx.URL(route.upstream) for route in self.routes}

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
        path = steered_path(scope.get("raw_path") or b"", route.prefix)
        if path is None:
            await respond_json(send, 400, BAD_PATH)
            return
        base = self.upstreams[route.prefix]
        target = base.raw_path.split(b"?")[0].rstrip(b"/") + path
        query = scope.get("query_string") or b""
        if not _QUERY.fullmatch(query):
            await respond_json(send, 400, BAD_PATH)
            return
        url = base.copy_with(raw_path=target + (b"?" + query if query else b""))

        async def body() -> AsyncIterator[bytes]:
            while True:
                message = await receive()
                if message["type"] != "http.request":
                    return
                yield message.get("body", b"")
                if not message.get("more_body", False):
                    return

        request = self.client.build_request(scope["method"], url, headers=forwardable(scope["headers"]), content=body())
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
