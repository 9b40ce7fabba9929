"""The per-connection memo on its own (no middleware, no sockets): which microseconds a decision stands for."""

from __future__ import annotations

import datetime as dt

from secure_orca.authz.authority import Authority
from secure_orca.authz.memo import FOREVER, Checks, ConnectionMemo, at, microseconds
from secure_orca.authz.policy import DECISIONS, Policy
from secure_orca.authz.reasons import Reason
from secure_orca.x509.cache import ChainCache
from secure_orca.x509.chainverifier import NO_CERTIFICATE, ChainResult

START = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
HOUR = 3_600_000_000
AUTHORITY, ANOTHER = Authority(Policy(frozenset())), Authority(Policy(frozenset()))


def held(start: int, end: int) -> ChainResult:
    return ChainResult(True, None, ((at(start), at(end)),))


def test_microseconds_round_trip() -> None:
    assert at(microseconds(START)) == START and microseconds(at(123)) == 123


def test_microseconds_count_from_the_unix_epoch() -> None:
    """The middleware reads the clock as ``time.time_ns() // 1000``: the memo's microseconds must be the same."""
    assert microseconds(START) == 1_767_225_600 * 1_000_000  # 2026-01-01T00:00:00Z
    assert at(0) == dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def test_no_certificate_needs_no_clock() -> None:
    memo = ConnectionMemo()
    memo.remember(AUTHORITY, Checks())
    assert not memo.timed and memo.steady(0) == (-(2**63), FOREVER - 1)


def test_a_held_check_stands_only_inside_its_window() -> None:
    s = microseconds(START)
    memo = ConnectionMemo()
    memo.remember(AUTHORITY, Checks(held(s, s + HOUR), NO_CERTIFICATE))
    assert memo.timed
    assert memo.steady(s + 5) == (s, s + HOUR)
    assert memo.steady(s - 5) == (-(2**63), s - 1)  # before: until the window opens
    assert memo.steady(s + HOUR + 1) == (s + HOUR + 1, FOREVER - 1)  # after: from the end on
    # the exact edges (ChainResult.holds_at: notBefore <= t <= notAfter) are inside the window
    assert memo.steady(s) == memo.steady(s + HOUR) == (s, s + HOUR)
    assert memo.steady(s - 1) == (-(2**63), s - 1)


def test_two_windows_and_a_recheck_bound_each_other() -> None:
    s = microseconds(START)
    memo = ConnectionMemo()
    memo.remember(AUTHORITY, Checks(held(s, s + 2 * HOUR), held(s + HOUR, s + 3 * HOUR), recheck=s + 90 * 60_000_000))
    assert memo.steady(s + 1) == (s, s + HOUR - 1)
    assert memo.steady(s + HOUR) == (s + HOUR, s + 90 * 60_000_000 - 1)


def test_remember_forgets_the_last_decision() -> None:
    memo = ConnectionMemo()
    memo.optin, memo.since, memo.until = b"TEXT", 0, 10
    memo.remember(ANOTHER, Checks())
    assert memo.authority is ANOTHER and (memo.optin, memo.since, memo.until) == (b"", 0, -1)


def test_a_decision_is_reused_for_one_opt_in_value_within_its_steady_microseconds() -> None:
    s = microseconds(START)
    memo, granted = ConnectionMemo(), DECISIONS[Reason.FRONT_PROXY]
    assert memo.decision_for(AUTHORITY, [b"TEXT"], s) is None  # nothing decided yet
    memo.remember(AUTHORITY, Checks(held(s, s + HOUR), NO_CERTIFICATE))
    assert memo.record([b"TEXT"], granted, s + 5) is granted
    assert memo.decision_for(AUTHORITY, [b"TEXT"], s) is memo.decision_for(AUTHORITY, [b"TEXT"], s + HOUR) is granted
    assert (
        memo.decision_for(AUTHORITY, [b"TEXT"], s - 1) is memo.decision_for(AUTHORITY, [b"TEXT"], s + HOUR + 1) is None
    )
    assert memo.decision_for(AUTHORITY, [b"TEXT", b"TEXT"], s) is None  # a duplicate is decided again
    assert memo.decision_for(AUTHORITY, [b"JSON"], s) is memo.decision_for(ANOTHER, [b"TEXT"], s) is None


def test_a_decision_on_several_opt_in_values_is_not_kept() -> None:
    memo, refused = ConnectionMemo(), DECISIONS[Reason.DUPLICATE_OPT_IN]
    memo.remember(AUTHORITY, Checks())
    assert memo.record([b"TEXT", b"TEXT"], refused, 0) is refused
    assert memo.decision_for(AUTHORITY, [b"TEXT"], 0) is None and memo.decision is not refused


def test_the_clock_is_read_only_when_a_check_depends_on_it() -> None:
    def unread() -> int:
        raise AssertionError("the clock was read")

    s = microseconds(START)
    memo = ConnectionMemo()
    memo.remember(AUTHORITY, Checks())
    assert memo.moment(unread) == 0  # falsy: the middleware then reads the clock for the policy itself
    memo.remember(AUTHORITY, Checks(held(s, s + HOUR), NO_CERTIFICATE))
    assert memo.moment(lambda: s) == s


def test_the_chain_is_verified_once_per_authority_and_again_from_its_recheck_on() -> None:
    def unread() -> int:
        raise AssertionError("the clock was read")

    s = microseconds(START)
    memo = ConnectionMemo()
    assert memo.unverified(AUTHORITY, unread)  # never verified
    memo.remember(AUTHORITY, Checks())
    memo.verified_under(AUTHORITY)
    assert not memo.unverified(AUTHORITY, unread)  # no recheck due: the clock is not read
    assert memo.unverified(ANOTHER, unread)  # a reload
    memo.remember(AUTHORITY, Checks(recheck=s))
    assert not memo.unverified(AUTHORITY, lambda: s - 1)
    assert memo.unverified(AUTHORITY, lambda: s) and memo.unverified(AUTHORITY, lambda: s + 1)


def test_the_chain_is_hashed_once_per_connection() -> None:
    memo = ConnectionMemo()
    first = memo.key_of(("leaf",))
    assert first == ChainCache.key(("leaf",)) and memo.key_of(("another",)) == first


def test_each_report_header_is_fresh_once_per_connection() -> None:
    memo, header, next_sample = ConnectionMemo(), (b"endpoint-load-metrics", b"TEXT a=1"), (b"x", b"y")
    assert memo.fresh(header) and not memo.fresh(header)
    assert memo.fresh(next_sample) and memo.fresh(header)
