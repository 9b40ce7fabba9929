"""Trust as one service: the Authority in force, a connection's certificate checks against it, and chain
verification off the event loop, one object that every layer receiving a client chain is given.

Shaped as kube's dynamic providers (kubernetes/kubernetes 168c15a3b35450e758894a9153649e49e7515ee4,
staging/src/k8s.io/apiserver/pkg/authentication/request/headerrequest/requestheader.go,
``NewDynamicVerifyOptionsSecure``): an authenticator is built once around a provider and reads the provider's
current value at every request, while the dynamic-content controller replaces that value on a reload. Here the
load-report middleware, authentication, the out-of-band stream and the reloader share one ``TrustService``; the
reloader replaces ``authority`` (and the --client-ca-file trust) whole, and each request reads it once.

Every verification runs in a worker thread, one at a time (the service's lock), charged to the client's address
(``x509.budget``); connections presenting the same chain meanwhile wait for the same verification (the
service's in-flight table), so a request only ever looks results up on the loop.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import threading
import time
from collections.abc import Iterable, Sequence

from cryptography import x509

from secure_orca.authz.authority import Authority
from secure_orca.authz.memo import Checks, ConnectionMemo, at, microseconds
from secure_orca.authz.policy import Mode, Policy
from secure_orca.authz.secrets import SecretSet
from secure_orca.credentials.loader import Material
from secure_orca.server.asgi import Scope
from secure_orca.x509.cache import NEVER, Cached, ChainCache
from secure_orca.x509.chainverifier import NO_CERTIFICATE, ChainVerifier

CONNECTION_KEY = "secure_orca.connection"  # scope["extensions"] key of the per-connection ConnectionMemo


def now_us() -> int:
    """The current time in microseconds since the epoch, the resolution of datetime."""
    return time.time_ns() // 1000


def peer(scope: Scope) -> str | None:
    """The client's address (``scope["client"]``'s host): the key of its signature budget (``x509.budget``)."""
    client = scope.get("client")
    return str(client[0]) if client else None


def presented(extensions: Scope) -> tuple[str, ...]:
    """The connection's client chain as the TLS extension gives it (PEM, leaf first); empty without one."""
    return tuple((extensions.get("tls") or {}).get("client_cert_chain") or ())


def chain_key(extensions: Scope, chain: Sequence[str]) -> bytes:
    """``ChainCache.key`` of the connection's client chain, hashed once per connection (the memo keeps it)."""
    memo: ConnectionMemo | None = extensions.get(CONNECTION_KEY)
    return ChainCache.key(tuple(chain)) if memo is None else memo.key_of(tuple(chain))


def authority_from(material: Material, modes: frozenset[Mode]) -> Authority:
    """The trust the credential files grant: the one builder for start-up and every reload."""
    policy = Policy(modes, SecretSet(material.secrets) if material.secrets else None)
    cas, readers = material.requestheader_cas, material.reader_cas
    verifier = ChainVerifier(cas, material.allowed_names) if cas else None
    reader = ChainVerifier(readers, material.reader_names) if readers else None
    return Authority.build(policy, verifier, reader)


class TrustService:
    """The Authority in force (``authority``, replaced whole on a reload), the --client-ca-file trust
    (``clients``, None when that authenticator is off), and off-loop verification into their caches."""

    def __init__(self, authority: Authority, clients: ChainCache | None = None) -> None:
        self.authority = authority
        self.clients = clients
        self._verifying = threading.Lock()  # one chain verification at a time, in a worker thread
        self._in_flight: dict[tuple[int, bytes], asyncio.Future[Cached]] = {}  # (cache, chain key) being verified

    # --- reloads ---

    def reload(self, material: Material) -> None:
        """A new Authority from reloaded credential files, under the same modes."""
        self.authority = authority_from(material, self.authority.policy.modes)

    def trust_clients(self, client_cas: Sequence[x509.Certificate]) -> None:
        """Replace the --client-ca-file trust (on reload); only when the x509 authenticator is configured."""
        if self.clients is not None:
            self.clients = ChainCache(ChainVerifier(client_cas))

    # --- checks (lookups: the chain is verified already, ``verify``) ---

    @staticmethod
    def identify(extensions: Scope, authority: Authority, now: int, address: str | None = None) -> Checks:
        """The connection's presented chain checked against ``authority``'s front-proxy and load-reader trust
        (each verified once per distinct chain)."""
        chain = presented(extensions)
        if not chain or (authority.chains is None and authority.readers is None):
            return Checks()
        key = chain_key(extensions, chain)
        when = at(now)
        identity = reader = NO_CERTIFICATE
        recheck = NEVER
        for cache in (authority.chains, authority.readers):
            if cache is None:
                continue
            result, until = cache.lookup_until(chain, when, key, address)
            recheck = min(recheck, until)
            if cache is authority.chains:
                identity = result
            else:
                reader = result
        return Checks(identity, reader, microseconds(recheck) if recheck < NEVER else 2**63)

    async def checks(self, extensions: Scope, authority: Authority, address: str | None) -> Checks:
        """``identify``, with the chain verified off the loop first and charged to ``address``."""
        await self.verify((authority.chains, authority.readers), extensions, address)
        return self.identify(extensions, authority, now_us(), address)

    # --- verification off the loop ---

    def stale(self, caches: Iterable[ChainCache | None], extensions: Scope, address: str | None = None) -> bool:
        """Whether a lookup of this connection's chain now would verify in any of ``caches``: the common case, a
        chain already verified, costs a dictionary lookup per trust and no task."""
        chain = presented(extensions)
        if not chain:
            return False
        key = chain_key(extensions, chain)
        now = at(now_us())
        return any(cache is not None and not cache.fresh(key, now, address) for cache in caches)

    async def verify(self, caches: Iterable[ChainCache | None], extensions: Scope, address: str | None) -> None:
        """Fill each cache (None: that trust is not configured) for this connection's chain in a worker thread, so
        the lookups that follow find it and the event loop keeps serving other connections meanwhile. The work
        is charged to ``address``, the client's (``x509.budget``)."""
        chain = presented(extensions)
        if not chain:
            return
        key = chain_key(extensions, chain)
        now = at(now_us())  # the clock the decisions read
        for cache in caches:
            if cache is not None and not cache.fresh(key, now, address):
                await self._fill(cache, key, chain, now, address)

    def _compute(self, cache: ChainCache, chain: tuple[str, ...], now: dt.datetime, address: str | None) -> Cached:
        with self._verifying:
            return cache.compute(chain, now, address)

    async def _fill(
        self, cache: ChainCache, key: bytes, chain: tuple[str, ...], now: dt.datetime, address: str | None
    ) -> None:
        """Verify in a worker thread and store; connections presenting the same chain meanwhile wait for it (and
        verify for themselves when what it found was its address's refusal, not the chain's). A waiter that goes
        away (a reset stream) never cancels the verification the others wait for."""
        slot = (id(cache), key)
        while not cache.fresh(key, now, address):
            pending = self._in_flight.get(slot)
            mine = pending is None
            if pending is None:
                pending = asyncio.ensure_future(asyncio.to_thread(self._compute, cache, chain, now, address))
                self._in_flight[slot] = pending
                pending.add_done_callback(lambda done: self._store(cache, key, slot, done))
            await asyncio.shield(pending)
            # Store now, not only in its done callback: a future that has already finished is awaited without a
            # turn of the loop, so a waiter that came late would otherwise loop here, never letting it run.
            self._store(cache, key, slot, pending)
            if mine:
                return

    def _store(self, cache: ChainCache, key: bytes, slot: tuple[int, bytes], done: asyncio.Future[Cached]) -> None:
        """Keep a finished verification's result, once: whichever of its done callback and its first waiter
        comes first stores it; the other finds the slot no longer holding it."""
        if self._in_flight.get(slot) is not done:
            return
        del self._in_flight[slot]
        if not done.cancelled() and done.exception() is None:
            cache.store(key, done.result())
