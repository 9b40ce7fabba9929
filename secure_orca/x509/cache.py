"""One trust's verification results, per presented chain (pure: time is passed in)."""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
from dataclasses import dataclass
from typing import TypeVar

from secure_orca.x509.budget import AddressBudget, address_key
from secure_orca.x509.chainverifier import UNTRUSTED, ChainResult, ChainVerifier, parsed
from secure_orca.x509.verify import MAX_VERIFICATION_COST

CACHE_SIZE = 4096
MAX_CHAIN_CERTS = 8  # a front proxy presents a leaf and a few intermediates; longer chains are refused unverified
NEVER = dt.datetime.max.replace(tzinfo=dt.UTC)
_SECOND = dt.timedelta(seconds=1)
_HEADER, _FOOTER = "-----BEGIN CERTIFICATE-----", "-----END CERTIFICATE-----"
K = TypeVar("K")
ADDRESSES = AddressBudget()  # the process's signature work per client address, across every trust


def pem_to_der(pem: str) -> bytes:
    """One certificate as ``ssl.getpeercert``'s chain gives it, to DER (``ssl.PEM_cert_to_DER_cert``'s rules);
    ValueError where it is not one PEM certificate."""
    text = pem.strip()
    if not pem.startswith(_HEADER) or not text.endswith(_FOOTER):
        raise ValueError("not a PEM certificate")
    return base64.decodebytes(text[len(_HEADER) : -len(_FOOTER)].encode("ascii"))


@dataclass(frozen=True)
class Cached:
    result: ChainResult
    recheck_at: dt.datetime  # the first moment a certificate of the chain changes validity; verify again then
    address: str | None = None  # set: refused for this address's budget (``address_key``), not for the chain


class ChainCache:
    """Results keyed by a digest of the presented chain, so a chain is verified at most once per connection
    however many requests it carries. Bound to one verifier: new CAs mean a new cache.

    Bounded whatever clients present: at most ``CACHE_SIZE`` entries of a 32-byte key and a small result
    (the chain itself is never kept), and a chain of more than ``MAX_CHAIN_CERTS`` certificates is refused
    without being parsed or verified. A result is reused only until the earliest future notBefore of the
    presented certificates: a certificate seen before it became valid is verified again once it is.

    A lookup that names the client's address verifies with at most what that address has left in ``addresses``
    (and charges it the work done); a chain refused because the address ran out stays refused for that address
    until it has a full verification's budget again, then is verified anew. Such a refusal is the address's, not
    the chain's: it is kept apart, per (chain, address), and never answers a lookup from another address."""

    def __init__(self, verifier: ChainVerifier, addresses: AddressBudget = ADDRESSES) -> None:
        self.verifier = verifier
        self.addresses = addresses
        self._results: dict[bytes, Cached] = {}
        self._refused: dict[tuple[bytes, str], Cached] = {}  # (key, address_key): the address's budget refusals

    @staticmethod
    def key(chain: tuple[str, ...]) -> bytes:
        """The leaf and the multiset of intermediates: reordering the intermediates gives the same key (the
        verifier puts them in one order), repeating one does not."""
        if not chain:
            return hashlib.sha256(b"").digest()
        parts = [hashlib.sha256(pem.encode("latin-1", "replace")).digest() for pem in chain]
        return hashlib.sha256(b"".join([parts[0], *sorted(parts[1:])])).digest()

    def _verify(self, chain: tuple[str, ...], now: dt.datetime, address: str | None) -> Cached:
        if len(chain) > MAX_CHAIN_CERTS:
            return Cached(UNTRUSTED, NEVER)
        try:
            ders = [pem_to_der(pem) for pem in chain]
        except ValueError:
            return Cached(UNTRUSTED, NEVER)
        # DER straight to the verifier: it reads certificates as Go does, whatever cryptography thinks.
        # A result keeps the window of every chain found, so it answers as a new verification would until a
        # certificate becomes valid (only then can Go find a chain it did not find now): verify again then.
        if address is None:
            return Cached(self.verifier.verify_der(ders, now), _next_not_before(ders, now))
        seconds = now.timestamp()
        left = min(self.addresses.available(address, seconds), MAX_VERIFICATION_COST)
        if left <= 0:
            return Cached(UNTRUSTED, self._retry(address, now), address_key(address))
        spent = [0, 0]
        result = self.verifier.verify_der(ders, now, left, spent)
        self.addresses.spend(address, spent[0], seconds)
        if not result.ok and spent[1] and left < MAX_VERIFICATION_COST:  # the address's bound, not the chain's
            return Cached(result, self._retry(address, now), address_key(address))
        return Cached(result, _next_not_before(ders, now))

    def _retry(self, address: str, now: dt.datetime) -> dt.datetime:
        """When a chain refused for its address's bound is verified again: once it has a verification's worth."""
        again = self.addresses.refilled_at(address, MAX_VERIFICATION_COST, now.timestamp())
        return max(dt.datetime.fromtimestamp(again, dt.UTC), now + _SECOND)

    def lookup(
        self, chain: tuple[str, ...], now: dt.datetime, key: bytes | None = None, address: str | None = None
    ) -> ChainResult:
        """The result for ``chain``; ``key`` is ``key(chain)`` when the caller has it already, ``address`` the
        client's (None: no per-address bound)."""
        return self.lookup_until(chain, now, key, address)[0]

    def lookup_until(
        self, chain: tuple[str, ...], now: dt.datetime, key: bytes | None = None, address: str | None = None
    ) -> tuple[ChainResult, dt.datetime]:
        """The result for ``chain`` and the moment it must be looked up again (time alone may change it)."""
        key = key if key is not None else self.key(chain)
        cached = self._cached(key, now, address)
        if cached is None:
            cached = self.compute(chain, now, address)
            self.store(key, cached)
        return cached.result, cached.recheck_at

    def _cached(self, key: bytes, now: dt.datetime, address: str | None) -> Cached | None:
        """The chain's own result, else this address's refusal, while it stands at ``now``."""
        cached = self._results.get(key)
        if (cached is None or now >= cached.recheck_at) and address is not None and self._refused:
            cached = self._refused.get((key, address_key(address)))
        return cached if cached is not None and now < cached.recheck_at else None

    def fresh(self, key: bytes, now: dt.datetime, address: str | None = None) -> bool:
        """Whether a lookup of the chain with this key at ``now`` from ``address`` would verify nothing."""
        return self._cached(key, now, address) is not None

    def compute(self, chain: tuple[str, ...], now: dt.datetime, address: str | None = None) -> Cached:
        """Verify ``chain`` without touching the cache (the server runs this off its event loop)."""
        return self._verify(chain, now, address)

    def store(self, key: bytes, cached: Cached) -> None:
        """Keep ``cached``: shared by every lookup of the chain, or, an address's refusal, by that address's."""
        if cached.address is None:
            _put(self._results, key, cached)
        else:
            _put(self._refused, (key, cached.address), cached)


def _put(results: dict[K, Cached], key: K, cached: Cached) -> None:
    """Insert as the newest entry, forgetting the oldest beyond ``CACHE_SIZE``."""
    results.pop(key, None)
    if len(results) >= CACHE_SIZE:
        results.pop(next(iter(results)))
    results[key] = cached


def _next_not_before(ders: list[bytes], now: dt.datetime) -> dt.datetime:
    """When a result may change with time alone: the earliest notBefore still to come among the certificates."""
    upcoming = []
    for der in ders:
        try:
            not_before = parsed(der).not_before  # parsed by the verification just before
        except ValueError:
            continue
        if not_before > now:
            upcoming.append(not_before)
    return min(upcoming, default=NEVER)
