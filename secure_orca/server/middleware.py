"""ASGI middleware: the only place a load report enters a response.

For every HTTP request it removes the opt-in header before the application (or a proxied backend) sees it,
removes ``endpoint-load-metrics`` and ``endpoint-load-metrics-bin`` from whatever the application returns
(headers and trailers), and puts the sampler's cached header tuple first among the response's headers only
when the feature is on and the policy grants it (first, so the server's HTTP/2 adapter finds it at once:
``adapter.encode_headers``). The client identity comes from the ASGI TLS extension, ``scope["extensions"]["tls"]``.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import itertools
import ssl
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from secure_orca.authz.frontproxy import NO_CERTIFICATE, FrontProxyResult, FrontProxyVerifier
from secure_orca.authz.kubex509 import parse_certificate
from secure_orca.authz.policy import DECISIONS, Decision, Policy
from secure_orca.authz.reasons import Reason
from secure_orca.orca.headers import OPTIN_BYTES as OPTIN
from secure_orca.orca.headers import ORCA_HEADERS_BYTES as _ORCA
from secure_orca.server.asgi import ASGIApp, Message, Receive, Scope, Send
from secure_orca.server.audit import AUDIT_KEY
from secure_orca.server.sampler import Sampler

FEATURE_OFF = DECISIONS[Reason.FEATURE_OFF]
NO_OPT_IN = DECISIONS[Reason.NO_OPT_IN]
_CACHE_SIZE = 4096
CONNECTION_KEY = "secure_orca.connection"  # scope["extensions"] key of the per-connection ConnectionMemo
ATTACH_MODES = ("every-response", "once-per-sample")


class ConnectionMemo:
    """Per-connection memory (the server puts one in every request scope of a connection).

    ``last``: the report tuple last attached on it, so ``once-per-sample`` can skip repeats that HPACK would
    still pay for. ``chain_key``: the digest of its client chain, hashed once per connection. The other fields
    remember the last opt-in decision, so a load balancer's connection pays for its chain lookups, opt-in parse
    and secret hash once, not on every request: the decision is reused only under the same Authority (a
    credential reload replaces it), for the same single opt-in value (compared in constant time), while whether
    each certificate check holds at the current time is what it was, and never past ``recheck`` (the next
    notBefore among the presented certificates, when a refusal may turn into a grant).
    """

    __slots__ = ("authority", "chain_key", "decision", "identity", "last", "optin", "reader", "recheck", "since",
                 "timed", "until", "windows")  # fmt: skip

    def __init__(self) -> None:
        self.last: tuple[bytes, bytes] | None = None
        self.chain_key: bytes | None = None  # ChainCache.key of the connection's client chain, computed once
        self.authority: Authority | None = None  # under which the fields below were computed
        self.identity: FrontProxyResult = NO_CERTIFICATE  # front-proxy check
        self.reader: FrontProxyResult = NO_CERTIFICATE  # load-reader check (option 2b)
        self.windows: tuple[tuple[int, int], ...] = ()  # microsecond windows in which each check holds
        self.recheck = 2**63  # microseconds since the epoch: identify again from then on
        self.timed = False  # whether a decision depends on the clock (a window or a recheck exists)
        self.optin = b""  # the single opt-in value ``decision`` was made for (reused only within since..until)
        self.since, self.until = 0, -1  # microseconds in which every check holds as it did for ``decision``
        self.decision = NO_OPT_IN

    def remember(self, authority: Authority, checks: Checks) -> None:
        """The connection's certificate checks under ``authority`` (forgets the last decision)."""
        self.authority, self.identity, self.reader = authority, checks.identity, checks.reader
        self.optin, self.since, self.until = b"", 0, -1  # no decision yet: nothing to reuse
        self.recheck = checks.recheck
        self.windows = tuple(_window(r) for r in (checks.identity, checks.reader) if r.ok)
        self.timed = bool(self.windows) or self.recheck < 2**63

    def clock(self) -> int:
        """The time to decide at: only a certificate that holds at some time (or may start to) makes the
        decision depend on the clock; otherwise 0, and no clock is read."""
        return now_us() if self.timed else 0

    def steady(self, now: int) -> tuple[int, int]:
        """The microseconds around ``now`` in which each check holds exactly as at ``now`` (``FrontProxyResult
        .holds_at``: notBefore <= t <= notAfter), before ``recheck``: a decision made at ``now`` stands for any
        time in it."""
        since, until = -(2**63), self.recheck - 1
        for start, end in self.windows:
            if now < start:
                until = min(until, start - 1)
            elif now <= end:
                since, until = max(since, start), min(until, end)
            else:
                since = max(since, end + 1)
        return since, until


def chain_key(extensions: Scope, chain: Sequence[str]) -> bytes:
    """``ChainCache.key`` of the connection's client chain, hashed once per connection (the memo keeps it)."""
    memo = extensions.get(CONNECTION_KEY)
    key = memo.chain_key if memo is not None else None
    if key is None:
        key = ChainCache.key(tuple(chain))
        if memo is not None:
            memo.chain_key = key
    return key


def _window(result: FrontProxyResult) -> tuple[int, int]:
    if result.valid_from is None or result.valid_until is None:
        return (1, 0)
    return (microseconds(result.valid_from), microseconds(result.valid_until))


@dataclass(frozen=True)
class Checks:
    """A connection's certificate checked against each trust, and when that may change with time alone."""

    identity: FrontProxyResult = NO_CERTIFICATE
    reader: FrontProxyResult = NO_CERTIFICATE
    recheck: int = 2**63


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


MAX_CHAIN_CERTS = 8  # a front proxy presents a leaf and a few intermediates; longer chains are refused unverified
_NEVER = dt.datetime.max.replace(tzinfo=dt.UTC)


@dataclass(frozen=True)
class _Cached:
    result: FrontProxyResult
    recheck_at: dt.datetime  # the first moment a certificate of the chain changes validity; verify again then


class ChainCache:
    """Front-proxy results keyed by a digest of the presented chain, so a chain is verified at most once per
    connection however many requests it carries. Bound to one verifier: new CAs mean a new cache.

    Bounded whatever clients present: at most ``_CACHE_SIZE`` entries of a 32-byte key and a small result
    (the chain itself is never kept), and a chain of more than ``MAX_CHAIN_CERTS`` certificates is refused
    without being parsed or verified. A result is reused only until the earliest future notBefore of the
    presented certificates: a certificate seen before it became valid is verified again once it is."""

    def __init__(self, verifier: FrontProxyVerifier) -> None:
        self.verifier = verifier
        self._results: dict[bytes, _Cached] = {}

    @staticmethod
    def key(chain: tuple[str, ...]) -> bytes:
        digest = hashlib.sha256()
        for pem in chain:
            digest.update(pem.encode("latin-1", "replace"))
            digest.update(b"\0")
        return digest.digest()

    def _verify(self, chain: tuple[str, ...], now: dt.datetime) -> _Cached:
        if len(chain) > MAX_CHAIN_CERTS:
            return _Cached(FrontProxyResult(False, Reason.UNTRUSTED_CA), _NEVER)
        try:
            ders = [ssl.PEM_cert_to_DER_cert(pem) for pem in chain]
        except ValueError:
            return _Cached(FrontProxyResult(False, Reason.UNTRUSTED_CA), _NEVER)
        # DER straight to the verifier: it reads certificates as Go does, whatever cryptography thinks.
        result = self.verifier.verify_der(ders, now)
        return _Cached(result, _next_not_before(ders, now))

    def lookup(self, chain: tuple[str, ...], now: dt.datetime, key: bytes | None = None) -> FrontProxyResult:
        """The result for ``chain``; ``key`` is ``key(chain)`` when the caller has it already."""
        return self.lookup_until(chain, now, key)[0]

    def lookup_until(
        self, chain: tuple[str, ...], now: dt.datetime, key: bytes | None = None
    ) -> tuple[FrontProxyResult, dt.datetime]:
        """The result for ``chain`` and the moment it must be looked up again (time alone may change it)."""
        key = key if key is not None else self.key(chain)
        cached = self._results.get(key)
        if cached is None or now >= cached.recheck_at:
            cached = self._verify(chain, now)
            self._results.pop(key, None)
            if len(self._results) >= _CACHE_SIZE:
                self._results.pop(next(iter(self._results)))
            self._results[key] = cached
        return cached.result, cached.recheck_at


def _next_not_before(ders: list[bytes], now: dt.datetime) -> dt.datetime:
    """When a result may change with time alone: the earliest notBefore still to come among the certificates."""
    upcoming = []
    for der in ders:
        try:
            not_before = parse_certificate(der).not_before
        except ValueError:
            continue
        if not_before > now:
            upcoming.append(not_before)
    return min(upcoming, default=_NEVER)


@dataclass(frozen=True)
class Authority:
    """The policy and the front-proxy trust in force; replaced whole when credentials are reloaded."""

    policy: Policy
    chains: ChainCache | None = None
    readers: ChainCache | None = None  # the load-reader trust (option 2b): reports only, never an identity

    @classmethod
    def build(
        cls, policy: Policy, verifier: FrontProxyVerifier | None, reader: FrontProxyVerifier | None = None
    ) -> Authority:
        return cls(
            policy,
            ChainCache(verifier) if verifier is not None else None,
            ChainCache(reader) if reader is not None else None,
        )


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
            checks = self.identify(extensions, authority, now)
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
            memo.remember(authority, self.identify(extensions, authority, now or now_us()))
            now = memo.clock()
        decision = authority.policy.decide(optin_values, memo.identity, at(now or now_us()), memo.reader)
        if len(optin_values) == 1:
            memo.optin, memo.decision = optin_values[0], decision
            memo.since, memo.until = memo.steady(now)
        return decision

    @staticmethod
    def identify(extensions: Scope, authority: Authority, now: int) -> Checks:
        """The connection's presented chain checked against the front-proxy and the load-reader trust (each
        verified once per distinct chain)."""
        tls = extensions.get("tls") or {}
        chain = tls.get("client_cert_chain")
        if not chain or (authority.chains is None and authority.readers is None):
            return Checks()
        key = chain_key(extensions, chain)
        when = at(now)
        identity = reader = NO_CERTIFICATE
        recheck = _NEVER
        for cache in (authority.chains, authority.readers):
            if cache is None:
                continue
            result, until = cache.lookup_until(tuple(chain), when, key)
            recheck = min(recheck, until)
            if cache is authority.chains:
                identity = result
            else:
                reader = result
        return Checks(identity, reader, microseconds(recheck) if recheck < _NEVER else 2**63)

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
