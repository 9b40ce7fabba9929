"""The caps on connections whose handshake has not completed (pure): per address (IPv6 per /64) and in total,
the oldest given up first, and the youngest named when descriptors run short."""

from __future__ import annotations

import pytest

from secure_orca.server.http.pending import Cap, HandshakeLimits, PendingHandshakes


def test_a_new_connection_past_the_address_cap_gives_up_that_address_oldest() -> None:
    pending: PendingHandshakes[str] = PendingHandshakes(total=10, per_address=2)
    assert pending.admit("192.0.2.1", "a1") == []
    assert pending.admit("192.0.2.2", "b1") == []
    assert pending.admit("192.0.2.1", "a2") == []
    assert pending.admit("192.0.2.1", "a3") == [("a1", Cap.PER_ADDRESS)]
    assert "a1" not in pending and all(item in pending for item in ("a2", "a3", "b1"))
    assert len(pending) == 3


def test_a_new_connection_past_the_total_cap_gives_up_the_oldest_of_all() -> None:
    pending: PendingHandshakes[str] = PendingHandshakes(total=3, per_address=3)
    for item, host in (("a", "192.0.2.1"), ("b", "192.0.2.2"), ("c", "192.0.2.3")):
        pending.admit(host, item)
    assert pending.admit("192.0.2.4", "d") == [("a", Cap.TOTAL)]
    assert len(pending) == 3 and pending.addresses() == 3


def test_ipv6_addresses_count_per_64() -> None:
    pending: PendingHandshakes[str] = PendingHandshakes(total=10, per_address=1)
    pending.admit("2001:db8:0:1::1", "first")
    assert pending.admit("2001:db8:0:1::ffff", "same /64") == [("first", Cap.PER_ADDRESS)]
    assert pending.admit("2001:db8:0:2::1", "other /64") == []


def test_release_is_idempotent_and_youngest_is_the_newest_held() -> None:
    pending: PendingHandshakes[str] = PendingHandshakes(total=10, per_address=10)
    assert pending.youngest() is None
    pending.admit("192.0.2.1", "old")
    pending.admit("192.0.2.1", "new")
    assert pending.youngest() == "new"
    pending.release("new")
    pending.release("new")
    assert pending.youngest() == "old" and len(pending) == 1
    pending.release("old")
    assert pending.youngest() is None and pending.addresses() == 0


def test_the_total_cap_is_at_most_half_the_descriptors() -> None:
    limits = HandshakeLimits(max_pending=1024)
    assert limits.effective_total(1024) == 512
    assert limits.effective_total(1_048_576) == 1024
    assert limits.effective_total(1) == 1


def test_caps_below_one_are_refused() -> None:
    with pytest.raises(ValueError):
        PendingHandshakes(total=0, per_address=1)
