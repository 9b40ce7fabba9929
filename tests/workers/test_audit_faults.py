"""Faults under ``serve --workers 2`` with the audit log on (issue 40), on loopback with real server processes:
a worker killed right after it answered, in the modes that promise delivery. Counted,
never timed."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from secure_orca import pki
from tests.replicas import run_replicas
from tests.workers.live import argv, close, eventually, spread, workers_of
from tests.workers.test_audit_workers import PATH, events, loaded

ROUNDS = 15  # requests per worker before its kill


@pytest.mark.parametrize("mode", ["blocking", "blocking-strict"])
def test_a_worker_killed_right_after_its_answers_loses_none_of_their_events(
    dev_pki: pki.DevPKI, tmp_path: Path, mode: str
) -> None:
    """Each worker answers ROUNDS requests and is killed (SIGKILL) the moment its last answer arrives. Before:
    the events still in the worker's queue (its writer thread hands them over every 50 ms) died with it."""
    log = tmp_path / "audit.log"
    with run_replicas([argv(dev_pki, "--audit-log-path", str(log), "--audit-log-mode", mode)]) as (replica,):
        held = spread(replica, dev_pki, 1)
        answered: set[str] = set()
        try:
            for pid, (http,) in held.items():
                for _ in range(ROUNDS):
                    response = http.get(replica.url + PATH)
                    assert response.status_code == 200, response.text
                    answered.add(response.headers["audit-id"])
                os.kill(pid, signal.SIGKILL)
        finally:
            close(held)
        eventually(lambda: len(workers_of(replica)) == 2 and not set(held) & set(workers_of(replica)), "restarted")
        eventually(lambda: answered <= {e["auditID"] for e in loaded(events(log))}, "every answered event written")
    assert len(answered) == 2 * ROUNDS
