"""The out-of-band stream's capacity accounting and write deadline (secure_orca.authz.streams), pure."""

from __future__ import annotations

import argparse

from hypothesis import given, settings
from hypothesis import strategies as st

from secure_orca.authz.streams import Full, Kind, Limits, Slot, Slots, WriteDeadline
from secure_orca.server.options import oob as oob_options

LIMITS = Limits(total=8, per_connection=3, per_identity=4, front_proxy_share=2)


def test_each_bound_refuses_with_its_own_reason() -> None:
    slots = Slots(LIMITS)
    assert all(isinstance(slots.take(Kind.LOAD_READER, "a", 1), Slot) for _ in range(3))
    assert slots.take(Kind.LOAD_READER, "a", 1) is Full.CONNECTION
    assert isinstance(slots.take(Kind.LOAD_READER, "a", 2), Slot)
    assert slots.take(Kind.LOAD_READER, "a", 3) is Full.IDENTITY  # 4 held across two connections
    assert all(isinstance(slots.take(Kind.LOAD_READER, "b", 3), Slot) for _ in range(2))
    assert slots.take(Kind.LOAD_READER, "c", 4) is Full.SHARED  # 6 = 8 - 2: the rest is the front proxy's
    assert all(isinstance(slots.take(Kind.FRONT_PROXY, "lb", 5), Slot) for _ in range(2))
    assert slots.take(Kind.FRONT_PROXY, "lb2", 6) is Full.TOTAL


def test_kinds_are_counted_apart_for_one_certificate() -> None:
    """A front proxy and a load reader are counted apart even for one certificate (both CAs may hold it)."""
    slots = Slots(Limits(total=8, per_connection=8, per_identity=1, front_proxy_share=2))
    assert isinstance(slots.take(Kind.LOAD_READER, "same", 1), Slot)
    assert isinstance(slots.take(Kind.FRONT_PROXY, "same", 1), Slot)
    assert slots.take(Kind.LOAD_READER, "same", 2) is Full.IDENTITY


def test_release_is_once_and_frees_every_count() -> None:
    slots = Slots(Limits(total=1, per_connection=1, per_identity=1, front_proxy_share=0))
    slot = slots.take(Kind.LOAD_READER, "a", 1)
    assert isinstance(slot, Slot)
    assert slots.release(slot) and not slots.release(slot)
    assert (slots.held, slots.by_kind, slots.by_identity, slots.by_connection) == (set(), {}, {}, {})
    assert isinstance(slots.take(Kind.LOAD_READER, "a", 1), Slot)


def test_limits_problems_name_each_flag() -> None:
    assert Limits().problems() == []
    assert [p.split(":")[0] for p in Limits(0, 0, 0, 0).problems()] == [
        "max-streams",
        "max-streams-per-connection",
        "max-streams-per-identity",
        "front-proxy-streams",
    ]
    assert Limits(total=4, front_proxy_share=4).problems() == [
        "front-proxy-streams: must be at least 0 and below max-streams (load readers need one)"
    ]


OPS = st.lists(st.tuples(st.booleans(), st.sampled_from(list(Kind)), st.integers(0, 3), st.integers(0, 5)), max_size=80)


@settings(max_examples=300, deadline=None)
@given(ops=OPS, limits=st.builds(Limits, st.integers(1, 10), st.integers(1, 10), st.integers(1, 10), st.integers(0, 9)))
def test_no_identity_takes_the_front_proxys_share(ops: list[tuple[bool, Kind, int, int]], limits: Limits) -> None:
    """Whatever load readers do, the front proxy, below its share and its own bounds, is never refused; and no
    bound is ever exceeded."""
    if limits.problems():
        return
    slots = Slots(limits)
    held: list[Slot] = []
    for take, kind, identity, connection in ops:
        if not take and held:
            slots.release(held.pop(identity % len(held)))
            continue
        share_free = slots.open(Kind.FRONT_PROXY) < limits.front_proxy_share
        result = slots.take(kind, identity, connection)
        own_bounds = slots.by_connection[connection] < limits.per_connection and (
            slots.by_identity[(kind, identity)] < limits.per_identity
        )
        if isinstance(result, Slot):
            held.append(result)
        elif kind is Kind.FRONT_PROXY and share_free:
            assert result in (Full.CONNECTION, Full.IDENTITY), result
            assert not own_bounds
        assert len(slots.held) <= limits.total
        assert slots.open(Kind.LOAD_READER) <= limits.total - limits.front_proxy_share
        assert all(n <= limits.per_connection for n in slots.by_connection.values())
        assert all(n <= limits.per_identity for n in slots.by_identity.values())


def test_write_deadline_counts_from_the_oldest_unsent_report() -> None:
    writes = WriteDeadline(deadline=5.0)
    assert not writes.check(0, 0.0) and writes.due() is None
    writes.sent(10.0)
    assert writes.due() == 15.0
    assert not writes.check(50, 14.9)
    assert not writes.may_send(50)  # no report queues behind an unsent one
    writes.sent(12.0)  # (a shell that sends anyway) does not move the clock
    assert writes.check(50, 15.0)
    assert not writes.check(0, 15.0) and writes.due() is None  # it left: the clock stops
    assert writes.may_send(0)
    writes.sent(20.0)
    assert not writes.check(10, 24.0) and writes.check(10, 25.0)


def test_limits_accept_their_exact_bounds() -> None:
    def flags(limits: Limits) -> list[str]:
        return [problem.split(":")[0] for problem in limits.problems()]

    assert flags(Limits(total=10000, per_connection=10000, per_identity=1, front_proxy_share=9999)) == []
    assert flags(Limits(total=1, per_connection=1, per_identity=1, front_proxy_share=0)) == []
    assert flags(Limits(total=10001, per_connection=1, front_proxy_share=0)) == ["max-streams"]
    assert flags(Limits(total=4, per_connection=5, front_proxy_share=0)) == ["max-streams-per-connection"]
    assert flags(Limits(total=4, front_proxy_share=-1)) == ["front-proxy-streams"]


def test_one_unsent_byte_is_still_unsent() -> None:
    writes = WriteDeadline(deadline=5.0)
    writes.sent(0.0)
    assert not writes.may_send(1)
    assert not writes.check(1, 4.5) and writes.check(1, 5.0)


def test_the_default_limits_are_the_flags_defaults() -> None:
    """``Limits()`` (what OobConfig holds when no flag is given) is what --endpoint-load-metrics-oob-* default to."""
    parser = argparse.ArgumentParser()
    oob_options.add_flags(parser)
    assert oob_options._limits(parser.parse_args([])) == Limits() == Limits(64, 4, 16, 16)
