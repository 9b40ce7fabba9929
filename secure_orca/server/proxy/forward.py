r"""Reverse proxy to upstream services (``--proxy PREFIX=URL``), streaming both ways (``proxy.upstream``: h11).

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
import functools
import logging
import re
from collections.abc import AsyncIterator, Callable, Sequence
from urllib.parse import unquote_to_bytes, urlsplit

import httpx

from secure_orca.authn.requestheader import upstream_headers
from secure_orca.authn.user import ANONYMOUS
from secure_orca.credentials.kinds import KeyPair
from secure_orca.orca import polled
from secure_orca.orca.dialect import DIALECT_BYTES, DIALECT_SPELLINGS
from secure_orca.orca.headers import spellings
from secure_orca.server.asgi import NO_BODY_STATUSES, ASGIApp, Message, Receive, Scope, Send, respond, respond_json
from secure_orca.server.authentication import AUTHORIZATION_KEY, FRONT_PROXY_KEY, current_user
from secure_orca.server.http.control import STREAM_CONTROL_KEY
from secure_orca.server.options.backend import ProxyLimits, RouteSettings
from secure_orca.server.proxy.backendload import GRANT_KEY, REPORT_KEY, BackendReports, Grant
from secure_orca.server.proxy.metrics import RouteMetrics
from secure_orca.server.proxy.poller import LoadPoller
from secure_orca.server.proxy.upstream import Response, UpstreamError, UpstreamPool
from secure_orca.server.refusals import error_body
from secure_orca.server.trust import chain_key

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


# The backends' own load endpoints, served by vLLM, SGLang and Triton to anyone (orca.polled.PATHS, and
# Prometheus' /metrics on every one of them): proxied only for a request whose load report the policy granted.
LOAD_PATHS = tuple(sorted({*polled.PATHS.values(), "/metrics"}))
LOAD_ENDPOINT_REFUSED = "the backend's load endpoint is served to entitled load readers only"


def load_endpoint(target: bytes) -> bool:
    """Whether the request target reaches a backend's load endpoint (pure): its path decoded, letter case folded,
    repeated and trailing ``/`` ignored, equal to a LOAD_PATHS entry or below one."""
    path = unquote_to_bytes(target.partition(b"?")[0]).decode("latin-1").lower()
    path = "/" + "/".join(part for part in path.split("/") if part)
    return any(path == load or path.startswith(load + "/") for load in LOAD_PATHS)


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


# kube's max-in-flight filter answers 429 with ``Retry-After: 1`` (k8s.io/apiserver
# 008b3652959ca58af8be3fb5b6ecfe9ae7638282, pkg/server/filters/maxinflight.go, tooManyRequests).
RETRY_AFTER = (b"retry-after", b"1")
IDENTITY_ENCODING = (b"accept-encoding", b"identity")
READY_INTERVAL = 1.0  # seconds: /readyz checks the backends at most this often


def limit_key(scope: Scope) -> tuple[str, str]:
    """Whose in-flight quota a request counts against (pure): an authenticated user's name; for an anonymous
    request, its TLS client certificate's chain (the handshake verified it against the server's anchors: a
    load balancer's load-reader certificate authenticates no user, but it is an identity), else its address."""
    user = current_user(scope)
    if user is not None and user.name != ANONYMOUS:
        return ("user", user.name)
    extensions = scope.get("extensions") or {}
    chain = tuple((extensions.get("tls") or {}).get("client_cert_chain") or ())
    if chain:
        return ("certificate", chain_key(extensions, chain).hex())
    return ("anonymous", str((scope.get("client") or ("unknown",))[0]))


class InFlight:
    """Requests in flight per identity (``limit_key``), each kind bounded by its own limit: a load balancer's
    identity never shares an anonymous client's quota."""

    def __init__(self, per_user: int, anonymous: int) -> None:
        self.limits = {"user": per_user, "certificate": per_user, "anonymous": anonymous}
        self.counts: dict[tuple[str, str], int] = {}

    def acquire(self, key: tuple[str, str]) -> bool:
        held = self.counts.get(key, 0)
        if held >= self.limits[key[0]]:
            return False
        self.counts[key] = held + 1
        return True

    def release(self, key: tuple[str, str]) -> None:
        held = self.counts[key] - 1
        if held:
            self.counts[key] = held
        else:
            del self.counts[key]


# every spelling a backend could read as one of them (CGI and WSGI read ``_`` as ``-``)
_FORWARDED = frozenset().union(
    *(spellings(name) for name in (b"forwarded", b"x-forwarded-for", b"x-forwarded-proto", b"x-forwarded-host"))
)
_NEVER_FORWARDED = _FORWARDED | DIALECT_SPELLINGS  # set by the proxy alone; the dialect only for the entitled


def forwarded_headers(scope: Scope, incoming: Sequence[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """``X-Forwarded-For``, ``X-Forwarded-Proto``, ``X-Forwarded-Host`` and ``Forwarded`` (RFC 7239) for the
    backend (pure). A client's own are dropped; only a verified front proxy's are kept and extended, as Go's
    ReverseProxy extends ``X-Forwarded-For``."""
    address = str((scope.get("client") or ("unknown",))[0])
    host = next((v for n, v in incoming if n.lower() in (b":authority", b"host")), b"")
    node = f'"[{address}]"' if ":" in address else address
    chain = f"for={node};proto=https" + (f";host={host.decode('latin-1')}" if _TOKEN.fullmatch(host) else "")
    xff, forwarded = address, chain
    if scope.get(FRONT_PROXY_KEY):
        earlier = [v.decode("latin-1") for n, v in incoming if n.lower() == b"x-forwarded-for"]
        xff = ", ".join([*earlier, address])
        before = [v.decode("latin-1") for n, v in incoming if n.lower() == b"forwarded"]
        forwarded = ", ".join([*before, chain])
    out = [
        (b"x-forwarded-for", xff.encode("latin-1")),
        (b"x-forwarded-proto", b"https"),
        (b"forwarded", forwarded.encode("latin-1")),
    ]
    if host and _TOKEN.fullmatch(host):
        out.append((b"x-forwarded-host", host))
    return out


_TOKEN = re.compile(rb"[A-Za-z0-9\-._~:\[\]]+")


def upstream_target(base_path: bytes, prefix: str, path: bytes) -> bytes:
    """The path the backend receives (pure): the request's own when the route's URL has no path, else the
    route's URL path in place of the prefix (``/v1=http://h/v1``: ``/v1/models`` stays ``/v1/models``)."""
    if not base_path:
        return path
    rest = path[len(prefix.rstrip("/").encode()) :]
    return base_path + rest if rest.startswith(b"/") or not rest else base_path + b"/" + rest


class _Exchange:
    """One proxied request's state: set when the client left, or when a timeout fired."""

    __slots__ = ("client_gone", "started", "task", "timed_out")

    def __init__(self) -> None:
        self.task = asyncio.current_task()
        self.client_gone = self.timed_out = self.started = False


class ProxyApp:
    """Sends requests under a route's prefix upstream; everything else goes to ``fallback``.

    Every part of a request body must arrive within the route's idle timeout (else 408); each identity has at
    most so many requests in flight (``InFlight``: else 429 with Retry-After). Once the request is sent, a
    client that resets its stream or closes its connection ends the upstream request at once, and so does a
    route's timeout (first byte, between reads, total): a 504 before the response started, else an HTTP/2
    RST_STREAM or a closed HTTP/1.1 connection, never a response that looks complete."""

    def __init__(
        self,
        routes: Sequence[RouteSettings],
        fallback: ASGIApp,
        limits: ProxyLimits | None = None,
        client_cert: KeyPair | None = None,
        reports: BackendReports | None = None,
        require_backends: bool = False,
    ) -> None:
        limits = limits or ProxyLimits()
        self.require_backends = require_backends  # --proxy-readiness=require: /readyz fails while one is down
        self.checked_at, self.last_down = -READY_INTERVAL, list[str]()
        self.routes = sorted(routes, key=lambda r: len(r.prefix), reverse=True)
        self.fallback = fallback
        self.in_flight = InFlight(limits.max_in_flight_per_user, limits.max_in_flight_anonymous)
        self.reports = reports
        self.poller: LoadPoller | None = None
        self.metrics = RouteMetrics()
        tls = httpx.create_ssl_context()  # httpx's default trust (SSL_CERT_FILE when set)
        if client_cert is not None:
            client_cert.load_into(tls)
        self.pools: dict[str, UpstreamPool] = {}
        self.upstreams: dict[str, tuple[str, bytes]] = {}  # prefix -> (URL, its path)
        for route in self.routes:
            pool = UpstreamPool(
                route.upstream, tls, limits.max_connections, limits.max_idle_connections, limits.connect_timeout
            )
            self.pools[route.prefix] = pool
            path = urlsplit(route.upstream).path.rstrip("/").encode()
            self.upstreams[route.prefix] = (route.upstream, path)
            self.metrics.add(route.prefix)

    def route(self, path: str) -> RouteSettings | None:
        for route in self.routes:
            if path == route.prefix or path.startswith(route.prefix.rstrip("/") + "/"):
                return route
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = self.route(scope["path"]) if scope["type"] == "http" else None
        if route is None:
            if self.require_backends and scope.get("path") == "/readyz":
                down = await self.down()
                if down:  # kube's readyz text: one line per failed check, then the verdict
                    lines = "".join(f"[-]backend {prefix} failed: unreachable\n" for prefix in down)
                    body = (lines + "readyz check failed\n").encode()
                    await respond(send, 503, body, [(b"content-type", b"text/plain; charset=utf-8")])
                    return
            await self.fallback(scope, receive, send)
            return
        await self.forward(route, scope, receive, send)

    def upstream_target(self, route: RouteSettings, scope: Scope) -> bytes | None:
        """The request target the route's upstream receives (path and query), or None when they could leave it."""
        path = steered_path(scope.get("raw_path") or b"", route.prefix)
        query = scope.get("query_string") or b""
        if path is None or not _QUERY.fullmatch(query):
            return None
        target = upstream_target(self.upstreams[route.prefix][1], route.prefix, path)
        return target + (b"?" + query if query else b"")

    async def _receive(self, receive: Receive, timeout: float | None) -> Message:
        try:
            async with asyncio.timeout(timeout):
                message = await receive()
        except TimeoutError:
            raise BodyStalled from None
        if message["type"] != "http.request":
            raise ClientGone
        return message

    async def refuse(self, route: RouteSettings, send: Send, code: int, message: str = "", close: bool = False) -> None:
        headers = [RETRY_AFTER] if code == 429 else []
        if close:
            headers.append((b"connection", b"close"))
        self.metrics.refused(route.prefix, code)
        await respond_json(send, code, error_body(route.errors, code, message), headers)

    async def forward(self, route: RouteSettings, scope: Scope, receive: Receive, send: Send) -> None:
        url = self.upstream_target(route, scope)
        if url is None or framing_conflict(scope["headers"]):
            await self.refuse(route, send, 400, close=True)
            return
        if load_endpoint(url) and GRANT_KEY not in scope:
            log.info("proxy %s: a backend load endpoint asked without entitlement; refused", route.prefix)
            await self.refuse(route, send, 403, LOAD_ENDPOINT_REFUSED)
            return
        key = limit_key(scope)
        if not self.in_flight.acquire(key):
            log.warning("proxy %s: too many requests in flight for one %s; refused", route.prefix, key[0])
            await self.refuse(route, send, 429, "too many requests in flight", close=True)
            return
        try:
            try:
                first = await self._receive(receive, route.idle_timeout)
            except BodyStalled:
                await self.refuse(route, send, 408, close=True)
                return
            except ClientGone:
                return
            await self._exchange(route, scope, url, first, receive, send)
        finally:
            self.in_flight.release(key)

    def _headers(self, route: RouteSettings, scope: Scope, entitled: bool) -> list[tuple[bytes, bytes]] | None:
        """The request's headers for the backend, or None when the user cannot be sent in a header."""
        identity = identity_headers(scope)
        if any(_UNSENDABLE.search(value) for _, value in identity):
            return None
        incoming = scope["headers"]
        headers = [(n, v) for n, v in forwardable(incoming) if n.lower() not in _NEVER_FORWARDED]
        if not any(name.lower() == b"accept-encoding" for name, _ in headers):
            headers.append(IDENTITY_ENCODING)  # none of our own: a client that asked for none gets it uncompressed
        headers += forwarded_headers(scope, incoming) + identity
        if route.authorization == "pass" and AUTHORIZATION_KEY in scope:
            headers.append((b"authorization", scope[AUTHORIZATION_KEY]))
        if entitled and route.report != "local":
            headers.append((DIALECT_BYTES, route.backend_format.encode()))
        return headers

    async def _exchange(
        self, route: RouteSettings, scope: Scope, target: bytes, first: Message, receive: Receive, send: Send
    ) -> None:
        state = _Exchange()
        watcher: asyncio.Task[None] | None = None

        def watch() -> None:
            nonlocal watcher
            watcher = asyncio.ensure_future(self._watch(receive, state))

        async def body() -> AsyncIterator[bytes]:
            message = first
            while True:
                yield message.get("body", b"")
                if not message.get("more_body", False):
                    watch()
                    return
                message = await self._receive(receive, route.idle_timeout)

        grant = scope.get(GRANT_KEY)
        headers = self._headers(route, scope, grant is not None)
        if headers is None:
            # e.g. a certificate CN or O holding CR or LF (CVE-2023-27493's class): no header can carry it
            log.warning("proxy %s: the user's name cannot be sent upstream in a header; refused", route.prefix)
            await self.refuse(route, send, 502, UNSENDABLE_USER)
            return
        content = upstream_body(first, body)
        if not first.get("more_body", False):
            watch()
        method = scope["method"].encode("ascii")
        loop = asyncio.get_running_loop()
        started = loop.time()
        total = None if route.total_timeout is None else started + route.total_timeout
        self.metrics.begin(route.prefix)
        status = 0
        try:
            request = (method, target, headers, content)
            status = await self._relay(route, scope, request, send, state, total, grant)
        except asyncio.CancelledError:
            if not state.client_gone or state.task is None:
                raise
            state.task.uncancel()  # our own cancellation: the client left; the upstream request is closed
            status = 499
            log.info("proxy %s: the client left; upstream request ended", route.prefix)
        finally:
            if watcher is not None:
                watcher.cancel()
            self.metrics.end(route.prefix, status, loop.time() - started)

    async def _watch(self, receive: Receive, state: _Exchange) -> None:
        """After the request body: the client's reset, close or deadline (``http.disconnect``) cancels the
        exchange, which closes the upstream request at once."""
        while (await receive())["type"] != "http.disconnect":
            pass
        state.client_gone = True
        if state.task is not None:
            state.task.cancel()

    async def _relay(
        self,
        route: RouteSettings,
        scope: Scope,
        request: tuple[bytes, bytes, list[tuple[bytes, bytes]], bytes | AsyncIterator[bytes] | None],
        send: Send,
        state: _Exchange,
        total: float | None,
        grant: Grant | None,
    ) -> int:
        """Send the request and relay the response; the status relayed (0: none)."""
        loop = asyncio.get_running_loop()
        deadline = _earliest(total, route.first_byte_timeout, loop.time())
        try:
            async with asyncio.timeout_at(deadline):
                response: Response = await self.pools[route.prefix].request(*request)
        except BodyStalled:
            log.warning("proxy %s: request body stalled", route.prefix)
            await self.refuse(route, send, 408, close=True)
            return 408
        except ClientGone:
            state.client_gone = True
            return 499
        except TimeoutError:
            log.warning("proxy %s: upstream timed out before its response", route.prefix)
            self.metrics.upstream_error(route.prefix, "timeout")
            await self.refuse(route, send, 504, "the backend did not answer in time")
            return 504
        except UpstreamError as error:  # any failure to reach the upstream is one line and a 502, never a traceback
            log.warning("proxy %s: upstream unavailable: %s", route.prefix, error)
            self.metrics.upstream_error(route.prefix, error.kind)
            await self.refuse(route, send, 502, "the backend is unavailable")
            return 502
        try:
            status = response.status
            if 300 <= status <= 399 and any(n.lower() == b"location" for n, _ in response.headers):
                log.warning("proxy %s: upstream redirect refused", route.prefix)
                await self.refuse(route, send, 502, REDIRECT_REFUSED)
                return 502
            headers = [(n, v) for n, v in forwardable(response.headers) if n.lower() not in SERVER_ADDED]
            if status in NO_BODY_STATUSES:
                headers = [(n, v) for n, v in headers if n.lower() != b"content-length"]
            start: Message = {"type": "http.response.start", "status": status, "headers": headers}
            if grant is not None and route.report != "local" and self.reports is not None:
                carried = self.reports.carried(route.report, grant.format, response.headers, route.utilization_metric)
                if carried is not None or route.report == "backend":  # no backend report: none (merged: ours)
                    start[REPORT_KEY] = carried
            state.started = True
            await send(start)
            idle = route.idle_timeout
            timer = asyncio.timeout_at(_earliest(total, idle, loop.time()))
            async with timer:
                async for chunk in response.chunks():
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                    if idle is not None:
                        timer.reschedule(_earliest(total, idle, loop.time()))
            await send({"type": "http.response.body", "body": b""})
        except TimeoutError:
            log.warning("proxy %s: upstream timed out mid-response; stream ended", route.prefix)
            self.metrics.upstream_error(route.prefix, "timeout")
            await _abort(scope)
        except UpstreamError as error:
            log.warning("proxy %s: upstream broke mid-response: %s", route.prefix, error)
            self.metrics.upstream_error(route.prefix, "broken")
            await _abort(scope)
        finally:
            await response.aclose()
        return status

    async def down(self) -> list[str]:
        """The prefixes whose backend cannot be reached (a TCP connection, then closed), checked at most once a
        second however often /readyz is asked (an anonymous client cannot make the gateway dial out faster)."""
        now = asyncio.get_running_loop().time()
        if now - self.checked_at < READY_INTERVAL:
            return self.last_down
        self.checked_at = now
        down = []
        for prefix, pool in self.pools.items():
            try:
                async with asyncio.timeout(1.0):
                    _, writer = await asyncio.open_connection(pool.origin.host, pool.origin.port)
                writer.close()
            except (OSError, TimeoutError):
                down.append(prefix)
        self.last_down = down
        return down

    def load_poller(self, period: float) -> LoadPoller | None:
        """The poller of the route with ``load-poll`` (at most one: options.backend), every ``period``."""
        route = next((route for route in self.routes if route.load_poll), None)
        if route is None or self.reports is None:
            return None
        timeout = min(self.reports.max_age, max(period, 1.0))
        told = functools.partial(self.metrics.polled, route.prefix)
        self.poller = LoadPoller(self.pools[route.prefix], route.load_poll, self.reports, period, timeout, told)
        return self.poller

    async def aclose(self) -> None:
        if self.poller is not None:
            await self.poller.aclose()
        for pool in self.pools.values():
            await pool.aclose()


def _earliest(total: float | None, span: float | None, now: float) -> float | None:
    """The earlier of an absolute deadline and ``now + span`` (None: neither is set)."""
    if span is None:
        return total
    return now + span if total is None else min(total, now + span)


async def _abort(scope: Scope) -> None:
    """End a response that cannot be completed so that it never looks complete: HTTP/2 resets the stream
    (RST_STREAM CANCEL); for HTTP/1.1, returning without the last chunk makes the server close the connection."""
    if scope.get("http_version") == "2":
        control = (scope.get("extensions") or {}).get(STREAM_CONTROL_KEY)
        if control is not None:
            await control.reset(scope)
