"""ASGI middleware: the only place a load report enters a response.

For every HTTP request it removes the opt-in header before the application (or a proxied backend) sees it,
removes ``endpoint-load-metrics`` and ``endpoint-load-metrics-bin`` from whatever the application returns
(headers and trailers), and puts the sampler's cached header tuple first among the response's headers only
when the feature is on and the policy grants it (first, so the server's HTTP/2 connection finds it at once:
``http.connection.GatewayH2Connection``). The client identity comes from the ASGI TLS extension,
``scope["extensions"]["tls"]``.
"""

from __future__ import annotations

from collections.abc import Callable

from secure_orca.authz.authority import Authority
from secure_orca.authz.memo import ConnectionMemo, at
from secure_orca.authz.policy import DECISIONS, Decision
from secure_orca.authz.reasons import Reason
from secure_orca.orca import optin
from secure_orca.orca.headers import OPTIN_BYTES as OPTIN
from secure_orca.orca.headers import OPTIN_SPELLINGS as _OPTIN_SPELLINGS
from secure_orca.orca.headers import ORCA_HEADERS_BYTES as _ORCA
from secure_orca.orca.headers import spellings
from secure_orca.server.asgi import ASGIApp, Message, Receive, Scope, Send
from secure_orca.server.audit.log import AUDIT_KEY
from secure_orca.server.proxy.backendload import GRANT_KEY, REPORT_KEY, TEXT_GRANT, Grant
from secure_orca.server.sampler import Sampler
from secure_orca.server.trust import CONNECTION_KEY, TrustService, now_us, peer

FEATURE_OFF = DECISIONS[Reason.FEATURE_OFF]
NO_OPT_IN = DECISIONS[Reason.NO_OPT_IN]
ATTACH_MODES = ("every-response", "once-per-sample")


_ORCA_SPELLINGS = frozenset().union(*(spellings(name) for name in _ORCA))
GRANTS = {fmt: TEXT_GRANT if fmt == "TEXT" else Grant(fmt) for fmt in optin.SUPPORTED_FORMATS}
_BY_FIRST_BYTE = {fmt.encode()[0]: grant for fmt, grant in GRANTS.items()}  # T, J, B: one format each


def grant_of(optin_values: list[bytes]) -> Grant:
    """The format a granted opt-in asked for (only an opt-in that parsed is ever granted, so its first byte names
    its format unless it starts with blanks): a dictionary lookup per request, no parsing."""
    grant = _BY_FIRST_BYTE.get(optin_values[0][0])
    return grant if grant is not None else GRANTS[optin.format_of(optin_values)]


def strip_orca(headers: list[tuple[bytes, bytes]]) -> tuple[list[tuple[bytes, bytes]], int]:
    """Headers without ORCA fields (names compared case-insensitively, ``_`` read as ``-``), and how many
    were removed."""
    kept = [h for h in headers if h[0].lower() not in _ORCA_SPELLINGS]
    return kept, len(headers) - len(kept)


class LoadReportMiddleware:
    """Wraps an ASGI app; ``enabled`` is the feature gate AND --enable-endpoint-load-metrics.

    ``on_decision`` is called for every request that carries the opt-in (never for the others), and
    ``on_stripped`` with the number of ORCA headers removed from an application's response. ``trust`` holds
    the Authority in force (a reload replaces it there) and verifies client chains off the loop.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        enabled: bool,
        trust: TrustService,
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
        self.trust = trust
        self.sampler = sampler
        self.on_decision = on_decision
        self.on_stripped = on_stripped

    @property
    def authority(self) -> Authority:
        """The Authority in force (the trust service's)."""
        return self.trust.authority

    def decide(self, scope: Scope, optin_values: list[bytes]) -> Decision:
        if not self.enabled:
            return FEATURE_OFF
        authority = self.trust.authority  # one read: a reload swaps policy and trust together
        extensions = scope.get("extensions") or {}
        memo: ConnectionMemo | None = extensions.get(CONNECTION_KEY)
        if memo is None:
            now = now_us()
            checks = self.trust.identify(extensions, authority, now, peer(scope))
            return authority.policy.decide(optin_values, checks.identity, at(now), checks.reader)
        now = memo.moment(now_us)  # this is every request's path: the clock only when a check depends on it
        remembered = memo.decision_for(authority, optin_values, now)
        if remembered is not None:
            return remembered
        if memo.stale(authority, now):
            memo.remember(authority, self.trust.identify(extensions, authority, now or now_us(), peer(scope)))
            now = memo.moment(now_us)  # only a check that holds (or may start to) reads the clock
        decision = authority.policy.decide(optin_values, memo.identity, at(now or now_us()), memo.reader)
        return memo.record(optin_values, decision, now)

    async def _verify_chain(self, scope: Scope, memo: ConnectionMemo) -> None:
        """Once per connection and authority: its chain verified off the loop (streams of the connection that
        arrive meanwhile wait for the same verification)."""
        authority = self.trust.authority
        await self.trust.verify((authority.chains, authority.readers), scope["extensions"], peer(scope))
        memo.verified_under(authority)

    def _fresh(self, scope: Scope, header: tuple[bytes, bytes]) -> bool:
        """In once-per-sample mode, whether this connection has not had this sample yet (and now has)."""
        memo: ConnectionMemo | None = scope.get("extensions", {}).get(CONNECTION_KEY)
        return memo is None or memo.fresh(header)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        memo = (scope.get("extensions") or {}).get(CONNECTION_KEY)
        if memo is not None and memo.unverified(self.trust.authority, now_us):
            await self._verify_chain(scope, memo)  # once per connection and authority, and when time may change it
        headers = scope["headers"]
        found = [(name.lower(), value) for name, value in headers if name.lower() in _OPTIN_SPELLINGS]
        optin_values = [value for name, value in found if name == OPTIN]  # other spellings never opt in
        if found:  # ... and no spelling ever reaches the application
            scope = dict(scope, headers=[h for h in headers if h[0].lower() not in _OPTIN_SPELLINGS])
        granted, grant = NO_OPT_IN, TEXT_GRANT
        if optin_values:
            granted = self.decide(scope, optin_values)
            if self.on_decision is not None:
                self.on_decision(granted)
            if AUDIT_KEY in scope:  # the audit event's annotation (server.audit)
                scope[AUDIT_KEY].decision = granted.reason
            if granted.attach:  # a proxied route may carry its backend's report instead (server.proxy.backendload)
                # the first byte of a granted opt-in names its format (grant_of, inlined: this runs per request)
                grant = _BY_FIRST_BYTE.get(optin_values[0][0]) or grant_of(optin_values)
                scope[GRANT_KEY] = grant
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
                    # a backend-sourced route: its report (in the caller's format) or none
                    if grant is TEXT_GRANT:
                        header = message.get(REPORT_KEY, self.sampler.header)
                    else:
                        header = message[REPORT_KEY] if REPORT_KEY in message else self.sampler.header_in(grant.format)
                    once = self.once_per_sample
                    if granted.attach and header is not None and (not once or self._fresh(scope, header)):
                        attach = header
                if any(name.lower() in _ORCA_SPELLINGS for name, _ in headers):  # the same scan when off
                    kept, removed = strip_orca(list(headers))
                    if self.on_stripped is not None:
                        self.on_stripped(removed)
                    message = dict(message, headers=kept if attach is None else [attach, *kept])
                elif attach is not None:  # first: the server's HTTP/2 connection finds it there (send_headers)
                    message = dict(message, headers=[attach, *headers])
            await send(message)

        try:
            await self.app(scope, receive, send_filtered)
        finally:
            counters.in_flight -= 1
            counters.requests += 1
