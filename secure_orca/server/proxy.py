r"""Reverse proxy to upstream services (``--proxy PREFIX=URL``), streaming both ways with httpx.

A request reaches only its route's upstream, under its prefix. As kube-aggregator's proxy handler does
(kubernetes/kubernetes 008b3652959ca58af8be3fb5b6ecfe9ae7638282,
staging/src/k8s.io/kube-aggregator/pkg/apiserver/handler_proxy.go), the upstream URL is built from parts, its
scheme and host fixed by the route, never by joining strings with the client's path. Where kube forwards
the decoded path as is, we refuse (400) every raw path whose meaning a URL library or the upstream could
change: one not starting with ``/``, a ``.`` or ``..`` segment (plain or percent-encoded), an encoded
``/`` or ``\``, a backslash, and any byte outside RFC 3986's path characters (``#``, space, controls,
non-ASCII). See ``steered_path``.

Hop-by-hop headers are not forwarded in either direction; a request without a body goes upstream without
one (no ``Transfer-Encoding``), and an upstream's ``Date`` and ``Server`` give way to the server's own, so a
response carries one of each. An upstream redirect is neither followed nor relayed: 502, as kube's aggregator
answers it (``REDIRECT_REFUSED``); no upgrade is ever forwarded. As kube's
aggregator does, the authenticated user goes upstream as ``X-Remote-User``/``-Uid``/``-Group``/``-Extra-*``
(never what the client sent: the authentication layer removed that), presenting --proxy-client-cert-file
when given.
The opt-in header never reaches an upstream (the middleware removed it before this app runs), and
whatever ORCA headers an upstream returns are removed by the middleware on the way out.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator, Callable, Sequence
from urllib.parse import unquote_to_bytes

import httpx

from secure_orca.authn.requestheader import upstream_headers
from secure_orca.credentials.kinds import KeyPair
from secure_orca.server.asgi import NO_BODY_STATUSES, ASGIApp, Message, Receive, Scope, Send, respond_json
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
        b"http2-settings",  # connection-specific, whether or not Connection names it (RFC 9113 section 3.1)
    }
)
# kube's answer to an upstream redirect (k8s.io/apimachinery eed236ceee2c19c2753a3d93ac0631dc20750454,
# pkg/util/proxy/upgradeaware.go, RejectForwardingRedirects, which the aggregator turns on by default since
# CVE-2022-3172): a 3xx with a Location is replaced by a 502, never relayed and never followed.
REDIRECT_REFUSED = "the backend attempted to redirect this request, which is not permitted"
_UNSENDABLE = re.compile(rb"[\x00\r\n]")  # never in an HTTP field value (RFC 9110 section 5.5)
UNSENDABLE_USER = "the authenticated user cannot be sent to the backend in a header"


# RFC 3986 path characters: unreserved, sub-delims, ":", "@", "/" and well-formed percent-escapes.
_PATH = re.compile(rb"(?:[A-Za-z0-9\-._~!$&'()*+,;=:@/]|%[0-9A-Fa-f]{2})*")
_QUERY = re.compile(rb"(?:[A-Za-z0-9\-._~!$&'()*+,;=:@/?]|%[0-9A-Fa-f]{2})*")
_ENCODED_SEPARATOR = re.compile(rb"%(?:2[Ff]|5[Cc])")
# The server adds its own to every response (hypercorn's Config.response_headers): an upstream's would be a
# second one. (Go's ReverseProxy keeps the upstream's, and Go's server adds none when one is set.)
SERVER_ADDED = frozenset({b"date", b"server"})
BAD_REQUEST = {"kind": "Status", "status": "Failure", "reason": "BadRequest", "code": 400}


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


def identity_headers(scope: Scope) -> list[tuple[bytes, bytes]]:
    """The authenticated user as kube's aggregator sends it upstream (the authentication layer removed every
    identity header the client sent, and put the user in the scope)."""
    user = current_user(scope)
    return upstream_headers(user) if user is not None else []


class BodyStalled(Exception):
    """The client sent no part of its request body for the body timeout."""


class ClientGone(Exception):
    """The client disconnected before its request body was complete."""


def framing_conflict(headers: Sequence[tuple[bytes, bytes]]) -> bool:
    """Whether a request's body framing is ambiguous: Transfer-Encoding with Content-Length (the request
    smuggling pair, RFC 9112 section 6.3), or Content-Length given twice or not a number (pure)."""
    lengths = [value.strip() for name, value in headers if name.lower() == b"content-length"]
    chunked = any(name.lower() == b"transfer-encoding" for name, _ in headers)
    return bool(lengths) and (chunked or len(lengths) > 1 or not lengths[0].isdigit())


def upstream_body(first: Message, rest: Callable[[], AsyncIterator[bytes]]) -> bytes | AsyncIterator[bytes] | None:
    """What goes upstream as the body (pure): nothing for a request whose body ended empty in its first
    message (no ``Transfer-Encoding``, no ``Content-Length``: a body-less GET stays body-less, RFC 9112
    section 6.3), the bytes when the first message holds the whole body (``Content-Length``), else a stream
    (chunked unless the client gave a length)."""
    if first.get("more_body", False):
        return rest()
    return first.get("body", b"") or None


def _status(code: int) -> dict[str, object]:
    return {"kind": "Status", "status": "Failure", "code": code}


class ProxyApp:
    """Sends requests under a route's prefix upstream; everything else goes to ``fallback``.

    Every part of a request body must arrive within ``timeout`` (else 408), and one client address may have
    at most ``max_uploads_per_client`` requests with a body still arriving (else 429), so stalled uploads
    cannot hold every pooled upstream connection."""

    def __init__(
        self,
        routes: Sequence[ProxyRoute],
        fallback: ASGIApp,
        timeout: float = 30.0,
        client_cert: KeyPair | None = None,
        max_uploads_per_client: int = 16,
    ) -> None:
        self.routes = sorted(routes, key=lambda r: len(r.prefix), reverse=True)
        self.fallback = fallback
        self.body_timeout = timeout
        self.max_uploads_per_client = max_uploads_per_client
        self.uploads: dict[str, int] = {}
        tls = httpx.create_ssl_context()  # httpx's default trust (SSL_CERT_FILE when set)
        if client_cert is not None:
            client_cert.load_into(tls)
        # No Accept-Encoding of our own: a client that asked for none gets an uncompressed body.
        identity = {"accept-encoding": "identity"}
        self.client = httpx.AsyncClient(timeout=timeout, follow_redirects=False, verify=tls, headers=identity)
        self.upstreams = {route.prefix: httpx.URL(route.upstream) for route in self.routes}
        logging.getLogger("httpx").setLevel(logging.WARNING)  # its INFO lines carry every upstream URL and query

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

    def upstream_url(self, route: ProxyRoute, scope: Scope) -> httpx.URL | None:
        """The route's upstream with the request's path and query, or None when they could leave it."""
        path = steered_path(scope.get("raw_path") or b"", route.prefix)
        query = scope.get("query_string") or b""
        if path is None or not _QUERY.fullmatch(query):
            return None
        base = self.upstreams[route.prefix]
        target = base.raw_path.split(b"?")[0].rstrip(b"/") + path
        return base.copy_with(raw_path=target + (b"?" + query if query else b""))

    async def _receive(self, receive: Receive) -> Message:
        try:
            message = await asyncio.wait_for(receive(), self.body_timeout)
        except TimeoutError:
            raise BodyStalled from None
        if message["type"] != "http.request":
            raise ClientGone
        return message

    async def forward(self, route: ProxyRoute, scope: Scope, receive: Receive, send: Send) -> None:
        url = self.upstream_url(route, scope)
        if url is None or framing_conflict(scope["headers"]):
            await respond_json(send, 400, BAD_REQUEST, [(b"connection", b"close")])
            return
        try:
            first = await self._receive(receive)
        except BodyStalled:
            await respond_json(send, 408, _status(408), [(b"connection", b"close")])
            return
        except ClientGone:
            return
        client = str((scope.get("client") or ("unknown",))[0])
        uploading = bool(first.get("more_body", False))
        if uploading:
            if self.uploads.get(client, 0) >= self.max_uploads_per_client:
                log.warning("proxy %s: too many uploads in progress from one client; refused", route.prefix)
                await respond_json(send, 429, _status(429), [(b"connection", b"close")])
                return
            self.uploads[client] = self.uploads.get(client, 0) + 1
        try:
            await self._exchange(route, scope, url, first, receive, send)
        finally:
            if uploading:
                self.uploads[client] -= 1
                if not self.uploads[client]:
                    del self.uploads[client]

    async def _exchange(
        self, route: ProxyRoute, scope: Scope, url: httpx.URL, first: Message, receive: Receive, send: Send
    ) -> None:
        async def body() -> AsyncIterator[bytes]:
            message = first
            while True:
                yield message.get("body", b"")
                if not message.get("more_body", False):
                    return
                message = await self._receive(receive)

        identity = identity_headers(scope)
        if any(_UNSENDABLE.search(value) for _, value in identity):
            # e.g. a certificate CN or O holding CR or LF (CVE-2023-27493's class): no header can carry it
            log.warning("proxy %s: the user's name cannot be sent upstream in a header; refused", route.prefix)
            await respond_json(send, 502, {**_status(502), "reason": "BadGateway", "message": UNSENDABLE_USER})
            return
        headers = forwardable(scope["headers"]) + identity
        request = self.client.build_request(scope["method"], url, headers=headers, content=upstream_body(first, body))
        try:
            response = await self.client.send(request, stream=True)
        except BodyStalled:
            log.warning("proxy %s: request body stalled", route.prefix)
            await respond_json(send, 408, _status(408), [(b"connection", b"close")])
            return
        except ClientGone:
            return
        except httpx.TimeoutException:
            log.warning("proxy %s: upstream timed out", route.prefix)
            await respond_json(send, 504, _status(504))
            return
        except Exception as error:  # any failure to reach the upstream is one line and a 502, never a traceback
            log.warning("proxy %s: upstream unavailable: %s", route.prefix, type(error).__name__)
            await respond_json(send, 502, _status(502))
            return
        if 300 <= response.status_code <= 399 and response.headers.get("location"):
            await response.aclose()
            log.warning("proxy %s: upstream redirect refused", route.prefix)
            await respond_json(send, 502, {**_status(502), "reason": "BadGateway", "message": REDIRECT_REFUSED})
            return
        try:
            headers = [(n, v) for n, v in forwardable(response.headers.raw) if n.lower() not in SERVER_ADDED]
            if response.status_code in NO_BODY_STATUSES:
                headers = [(n, v) for n, v in headers if n.lower() != b"content-length"]
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
