"""ASGI middleware: the only place a load report enters a response.

For every HTTP request it removes the opt-in header before the application (or a proxied backend) sees it,
removes ``endpoint-load-metrics`` and ``endpoint-load-metrics-bin`` from whatever the application returns
(headers and trailers), and appends the sampler's cached header tuple only when the feature is on and the
policy grants it. The client identity comes from the ASGI TLS extension, ``scope["extensions"]["tls"]``.
"""

from __future__ import annotations

import datetime as dt
import hmac
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

from cryptography import x509

from secure_orca.authz.frontproxy import NO_CERTIFICATE, FrontProxyResult, FrontProxyVerifier
from secure_orca.authz.policy import DECISIONS, Decision, Policy
from secure_orca.authz.reasons import Reason
from secure_orca.orca.headers import OPTIN_BYTES as OPTIN
from secure_orca.orca.headers import ORCA_HEADERS_BYTES as _ORCA
from secure_orca.server.sampler import Sampler

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

FEATURE_OFF = DECISIONS[Reason.FEATURE_OFF]
NO_OPT_IN = DECISIONS[Reason.NO_OPT_IN]
_CACHE_SIZE = 4096
CONNECTION_KEY = "secure_orca.connection"  # scope["extensions"] key of the per-connection ConnectionMemo
ATTACH_MODES = ("every-response", "once-per-sample")


class ConnectionMemo:
    """Per-connection memory (the server puts one in every request scope of a connection).

    ``last``: the report tuple last attached on it, so ``once-per-sample`` can skip repeats that HPACK would
    still pay for. The other fields remember the last opt-in decision, so a load balancer's connection pays for
    its chain lookup, opt-in parse and secret hash once, not on every request: the decision is reused only
    under the same Authority (a credential reload replaces it), for the same single opt-in value (compared in
    constant time), and while the front-proxy certificate's validity at the current time is what it was.
    """

    __slots__ = ("authority", "decision", "held", "identity", "last", "optin", "valid_from", "valid_until")

    def __init__(self) -> None:
        self.last: tuple[bytes, bytes] | None = None
        self.authority: Authority | None = None  # under which the fields below were computed
        self.identity: FrontProxyResult = NO_CERTIFICATE
        self.valid_from = 1  # microseconds since the epoch in which identity holds; empty when it never does
        self.valid_until = 0
        self.optin: bytes | None = None  # the single opt-in value ``decision`` was made for
        self.held = False
        self.decision = NO_OPT_IN

    def remember(self, authority: Authority, identity: FrontProxyResult) -> None:
        """The connection's front-proxy identity under ``authority`` (forgets the last decision)."""
        self.authority, self.identity, self.optin = authority, identity, None
        if identity.ok and identity.valid_from is not None and identity.valid_until is not None:
            self.valid_from, self.valid_until = microseconds(identity.valid_from), microseconds(identity.valid_until)
        else:
            self.valid_from, self.valid_until = 1, 0


EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_MICROSECOND = dt.timedelta(microseconds=1)


def microseconds(moment: dt.datetime) -> int:
    """An aware datetime as whole microseconds since the epoch (exact, unlike a float timestamp)."""
    return (moment - EPOCH) // _MICROSECOND


def now_us() -> int:
    """The current time in microseconds since the epoch, the resolution of datetime."""
    return time.time_ns() // 1000


def at(us: int) -> dt.datetime:
    """Microseconds since the epoch as an aware datetime (the inverse of ``microseconds``)."""
    return EPOCH + us * _MICROSECOND


def strip_orca(headers: list[tuple[bytes, bytes]]) -> tuple[list[tuple[bytes, bytes]], int]:
    """Headers without ORCA fields (names compared case-insensitively), and how many were removed."""
    kept = [h for h in headers if h[0].lower() not in _ORCA]
    return kept, len(headers) - len(kept)


class ChainCache:
    """Front-proxy results keyed by the presented chain (PEM strings), so a chain is verified at most once
    per connection however many requests it carries. Bound to one verifier: new CAs mean a new cache."""

    def __init__(self, verifier: FrontProxyVerifier) -> None:
        self.verifier = verifier
        self._results: dict[tuple[str, ...], FrontProxyResult] = {}

    def lookup(self, chain: tuple[str, ...], now: dt.datetime) -> FrontProxyResult:
        result = self._results.get(chain)
        if result is None:
            try:
                certs = [x509.load_pem_x509_certificate(pem.encode()) for pem in chain]
            except ValueError:
                result = FrontProxyResult(False, Reason.UNTRUSTED_CA)
            else:
                result = self.verifier.verify(certs, now)
            if len(self._results) >= _CACHE_SIZE:
                self._results.pop(next(iter(self._results)))
            self._results[chain] = result
        return result


@dataclass(frozen=True)
class Authority:
    """The policy and the front-proxy trust in force; replaced whole when credentials are reloaded."""

    policy: Policy
    chains: ChainCache | None = None

    @classmethod
    def build(cls, policy: Policy, verifier: FrontProxyVerifier | None) -> Authority:
        return cls(policy, ChainCache(verifier) if verifier is not None else None)


class LoadReportMiddleware:
    """Wraps an ASGI app; ``enabled`` is the feature gate AND --enable-endpoint-load-metrics.

    ``on_decision`` is called for every request that carries the opt-in (never for the others), and
    ``on_stripped`` with the number of ORCA headers removed from an application's response.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        enabled: bool,
        authority: Authority,
        sampler: Sampler,
        on_decision: Callable[[Decision], None] | None = None,
        on_stripped: Callable[[int], None] | None = None,
        attach: str = "every-response",
    ) -> None:
        if attach not in ATTACH_MODES:
            raise ValueError(f"attach mode must be one of {ATTACH_MODES}")
        self.once_per_sample = attach == "once-per-sample"
        self.app = app
        self.enabled = enabled
        self.authority = authority
        self.sampler = sampler
        self.on_decision = on_decision
        self.on_stripped = on_stripped

    def decide(self, scope: Scope, optin_values: list[bytes]) -> Decision:
        if not self.enabled:
            return FEATURE_OFF
        authority = self.authority  # one read: a reload swaps policy and trust together
        extensions = scope.get("extensions") or {}
        memo: ConnectionMemo | None = extensions.get(CONNECTION_KEY)
        if memo is None:
            now = now_us()
            return authority.policy.decide(optin_values, self.identify(extensions, authority, now), at(now))
        if memo.authority is not authority:
            memo.remember(authority, self.identify(extensions, authority, now_us()))
        # Only a certificate that holds at some time makes the decision depend on the clock.
        now = now_us() if memo.valid_from <= memo.valid_until else 0
        held = memo.valid_from <= now <= memo.valid_until  # exactly FrontProxyResult.holds_at, in microseconds
        single = len(optin_values) == 1
        if single and held is memo.held and memo.optin is not None and hmac.compare_digest(optin_values[0], memo.optin):
            return memo.decision
        decision = authority.policy.decide(optin_values, memo.identity, at(now or now_us()))
        if single:
            memo.optin, memo.held, memo.decision = optin_values[0], held, decision
        return decision

    @staticmethod
    def identify(extensions: Scope, authority: Authority, now: int) -> FrontProxyResult:
        """The front-proxy result for the connection's presented chain (verified once per distinct chain)."""
        tls = extensions.get("tls") or {}
        chain = tls.get("client_cert_chain")
        if not chain or authority.chains is None:
            return NO_CERTIFICATE
        return authority.chains.lookup(tuple(chain), at(now))

    def _fresh(self, scope: Scope, header: tuple[bytes, bytes]) -> bool:
        """In once-per-sample mode, whether this connection has not had this sample yet (and now has)."""
        memo = scope.get("extensions", {}).get(CONNECTION_KEY)
        if memo is None:
            return True
        if memo.last is header:
            return False
        memo.last = header
        return True

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = scope["headers"]
        optin_values = [value for name, value in headers if name.lower() == OPTIN]
        if optin_values:
            scope = dict(scope, headers=[h for h in headers if h[0].lower() != OPTIN])
        granted = NO_OPT_IN
        if optin_values:
            granted = self.decide(scope, optin_values)
            if self.on_decision is not None:
                self.on_decision(granted)
        counters = self.sampler.counters
        counters.in_flight += 1

        async def send_filtered(message: Message) -> None:
            kind = message["type"]
            if kind == "http.response.start" or kind == "http.response.trailers":
                headers = message.get("headers", ())
                attach = None
                if kind == "http.response.start":
                    status = message["status"]
                    if status == 429 or status >= 500:
                        counters.errors += 1
                    header = self.sampler.header
                    once = self.once_per_sample
                    if granted.attach and header is not None and (not once or self._fresh(scope, header)):
                        attach = header
                if any(name.lower() in _ORCA for name, _ in headers):  # the same scan with the feature off
                    kept, removed = strip_orca(list(headers))
                    if self.on_stripped is not None:
                        self.on_stripped(removed)
                    if attach is not None:
                        kept.append(attach)
                    message = dict(message, headers=kept)
                elif attach is not None:
                    message = dict(message, headers=[*headers, attach])
            await send(message)

        try:
            await self.app(scope, receive, send_filtered)
        finally:
            counters.in_flight -= 1
            counters.requests += 1
