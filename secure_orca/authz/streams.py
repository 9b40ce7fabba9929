"""Who may hold the out-of-band stream's slots (StreamCoreMetrics), and how long a stream may go unwritten:
the capacity accounting and the write deadline as data (pure: no I/O, no clock; the shell is
``secure_orca.server.oob``).

Capacity is divided so that no identity can take another's:

- ``total``: streams open at once, all identities together;
- ``per_connection``: streams on one connection;
- ``per_identity``: streams one client certificate holds across all its connections (the identity is the
  certificate, not its name: a reader cannot borrow another's slots by presenting the same name);
- ``front_proxy_share``: slots only the front proxy may use. Load readers together hold at most
  ``total - front_proxy_share``; the front proxy may use any free slot. However many load readers connect,
  the front proxy (the load balancer, the one identity the policy trusts to assert users) always finds its
  share free, up to its own ``per_identity`` bound.

A slot is taken before the stream's request is read and given back exactly once (``release``), the moment the
stream ends, is reset by either side, or its client goes: before anything more is sent on it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class Kind(StrEnum):
    """The identity kinds that may open the stream; metrics are labelled by kind, never by name."""

    FRONT_PROXY = "front-proxy"
    LOAD_READER = "load-reader"


class Full(StrEnum):
    """Why a slot was refused (RESOURCE_EXHAUSTED); the closed set metrics count refusals by."""

    TOTAL = "total"  # every slot is taken
    SHARED = "load-reader-share"  # load readers hold every slot outside the front proxy's share
    IDENTITY = "per-identity"  # this certificate holds its bound
    CONNECTION = "per-connection"  # this connection holds its bound


@dataclass(frozen=True)
class Limits:
    total: int = 64
    per_connection: int = 4
    per_identity: int = 16
    front_proxy_share: int = 16

    def problems(self) -> list[str]:
        """What makes these limits inconsistent (empty when they are usable), one phrase per flag."""
        found = []
        if not 1 <= self.total <= 10000:
            found.append("max-streams: must be between 1 and 10000")
        if not 1 <= self.per_connection <= self.total:
            found.append("max-streams-per-connection: must be between 1 and max-streams")
        if self.per_identity < 1:
            found.append("max-streams-per-identity: must be at least 1")
        if not 0 <= self.front_proxy_share < self.total:
            found.append("front-proxy-streams: must be at least 0 and below max-streams (load readers need one)")
        return found


@dataclass(frozen=True, eq=False)
class Slot:
    """One taken slot: what it is counted against (identity compared by identity, not by value)."""

    kind: Kind
    identity: Hashable
    connection: Hashable


@dataclass
class Slots:
    """The open streams' slots under ``limits``."""

    limits: Limits
    held: set[Slot] = field(default_factory=set)
    by_kind: Counter[Kind] = field(default_factory=Counter)
    by_identity: Counter[Hashable] = field(default_factory=Counter)
    by_connection: Counter[Hashable] = field(default_factory=Counter)

    def take(self, kind: Kind, identity: Hashable, connection: Hashable) -> Slot | Full:
        """A slot for a stream of ``identity`` (of ``kind``) on ``connection``, or why there is none. The
        per-connection and per-identity bounds are checked first: the client's own bound is its answer even
        when the server is also full."""
        limits = self.limits
        if self.by_connection[connection] >= limits.per_connection:
            return Full.CONNECTION
        if self.by_identity[(kind, identity)] >= limits.per_identity:
            return Full.IDENTITY
        if len(self.held) >= limits.total:
            return Full.TOTAL
        if kind is Kind.LOAD_READER and self.by_kind[Kind.LOAD_READER] >= limits.total - limits.front_proxy_share:
            return Full.SHARED
        slot = Slot(kind, (kind, identity), connection)
        self.held.add(slot)
        self.by_kind[kind] += 1
        self.by_identity[slot.identity] += 1
        self.by_connection[connection] += 1
        return slot

    def release(self, slot: Slot) -> bool:
        """Give ``slot`` back; False (and nothing changed) if it was already given back."""
        if slot not in self.held:
            return False
        self.held.discard(slot)
        _decrement(self.by_kind, slot.kind)
        _decrement(self.by_identity, slot.identity)
        _decrement(self.by_connection, slot.connection)
        return True

    def open(self, kind: Kind) -> int:
        return self.by_kind[kind]


def _decrement(counter: Counter[Any], key: Any) -> None:
    counter[key] -= 1
    if not counter[key]:
        del counter[key]


@dataclass
class WriteDeadline:
    """Whether a stream's reports are leaving the server: ``sent`` when a report is handed to the transport,
    ``check`` with the bytes the transport still holds for the stream. A report still (partly) unsent
    ``deadline`` seconds after it was handed over means the reader cannot or will not read: the stream is reset.
    Times are the shell's monotonic clock, in seconds."""

    deadline: float
    oldest_unsent: float | None = None  # when the oldest report not yet fully written was handed over

    def sent(self, now: float) -> None:
        if self.oldest_unsent is None:
            self.oldest_unsent = now

    def check(self, unsent: int, now: float) -> bool:
        """True when the stream is stuck: bytes still unsent ``deadline`` seconds after their report was
        handed over. Nothing unsent clears the clock."""
        if unsent <= 0:
            self.oldest_unsent = None
            return False
        return self.oldest_unsent is not None and now - self.oldest_unsent >= self.deadline

    def due(self) -> float | None:
        """When ``check`` may next return True (the shell wakes the stream then), or None."""
        return None if self.oldest_unsent is None else self.oldest_unsent + self.deadline

    def may_send(self, unsent: int) -> bool:
        """A new report is handed over only when the previous ones left: reports never queue behind a slow
        reader (a queued report is stale by the time it would be read, and the queue would be the reader's
        to grow)."""
        return unsent <= 0
