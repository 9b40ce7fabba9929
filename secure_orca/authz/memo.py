"""A connection's memory of its certificate checks and its last load-report decision (pure: time is passed in,
as microseconds since the epoch)."""

from __future__ import annotations

import datetime as dt
import hmac
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from secure_orca.authz.authority import Authority
from secure_orca.authz.policy import DECISIONS, Decision
from secure_orca.authz.reasons import Reason
from secure_orca.x509.cache import ChainCache
from secure_orca.x509.chainverifier import NO_CERTIFICATE, ChainResult

FOREVER = 2**63  # microseconds: a recheck that never comes
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_MICROSECOND = dt.timedelta(microseconds=1)


def microseconds(moment: dt.datetime) -> int:
    """An aware datetime as whole microseconds since the epoch (exact, unlike a float timestamp)."""
    return (moment - EPOCH) // _MICROSECOND


def at(us: int) -> dt.datetime:
    """Microseconds since the epoch as an aware datetime (the inverse of ``microseconds``)."""
    return EPOCH + us * _MICROSECOND


@dataclass(frozen=True)
class Checks:
    """A connection's certificate checked against each trust, and when that may change with time alone."""

    identity: ChainResult = NO_CERTIFICATE
    reader: ChainResult = NO_CERTIFICATE
    recheck: int = FOREVER


class ConnectionMemo:
    """Per-connection memory (the server puts one in every request scope of a connection); only its own methods
    write its fields.

    ``last``: the report tuple last attached on it, so ``once-per-sample`` can skip repeats that HPACK would
    still pay for (``fresh``). ``chain_key``: the digest of its client chain, hashed once per connection
    (``key_of``). The other fields remember the last opt-in decision, so a load balancer's connection pays for
    its chain lookups, opt-in parse and secret hash once, not on every request (``decision_for``, ``record``):
    the decision is reused only under the same authority (a credential reload replaces it), for the same single
    opt-in value (compared in constant time), while whether each certificate check holds at the current time is
    what it was, and never past ``recheck`` (the next notBefore among the presented certificates, when a refusal
    may turn into a grant).
    """

    __slots__ = (
        "authority",
        "chain_key",
        "decision",
        "identity",
        "last",
        "optin",
        "reader",
        "recheck",
        "since",
        "timed",
        "until",
        "verified",
        "windows",
    )

    def __init__(self) -> None:
        self.last: tuple[bytes, bytes] | None = None
        self.chain_key: bytes | None = None  # ChainCache.key of the connection's client chain, computed once
        self.authority: Authority | None = None  # the policy and trusts under which the fields below were computed
        self.identity: ChainResult = NO_CERTIFICATE  # front-proxy check
        self.reader: ChainResult = NO_CERTIFICATE  # load-reader check (option 2b)
        self.windows: tuple[tuple[int, int], ...] = ()  # microsecond windows in which each check holds
        self.recheck = FOREVER  # microseconds since the epoch: identify again from then on
        self.timed = False  # whether a decision depends on the clock (a window or a recheck exists)
        self.optin = b""  # the single opt-in value ``decision`` was made for (reused only within since..until)
        self.since, self.until = 0, -1  # microseconds in which every check holds as it did for ``decision``
        self.decision = DECISIONS[Reason.NO_OPT_IN]
        self.verified: Authority | None = None  # the authority whose trusts have this connection's chain cached

    # --- time ---

    def moment(self, clock: Callable[[], int]) -> int:
        """The time this connection's decisions depend on: the clock's reading when a check depends on it
        (``timed``), else 0, any time standing for any other (the clock is then not read)."""
        return clock() if self.timed else 0

    # --- the decision ---

    def decision_for(self, authority: Authority, optin_values: Sequence[bytes], now: int) -> Decision | None:
        """The remembered decision when it stands for this request at ``now`` (see the class), else None."""
        if (
            self.authority is authority
            and self.since <= now <= self.until  # never reaches self.recheck (``steady``)
            and len(optin_values) == 1
            and hmac.compare_digest(optin_values[0], self.optin)
        ):
            return self.decision
        return None

    def stale(self, authority: Authority, now: int) -> bool:
        """Whether the certificate checks must be made again (``remember``): another authority, or ``recheck``
        reached."""
        return self.authority is not authority or now >= self.recheck

    def remember(self, authority: Authority, checks: Checks) -> None:
        """The connection's certificate checks under ``authority`` (forgets the last decision)."""
        self.authority, self.identity, self.reader = authority, checks.identity, checks.reader
        self.optin, self.since, self.until = b"", 0, -1  # no decision yet: nothing to reuse
        self.recheck = checks.recheck
        self.windows = tuple(
            (microseconds(start), microseconds(end))
            for result in (checks.identity, checks.reader)
            if result.ok
            for start, end in result.windows
        )
        self.timed = bool(self.windows) or self.recheck < FOREVER

    def record(self, optin_values: Sequence[bytes], decision: Decision, now: int) -> Decision:
        """``decision``, made at ``now`` under the remembered checks, kept for reuse when it answered one opt-in
        value (the one place a decision is remembered)."""
        if len(optin_values) == 1:
            self.optin, self.decision = optin_values[0], decision
            self.since, self.until = self.steady(now)
        return decision

    def steady(self, now: int) -> tuple[int, int]:
        """The microseconds around ``now`` in which each check holds exactly as at ``now`` (``ChainResult
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

    # --- verification and the rest of the connection's memory ---

    def unverified(self, authority: Authority, clock: Callable[[], int]) -> bool:
        """Whether the connection's chain must be verified (again) before a decision: once per authority, and
        again once ``recheck`` is reached (the clock is read only when a recheck is due at all)."""
        return self.verified is not authority or (self.recheck != FOREVER and self.recheck <= clock())

    def verified_under(self, authority: Authority) -> None:
        """The connection's chain is now in ``authority``'s caches."""
        self.verified = authority

    def key_of(self, chain: tuple[str, ...]) -> bytes:
        """``ChainCache.key`` of the connection's client chain, hashed once per connection."""
        if self.chain_key is None:
            self.chain_key = ChainCache.key(chain)
        return self.chain_key

    def fresh(self, header: tuple[bytes, bytes]) -> bool:
        """Whether this connection has not had this report header yet (and now has): ``once-per-sample``."""
        if self.last is header:
            return False
        self.last = header
        return True
