"""Signature work per client address over time: a token bucket per address (pure: time is passed in).

One verification is bounded by ``verify.MAX_VERIFICATION_COST``; a client opening many connections, each with a
new crafted chain, would still buy that much work per connection. The bucket bounds what one address buys over
time: ``capacity`` units at once, ``rate`` units per second after that (units: ``verify.signature_cost``). A
verification may spend at most what its address has left; when that is nothing, the chain is refused unverified.
IPv6 addresses count per /64 (what one host is usually given). At most ``size`` addresses are remembered (the
least recently charged is forgotten first), so the state is bounded whatever clients do.
"""

from __future__ import annotations

import ipaddress
from collections import OrderedDict

from secure_orca.x509.verify import MAX_VERIFICATION_COST

CAPACITY = 2 * MAX_VERIFICATION_COST  # two verifications at the per-verification bound, at once
RATE = 64.0  # units per second after that: about 1 ms of RSA-2048 public operations per second (19 us each)
ADDRESSES = 4096


def address_key(host: str) -> str:
    """The bucket an address draws from: itself, or its /64 for IPv6."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host
    if address.version == 6 and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(ipaddress.ip_network(f"{address}/64", strict=False)) if address.version == 6 else str(address)


class AddressBudget:
    """Per address: units left at the last charge, and when. No lock of its own (this package is pure): a read is
    one dict lookup, and ``spend`` runs where verifications run, one at a time (server.middleware serializes
    them in its worker); an entry is replaced in place, never absent between two steps."""

    def __init__(self, capacity: int = CAPACITY, rate: float = RATE, size: int = ADDRESSES) -> None:
        self.capacity, self.rate, self.size = capacity, rate, size
        self._left: OrderedDict[str, tuple[float, float]] = OrderedDict()  # key -> (units, seconds)

    def _level(self, key: str, now: float) -> float:
        units, then = self._left.get(key, (float(self.capacity), now))
        return min(float(self.capacity), units + max(0.0, now - then) * self.rate)

    def available(self, host: str, now: float) -> int:
        """Whole units ``host`` may spend at ``now`` (seconds)."""
        return int(self._level(address_key(host), now))

    def spend(self, host: str, units: int, now: float) -> None:
        key = address_key(host)
        level = self._level(key, now) - units
        if key not in self._left and len(self._left) >= self.size:
            self._left.popitem(last=False)  # the least recently charged address is forgotten
        self._left[key] = (max(level, 0.0), now)
        self._left.move_to_end(key)

    def refilled_at(self, host: str, units: int, now: float) -> float:
        """When ``host`` will have ``units`` again (``now`` if it has them)."""
        missing = units - self._level(address_key(host), now)
        return now + max(0.0, missing) / self.rate
