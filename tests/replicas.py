"""The one way the tests run replicas of ``secure-orca serve``: start them (``lab.replicas``), wait until they
serve, and at the end stop them and check that their output holds no traceback. A server that logged a
traceback mishandled something even when every response looked right, so the check is not left for each test
to remember. A test that wants to know which of its steps caused one checks a slice with
:func:`assert_no_traceback` as it goes. A module whose tests share one replica declares it with
:func:`replica_fixture`."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Literal

import pytest

from secure_orca import pki
from secure_orca.lab import replicas as launch


def assert_no_traceback(replica: launch.Replica, since: int = 0) -> None:
    """No traceback in the replica's output from its line ``since`` on."""
    assert "Traceback" not in "".join(replica.process.lines[since:]), replica.process.output(60)


@contextmanager
def run_replicas(argvs: Sequence[Sequence[str]], timeout: float = 30.0) -> Iterator[list[launch.Replica]]:
    """One running replica per argv (``launch.serve_argv``); once they have stopped, none logged a traceback.
    The check is skipped when the block raised: its own failure is the one to report."""
    with launch.replicas(argvs, timeout) as started:
        yield started
    for replica in started:
        assert_no_traceback(replica)


def replica_fixture(
    flags: Callable[[pki.DevPKI], Sequence[str]] = lambda dev: (),
    *,
    scope: Literal["module", "session"] = "module",
) -> Any:
    """A fixture of one replica that serves the dev PKI with ``flags(dev_pki)``, started once per ``scope`` and
    checked like :func:`run_replicas`; its name is the module attribute it is assigned to."""

    @pytest.fixture(scope=scope)
    def replica(dev_pki: pki.DevPKI) -> Iterator[launch.Replica]:
        with run_replicas([launch.serve_argv(dev_pki, flags(dev_pki))]) as (started,):
            yield started

    return replica
