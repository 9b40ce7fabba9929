"""ASGI middleware: the only place a load report enters a response.

For every HTTP request it removes the opt-in header before the application (or a proxied backend) sees it,
removes ``endpoint-load-metrics`` and ``endpoint-load-metrics-bin`` from whatever the application returns
(headers and trailers), and puts the sampler's cached header tuple first among the response's headers only
when the feature is on and the policy grants it (first, so the server's HTTP/2 adapter finds it at once:
``adapter.encode_headers``). The client identity comes from the ASGI TLS extension, ``scope["extensions"]["tls"]``.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hmac
import itertools
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from secure_orca.authz.memo import FOREVER, Checks, ConnectionMemo, at, microseconds
from secure_orca.authz.policy import DECISIONS, Decision, Mode, Policy
from secure_orca.authz.reasons import Reason
from secure_orca.authz.secrets import SecretSet
from secure_orca.credentials.loader import Material
from secure_orca.orca.headers import OPTIN_BYTES as OPTIN
from secure_orca.orca.headers import ORCA_HEADERS_BYTES as _ORCA
from secure_orca.server.asgi import ASGIApp, Message, Receive, Scope, Send
from secure_orca.server.audit import AUDIT_KEY
from secure_orca.server.sampler import Sampler
from secure_orca.x509.cache import NEVER, Cached, ChainCache
from secure_orca.x509.chainverifier import NO_CERTIFICATE, ChainVerifier

FEATURE_OFF = DECISIONS[Reason.FEATURE_OFF]
NO_OPT_IN = DECISIONS[Reason.NO_OPT_IN]
CONNECTION_KEY = "secure_orca.connection"  # scope["extensions"] key of the per-connection ConnectionMemo
ATTACH_MODES = ("every-response", "once-per-sample")


def chain_key(extensions: Scope, chain: Sequence[str]) -> bytes:
    """``ChainCache.key`` of the connection's client chain, hashed once per connection (the memo keeps it)."""
    memo = extensions.get(CONNECTION_KEY)
    key = memo.chain_key if memo is not None else None
    if key is None:
        key = ChainCache.key(tuple(chain))
        if memo is not None:
            memo.chain_key = key
    return key


_VERIFYING = threading.Lock()  # one chain verification at a time, in a worker thread: never on the event loop
_IN_FLIGHT: dict[tuple[int, bytes], asyncio.Future[Cached]] = {}  # (cache, chain key) being verified


def peer(scope: Scope) -> str | None:
    """The client's address (``scope["client"]``'s host): the key of its signature budget (``x509.budget``)."""
    client = scope.get("client")
    return str(client[0]) if client else None


def _compute(cache: ChainCache, chain: tuple[str, ...], now: dt.datetime, address: str | None) -> Cached:
    with _VERIFYING:
        return cache.compute(chain, now, address)


async def _fill(cache: ChainCache, key: bytes, chain: tuple[str, ...], now: dt.datetime, address: str | None) -> None:
    """Verify in a worker thread and store; connections presenting the same chain meanwhile wait for it."""
    slot = (id(cache), key)
    pending = _IN_FLIGHT.get(slot)
    if pending is not None:
        await pending
        return
    pending = asyncio.ensure_future(asyncio.to_thread(_compute, cache, chain, now, address))
    _IN_FLIGHT[slot] = pending
    try:
        cache.store(key, await pending)
    finally:
        _IN_FLIGHT.pop(slot, None)


def stale(caches: Iterable[ChainCache | None], extensions: Scope, chain: tuple[str, ...]) -> bool:
    """Whether a lookup of this connection's chain now would verify in any of ``caches``: the common case, a
    chain already verified, costs a dictionary lookup per trust and no task."""
    key = chain_key(extensions, chain)
    now = at(now_us())
    return any(cache is not None and not cache.fresh(key, now) for cache in caches)


async def fill_off_loop(
    caches: Iterable[ChainCache | None], extensions: Scope, chain: tuple[str, ...], address: str | None = None
) -> None:
    """Fill each cache (None: that trust is not configured) for this connection's chain in a worker thread, so
    the lookups that follow find it and the event loop keeps serving other connections meanwhile. ``address``
    is the client's: its signature work is bounded over time (``x509.budget``)."""
    key = chain_key(extensions, chain)
    now = at(now_us())  # the clock decide() reads
    for cache in caches:
        if cache is not None and not cache.fresh(key, now):
            await _fill(cache, key, chain, now, address)


async def verify_off_loop(
    authority: Authority, extensions: Scope, chain: tuple[str, ...], address: str | None = None
) -> None:
    """The authority's front-proxy and load-reader caches, filled off the loop (``fill_off_loop``)."""
    await fill_off_loop((authority.chains, authority.readers), extensions, chain, address)


def now_us() -> int:
    """The current time in microseconds since the epoch, the resolution of datetime."""
    return time.time_ns() // 1000


def spellings(name: bytes) -> frozenset[bytes]:
    """``name`` with each ``-`` kept or written ``_``: how a server that maps ``_`` to ``-`` (CGI, WSGI, some
    proxies) could read a header. Precomputed, so the request path pays one set lookup per header."""
    parts = name.split(b"-")
    return frozenset(
        parts[0] + b"".join(sep + part for sep, part in zip(seps, parts[1:], strict=True))
        for seps in itertools.product((b"-", b"_"), repeat=len(parts) - 1)
    )


_OPTIN_SPELLINGS = spellings(OPTIN)
_ORCA_SPELLINGS = frozenset().union(*(spellings(name) for name in _ORCA))


def strip_orca(headers: list[tuple[bytes, bytes]]) -> tuple[list[tuple[bytes, bytes]], int]:
    """Headers without ORCA fields (names compared case-insensitively, ``_`` read as ``-``), and how many
    were removed."""
    kept = [h for h in headers if h[0].lower() not in _ORCA_SPELLINGS]
    return kept, len(headers) - len(kept)


@dataclass(frozen=True)
class Authority:
    """The policy and the front-proxy trust in force; replaced whole when credentials are reloaded."""

    policy: Policy
    chains: ChainCache | None = None
    readers: ChainCache | None = None  # the load-reader trust (option 2b): reports only, never an identity

    @classmethod
    def build(cls, policy: Policy, verifier: ChainVerifier | None, reader: ChainVerifier | None = None) -> Authority:
        return cls(
            policy,
            ChainCache(verifier) if verifier is not None else None,
            ChainCache(reader) if reader is not None else None,
        )

    @classmethod
    def from_material(cls, material: Material, modes: frozenset[Mode]) -> Authority:
        """The trust the credential files grant: the one builder for start-up and every reload."""
        policy = Policy(modes, SecretSet(material.secrets) if material.secrets else None)
        cas, readers = material.requestheader_cas, material.reader_cas
        verifier = ChainVerifier(cas, material.allowed_names) if cas else None
        reader = ChainVerifier(readers, material.reader_names) if readers else None
        return cls.build(policy, verifier, reader)


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
            checks = self.identify(extensions, authority, now, peer(scope))
            return authority.policy.decide(optin_values, checks.identity, at(now), checks.reader)
        now = time.time_ns() // 1000 if memo.timed else 0  # now_us(), inline: this is every request's path
        if (
            memo.authority is authority
            and memo.since <= now <= memo.until  # never reaches memo.recheck (``steady``)
            and len(optin_values) == 1
            and hmac.compare_digest(optin_values[0], memo.optin)
        ):
            return memo.decision
        if memo.authority is not authority or now >= memo.recheck:
            memo.remember(authority, self.identify(extensions, authority, now or now_us(), peer(scope)))
            now = now_us() if memo.timed else 0  # only a check that holds (or may start to) reads the clock
        decision = authority.policy.decide(optin_values, memo.identity, at(now or now_us()), memo.reader)
        if len(optin_values) == 1:
            memo.optin, memo.decision = optin_values[0], decision
            memo.since, memo.until = memo.steady(now)
        return decision

    @staticmethod
    def identify(extensions: Scope, authority: Authority, now: int, address: str | None = None) -> Checks:
        """The connection's presented chain checked against the front-proxy and the load-reader trust (each
        verified once per distinct chain)."""
        tls = extensions.get("tls") or {}
        chain = tls.get("client_cert_chain")
        if not chain or (authority.chains is None and authority.readers is None):
            return Checks()
        key = chain_key(extensions, chain)
        when = at(now)
        identity = reader = NO_CERTIFICATE
        recheck = NEVER
        for cache in (authority.chains, authority.readers):
            if cache is None:
                continue
            result, until = cache.lookup_until(tuple(chain), when, key, address)
            recheck = min(recheck, until)
            if cache is authority.chains:
                identity = result
            else:
                reader = result
        return Checks(identity, reader, microseconds(recheck) if recheck < NEVER else 2**63)

    async def _verify_chain(self, extensions: Scope, memo: ConnectionMemo, address: str | None) -> None:
        """Once per connection and authority: its chain verified off the loop (streams of the connection that
        arrive meanwhile wait for the same task)."""
        authority = self.authority
        chain = tuple((extensions.get("tls") or {}).get("client_cert_chain") or ())
        if chain and stale((authority.chains, authority.readers), extensions, chain):
            pending = memo.verifying
            if pending is None or pending[0] is not authority or pending[1].done():
                pending = (authority, asyncio.ensure_future(verify_off_loop(authority, extensions, chain, address)))
                memo.verifying = pending
            await pending[1]
        memo.verified = authority

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
        memo = (scope.get("extensions") or {}).get(CONNECTION_KEY)
        if memo is not None and (
            memo.verified is not self.authority or (memo.recheck != FOREVER and memo.recheck <= now_us())
        ):  # once per connection and authority, and again when its checks may change with time
            await self._verify_chain(scope["extensions"], memo, peer(scope))
        headers = scope["headers"]
        found = [(name.lower(), value) for name, value in headers if name.lower() in _OPTIN_SPELLINGS]
        optin_values = [value for name, value in found if name == OPTIN]  # other spellings never opt in
        if found:  # ... and no spelling ever reaches the application
            scope = dict(scope, headers=[h for h in headers if h[0].lower() not in _OPTIN_SPELLINGS])
        granted = NO_OPT_IN
        if optin_values:
            granted = self.decide(scope, optin_values)
            if self.on_decision is not None:
                self.on_decision(granted)
            if AUDIT_KEY in scope:  # the audit event's annotation (server.audit)
                scope[AUDIT_KEY].decision = granted.reason
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
                if any(name.lower() in _ORCA_SPELLINGS for name, _ in headers):  # the same scan when off
                    kept, removed = strip_orca(list(headers))
                    if self.on_stripped is not None:
                        self.on_stripped(removed)
                    message = dict(message, headers=kept if attach is None else [attach, *kept])
                elif attach is not None:  # first: the server's HTTP/2 adapter finds it there (carry_report)
                    message = dict(message, headers=[attach, *headers])
            await send(message)

        try:
            await self.app(scope, receive, send_filtered)
        finally:
            counters.in_flight -= 1
            counters.requests += 1
