"""ASGI authentication layer (thin shell over ``secure_orca.authn``): runs before the application.

A load-reader certificate (--endpoint-load-metrics-client-ca-file) authenticates nothing: the request goes on as
if it had no certificate (a token in it still counts; otherwise anonymous).

For every HTTP request it checks the connection's certificate with the same cached verifiers that grant load
reports (requestheader CA and allowed names; --client-ca-file), runs kube-apiserver's authenticator chain,
and then either answers 401 with kube's Status body (OpenAI's error object on an ``errors=openai`` route), or
passes the request on with every identity header removed (all configured and standard ``X-Remote-*`` names and
prefixes in any case, duplicates, and ``Authorization``) and the authenticated user in ``scope[USER_KEY]``. It
never reads the request body.
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from cryptography import x509

from secure_orca.authn.authenticator import Authenticator, Outcome, Request
from secure_orca.authn.requestheader import STANDARD, IdentityHeaders, RequestHeaderConfig
from secure_orca.authn.review import UNAUTHORIZED_STATUS
from secure_orca.authn.tokenfile import TokenFile
from secure_orca.authn.union import chain
from secure_orca.authn.user import ANONYMOUS, UserInfo
from secure_orca.server.asgi import ASGIApp, Receive, Scope, Send, respond_json
from secure_orca.server.refusals import KUBE_ONLY, RouteDialects, error_body
from secure_orca.server.trust import TrustService, chain_key, peer
from secure_orca.x509.cache import ChainCache
from secure_orca.x509.chainverifier import NO_CERTIFICATE, ChainResult

log = logging.getLogger("secure_orca.authn")
USER_KEY = "secure_orca.user"  # scope key of the authenticated UserInfo
AUTHORIZATION_KEY = "secure_orca.authorization"  # scope key: the removed Authorization, for authorization=pass
FRONT_PROXY_KEY = "secure_orca.front_proxy"  # scope key: True when a verified front proxy sent the request
_AUTHORIZATION = b"authorization"
Observer = Callable[[Scope, Request, Outcome, float], None]  # each authentication, with its perf_counter start


@dataclass(frozen=True)
class AuthenticationConfig:
    """The configured authenticators (kube's flags); ``requestheader`` is None without a requestheader CA."""

    requestheader: RequestHeaderConfig | None = None
    header_names: RequestHeaderConfig = STANDARD  # the --requestheader-* lists as given
    client_certs: bool = False
    tokens: TokenFile | None = None
    anonymous: bool = True
    proxy_without_user_is_anonymous: bool = False  # --requestheader-missing-user=anonymous (not kube)

    def authenticator(self) -> Authenticator:
        return chain(
            requestheader_config=self.requestheader,
            client_certs=self.client_certs,
            tokens=self.tokens,
            anonymous_auth=self.anonymous,
            proxy_without_user_is_anonymous=self.proxy_without_user_is_anonymous,
        )


@functools.lru_cache(maxsize=1024)
def _leaf(pem: str) -> x509.Certificate | None:
    try:
        return x509.load_pem_x509_certificate(pem.encode())
    except (ValueError, x509.InvalidVersion):  # unreadable: treated as no certificate (Go's TLS would refuse it)
        return None


def current_user(scope: Scope) -> UserInfo | None:
    user = scope.get(USER_KEY)
    return user if isinstance(user, UserInfo) else None


def is_authenticated(scope: Scope) -> bool:
    """Whether the request's user is someone (not ``system:anonymous``, not unauthenticated)."""
    user = current_user(scope)
    return user is not None and user.name != ANONYMOUS


class AuthenticationMiddleware:
    """Authenticate every HTTP request; ``trust`` holds the requestheader and load-reader chain caches in force
    (its Authority, replaced whole on a credential reload) and the --client-ca-file one (``clients``)."""

    def __init__(
        self,
        app: ASGIApp,
        config: AuthenticationConfig,
        trust: TrustService,
        on_failure: Callable[[str], None] | None = None,
        observe: Observer | None = None,
        errors: RouteDialects = KUBE_ONLY,
    ) -> None:
        self.app = app
        self.errors = errors  # a route's dialect for the 401 (errors=openai: OpenAI's error object)
        self.authenticate = config.authenticator()
        self.identity = IdentityHeaders([STANDARD, config.header_names])
        self.trust = trust
        self.on_failure = on_failure
        self.observe = observe

    def _caches(self) -> tuple[ChainCache | None, ChainCache | None, ChainCache | None]:
        """The load-reader, front-proxy and client-CA caches in force: read once per request."""
        authority = self.trust.authority
        return authority.readers, authority.chains, self.trust.clients

    def request(self, scope: Scope) -> Request:
        readers, front_proxy, clients = self._caches()
        now = dt.datetime.now(dt.UTC)
        extensions = scope.get("extensions") or {}
        tls = extensions.get("tls") or {}
        chain = tuple(tls.get("client_cert_chain") or ())
        leaf = _leaf(chain[0]) if chain else None
        if leaf is None:
            return Request(scope["headers"], now)
        key = chain_key(extensions, chain)  # hashed once per connection, shared with the load-report layer

        def check(cache: ChainCache | None) -> ChainResult:
            return cache.lookup(chain, now, key, peer(scope)) if cache is not None else NO_CERTIFICATE

        if check(readers).holds_at(now):
            # a load reader's certificate: it may read load reports and asserts nothing (option 2b)
            return Request(scope["headers"], now)
        return Request(scope["headers"], now, leaf, check(front_proxy), check(clients))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        extensions, caches, address = scope.get("extensions") or {}, self._caches(), peer(scope)
        if self.trust.stale(caches, extensions, address):  # verified off the loop; request() only looks up
            await self.trust.verify(caches, extensions, address)
        started = time.perf_counter() if self.observe is not None else 0.0
        request = self.request(scope)
        outcome = self.authenticate(request)
        if self.observe is not None:  # metrics and audit (server.assembly wires them)
            self.observe(scope, request, outcome, started)
        if outcome.user is None:
            reason = outcome.error or "no authenticator accepted the request"
            log.info("unable to authenticate the request: %s", reason)
            if self.on_failure is not None:
                self.on_failure(reason)
            dialect = self.errors.of(scope.get("path", ""))
            body = UNAUTHORIZED_STATUS if dialect == "kube" else error_body(dialect, 401, "Unauthorized")
            await respond_json(send, 401, body)
            return
        kept, _ = self.identity.strip(scope["headers"])
        inner = {**scope, USER_KEY: outcome.user}
        authorization = [value for name, value in kept if name.lower() == _AUTHORIZATION]
        if authorization:  # kept aside, never a header: only a route with authorization=pass sends it on
            kept = [(name, value) for name, value in kept if name.lower() != _AUTHORIZATION]
            if len(authorization) == 1:
                inner[AUTHORIZATION_KEY] = authorization[0]
        if request.front_proxy.holds_at(request.now):
            inner[FRONT_PROXY_KEY] = True
        inner["headers"] = kept
        await self.app(inner, receive, send)
