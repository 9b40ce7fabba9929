"""The check that follows every hostile test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from secure_orca import pki
from secure_orca.lab.replicas import Replica

from .wire import assert_nothing_in_flight, in_flight


@pytest.fixture(autouse=True)
def in_flight_back_to_zero(request: pytest.FixtureRequest) -> Iterator[None]:
    """After every hostile test whose server reports its load to the dev PKI's secret, the report's
    ``in_flight_requests`` is back to 0. A server that serves no report to that secret (another PKI, the
    feature off) has no gauge to read; which ones were checked is decided before the test runs."""
    checked: list[tuple[Replica, pki.DevPKI]] = []
    for name in request.fixturenames:
        if name in ("request", "in_flight_back_to_zero"):
            continue
        for replica in _replicas(request.getfixturevalue(name)):
            dev = request.getfixturevalue("dev_pki")
            if _reports(replica, dev):
                checked.append((replica, dev))
    yield
    for replica, dev in checked:
        # A test that stopped its server, or rotated the secret away, leaves no gauge to read.
        if replica.process.popen.poll() is None and _reports(replica, dev):
            assert_nothing_in_flight(replica, dev)


def _replicas(value: object) -> list[Replica]:
    """The running servers a fixture's value holds: a Replica, a rig (``.replica``), or a tuple or list of them."""
    if isinstance(value, Replica):
        return [value]
    if isinstance(getattr(value, "replica", None), Replica):
        return [value.replica]  # type: ignore[attr-defined]
    if isinstance(value, tuple | list):
        return [item for item in value if isinstance(item, Replica)]
    return []


def _reports(replica: Replica, dev: pki.DevPKI) -> bool:
    try:
        in_flight(replica, dev)
    except (AssertionError, OSError):
        return False
    return True
