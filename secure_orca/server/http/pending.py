"""Connections whose TLS handshake has not completed, capped per client address and in total (pure).

A connection costs a descriptor and some memory from its accept until its handshake completes, whoever the client
is: no credential is needed to open one and say nothing. ``PendingHandshakes`` holds them in arrival order; a new
one past a cap makes room by giving up the oldest first, of its own address (``per_address``), then of all
(``total``). The oldest is the one most likely silent (a client's handshake takes a round trip or two), and a
client that floods from one address pushes out only its own connections. IPv6 addresses count per /64, as the
verification budget does (``x509.budget.address_key``). ``youngest`` is what to give up when descriptors run
short: the newest unauthenticated work, never a connection already past its handshake.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass
from enum import Enum
from typing import Generic, TypeVar

from secure_orca.x509.budget import address_key

Item = TypeVar("Item", bound=Hashable)
HELLO_TIMEOUT = 5.0  # seconds from accept to a whole ClientHello
# Go's http.Transport (DefaultTransport) and client-go give a handshake 10 s (TLSHandshakeTimeout); kube-apiserver
# allows 32 s (net/http: the least of its ReadHeaderTimeout, ReadTimeout and WriteTimeout).
HANDSHAKE_TIMEOUT = 10.0
MAX_PENDING = 1024  # per worker
MAX_PENDING_PER_ADDRESS = 128  # per worker; above a load balancer's bursts (40 at once in benchmarks/)
HANDSHAKE_THREADS = 2  # per worker


@dataclass(frozen=True)
class HandshakeLimits:
    """The serving flags below HTTP: deadlines, caps and handshake threads, per worker."""

    hello_timeout: float = HELLO_TIMEOUT
    handshake_timeout: float = HANDSHAKE_TIMEOUT
    max_pending: int = MAX_PENDING
    max_pending_per_address: int = MAX_PENDING_PER_ADDRESS
    threads: int = HANDSHAKE_THREADS

    def effective_total(self, descriptors: int) -> int:
        """The total cap, at most half the descriptors this process may open (RLIMIT_NOFILE's soft limit): the
        other half is for connections past their handshake, the listener, files and the loop's own."""
        return max(1, min(self.max_pending, descriptors // 2))


class Cap(Enum):
    PER_ADDRESS = "per_address"
    TOTAL = "total"


class PendingHandshakes(Generic[Item]):
    """Pending connections in arrival order, by address key; every operation is O(1)."""

    def __init__(self, total: int, per_address: int) -> None:
        if total < 1 or per_address < 1:
            raise ValueError("the caps must be at least 1")
        self.total, self.per_address = total, per_address
        self._all: OrderedDict[Item, str] = OrderedDict()
        self._by_key: dict[str, OrderedDict[Item, None]] = {}

    def __len__(self) -> int:
        return len(self._all)

    def __contains__(self, item: Item) -> bool:
        return item in self._all

    def admit(self, host: str, item: Item) -> list[tuple[Item, Cap]]:
        """Hold ``item`` (from ``host``); returns the connections given up for it, oldest first, each with the
        cap that gave it up. They are no longer held: closing them is the caller's."""
        key = address_key(host)
        given_up: list[tuple[Item, Cap]] = []
        same = self._by_key.get(key)
        while same is not None and len(same) >= self.per_address:
            oldest = next(iter(same))
            self.release(oldest)
            given_up.append((oldest, Cap.PER_ADDRESS))
            same = self._by_key.get(key)
        while len(self._all) >= self.total:
            oldest = next(iter(self._all))
            self.release(oldest)
            given_up.append((oldest, Cap.TOTAL))
        self._all[item] = key
        self._by_key.setdefault(key, OrderedDict())[item] = None
        return given_up

    def release(self, item: Item) -> None:
        """The handshake completed, or the connection ended (idempotent)."""
        key = self._all.pop(item, None)
        if key is None:
            return
        same = self._by_key[key]
        del same[item]
        if not same:
            del self._by_key[key]

    def youngest(self) -> Item | None:
        return next(reversed(self._all)) if self._all else None

    def addresses(self) -> int:
        return len(self._by_key)
