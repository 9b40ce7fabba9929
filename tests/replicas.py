"""The one way the tests run replicas of ``secure-orca serve``: start them (forked from a server process that
has done its imports, ``tests.forked``, or as a fresh ``python -m secure_orca`` with ``fresh=True``), wait until
they serve, and at the end stop them and check that their output holds no traceback. A server that logged a
traceback mishandled something even when every response looked right, so the check is not left for each test
to remember. A test that wants to know which of its steps caused one checks a slice with
:func:`assert_no_traceback` as it goes. A module whose tests share one replica declares it with
:func:`replica_fixture`."""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from typing import Any, Literal, cast

import pytest

from secure_orca import pki
from secure_orca.envoy import bootstrap, files
from secure_orca.lab import launcher
from secure_orca.lab import replicas as launch
from tests import forked


def assert_no_traceback(replica: launch.Replica, since: int = 0) -> None:
    """No traceback in the replica's output from its line ``since`` on."""
    assert "Traceback" not in "".join(replica.process.lines[since:]), replica.process.output(60)


def start(name: str, argv: Sequence[str], *, fresh: bool = False) -> launch.Process:
    """``argv`` started as ``lab.replicas.start_process`` would, but forked (``tests.forked``) when it runs this
    interpreter's ``-m secure_orca`` and ``fresh`` is False."""
    if fresh or not forked.forkable(argv):
        return launch.start_process(name, argv)
    popen = forked.Forked(argv, dict(os.environ), os.getcwd())
    process = launch.Process(name, cast("subprocess.Popen[str]", popen))  # what Process uses of a Popen
    threading.Thread(target=_drain, args=(process, popen), name=f"drain-{name}", daemon=True).start()
    return process


def _drain(process: launch.Process, popen: forked.Forked) -> None:
    with popen.stdout:
        for line in popen.stdout:
            process.lines.append(line)


@contextmanager
def run_replicas(
    argvs: Sequence[Sequence[str]], timeout: float = 30.0, *, fresh: bool = False
) -> Iterator[list[launch.Replica]]:
    """One running replica per argv (``launch.serve_argv``), started together and stopped together; once they
    have stopped, none logged a traceback. The check is skipped when the block raised: its own failure is the one
    to report. ``fresh`` starts each as a new interpreter, for tests of the process's own start."""
    with ExitStack() as stack:
        processes: list[launch.Process] = []
        stack.callback(launch.stop_all, processes)
        processes.extend(start(f"replica-{i}", argv, fresh=fresh) for i, argv in enumerate(argvs))
        started = []
        for process in processes:
            match = launch.wait_for(process, launch.READY, timeout)
            started.append(launch.Replica(process, match.group(1).strip("[]"), int(match.group(2))))
        yield started
    for replica in started:
        assert_no_traceback(replica)


@contextmanager
def deployment(
    dev: pki.DevPKI,
    replica_argvs: Sequence[Sequence[str]],
    zones: Sequence[str | None] | None = None,
    **settings: Any,
) -> Iterator[launcher.Deployment]:
    """``lab.launcher.deployment`` (replicas, and Envoy in front of them on free ports) with the replicas of
    :func:`run_replicas`: forked, and checked for tracebacks once they have stopped."""
    settings = {"listen_port": 0, "admin_port": 0, **settings}
    with run_replicas(replica_argvs) as started:
        places = zones if zones is not None else [None] * len(started)
        upstreams = [bootstrap.Upstream(r.host, r.port, z) for r, z in zip(started, places, strict=True)]
        with launcher.run_envoy(files.dev_config(dev, upstreams, **settings)) as proxy:
            yield launcher.Deployment(proxy, started)


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
