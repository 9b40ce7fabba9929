"""One audit log for ``serve --workers 2`` (workers.auditwriter), on loopback with real server processes: every
request of either worker is one whole JSON line in one file, rotation keeps whole lines, blocking-strict refuses
on both workers while the file cannot be written, SIGTERM loses no event, a killed writer is replaced.
Counted and compared, never timed."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from secure_orca import pki
from secure_orca.lab import replicas as launch
from secure_orca.lab.sockets import children
from tests import plainhttp
from tests.replicas import run_replicas
from tests.workers.live import argv, close, eventually, spread

PATH = "/version"  # the load's requests; spread's own are /healthz


def events(*files: Path) -> list[dict[str, Any]]:
    """Every line of ``files``, each parsed as one JSON object (a partial or interleaved line fails here)."""
    out = []
    for file in files:
        data = file.read_bytes()
        assert not data or data.endswith(b"\n"), f"{file} ends in a partial line"
        out += [json.loads(line) for line in data.splitlines()]
    return out


Held = dict[int, list[httpx.Client]]


def load(replica: launch.Replica, held: Held, each: int, query: str = "") -> dict[int, set[str]]:
    """``each`` requests on every held connection, all at once; the Audit-Id of every response, by worker."""
    ids: dict[int, set[str]] = {pid: set() for pid in held}
    lock = threading.Lock()

    def run(pid: int, http: httpx.Client) -> None:
        for _ in range(each):
            response = http.get(replica.url + PATH + query)
            assert response.status_code == 200, response.text
            with lock:
                ids[pid].add(response.headers["audit-id"])

    threads = [threading.Thread(target=run, args=(pid, http)) for pid, clients in held.items() for http in clients]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return ids


def writers(supervisor: int, log: Path) -> set[int]:
    """The supervisor's children that hold ``log`` open (procfs): the audit writer, and no worker."""
    found = set()
    for pid in children(supervisor):
        with contextlib.suppress(OSError):
            if any(os.readlink(fd) == str(log) for fd in Path(f"/proc/{pid}/fd").iterdir()):
                found.add(pid)
    return found


def loaded(found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in found if e["requestURI"].startswith(PATH)]


def scrape(port: int, name: str) -> float:
    return plainhttp.metric(f"http://127.0.0.1:{port}/metrics", name, -1.0)


def test_one_file_holds_every_request_of_both_workers_whole(dev_pki: pki.DevPKI, tmp_path: Path) -> None:
    log = tmp_path / "audit" / "audit.log"
    port = launch.free_port()
    flags = argv(dev_pki, "--audit-log-path", str(log), "--metrics-bind-address", f"127.0.0.1:{port}")
    with run_replicas([flags]) as (replica,):
        held = spread(replica, dev_pki, 3)
        try:
            ids = load(replica, held, 40)
        finally:
            close(held)
        sent = sum(map(len, ids.values()))
        assert sent == 2 * 3 * 40 and all(len(got) == 3 * 40 for got in ids.values())  # distinct ids per worker
        eventually(lambda: log.exists() and len(loaded(events(log))) >= sent, "every event written")
        found = events(log)
        eventually(lambda: scrape(port, "secure_orca_audit_events_written_total") == len(events(log)), "counted")
        assert scrape(port, "secure_orca_audit_write_errors_total") == 0
    written = loaded(found)
    assert len(written) == sent
    by_id = {e["auditID"] for e in written}
    for pid, got in ids.items():
        assert got <= by_id, pid  # each worker's events, each exactly once
    assert len(found) == len(events(log))  # nothing written after the count was taken
    assert oct(log.stat().st_mode & 0o777) == "0o600"


def test_rotation_under_two_workers_keeps_every_line_whole(dev_pki: pki.DevPKI, tmp_path: Path) -> None:
    """1 MB files and lines of about 20 KB (50 to a file): 120 of them rotate twice while both workers write."""
    log = tmp_path / "audit.log"
    flags = argv(dev_pki, "--audit-log-path", str(log), "--audit-log-maxsize", "1", "--audit-log-maxbackup", "0")
    with run_replicas([flags]) as (replica,):
        held = spread(replica, dev_pki, 2)
        try:
            ids = load(replica, held, 30, "?q=" + "a" * 20_000)
        finally:
            close(held)
        sent = sum(map(len, ids.values()))
        files = lambda: sorted(tmp_path.glob("audit*.log"))  # noqa: E731
        eventually(lambda: len(loaded(events(*files()))) == sent, "every event written")
        found = files()
    assert len(found) >= 3, found  # rotated at least twice
    for file in found:
        assert file.stat().st_size <= 1024 * 1024
        events(file)  # whole lines in every file
    assert {e["auditID"] for e in loaded(events(*found))} == set().union(*ids.values())


def test_blocking_strict_refuses_on_both_workers_while_the_file_cannot_be_written(
    dev_pki: pki.DevPKI, tmp_path: Path
) -> None:
    """The log's directory is replaced by a file, so the rotation that 1 MB of events brings cannot reopen the log
    (root ignores permissions; a file where the directory was fails for anyone): both workers then answer 500."""
    directory = tmp_path / "audit"
    flags = argv(
        dev_pki,
        "--audit-log-path",
        str(directory / "audit.log"),
        "--audit-log-maxsize",
        "1",
        "--audit-log-mode",
        "blocking-strict",
    )
    with run_replicas([flags]) as (replica,):
        held = spread(replica, dev_pki, 1)
        try:
            eventually(lambda: (directory / "audit.log").exists(), "the log opened")
            directory.rename(tmp_path / "moved")
            directory.write_bytes(b"")
            statuses: dict[int, list[int]] = {pid: [] for pid in held}
            for _ in range(200):
                for pid, (http,) in held.items():
                    if 500 not in statuses[pid]:
                        statuses[pid].append(http.get(replica.url + PATH + "?q=" + "a" * 20_000).status_code)
                if all(500 in got for got in statuses.values()):
                    break
                time.sleep(0.01)
            answers = [http.get(replica.url + PATH) for (http,) in held.values()]
        finally:
            close(held)
        assert all(500 in got and set(got) == {200, 500} for got in statuses.values()), statuses
        refusal = (500, "Internal Server Error: failed to store audit event")
        assert [(a.status_code, a.text) for a in answers] == [refusal] * 2
        assert "audit log: cannot write" in replica.process.output(200)


def test_sigterm_in_the_middle_of_traffic_loses_no_event(dev_pki: pki.DevPKI, tmp_path: Path) -> None:
    """SIGTERM while four connections on two workers keep sending: every answered request's event is in the file,
    once (the workers drain their queues to the writer, which exits last)."""
    log = tmp_path / "audit.log"
    with run_replicas([argv(dev_pki, "--audit-log-path", str(log))]) as (replica,):
        held = spread(replica, dev_pki, 2)
        answered: list[str] = []
        lock = threading.Lock()

        def run(http: httpx.Client) -> None:
            with contextlib.suppress(httpx.HTTPError):  # until the server goes away under it
                while True:
                    response = http.get(replica.url + PATH)
                    if response.status_code != 200:
                        return
                    with lock:
                        answered.append(response.headers["audit-id"])

        threads = [threading.Thread(target=run, args=(http,)) for clients in held.values() for http in clients]
        try:
            for thread in threads:
                thread.start()
            eventually(lambda: len(answered) >= 200, "traffic")
            replica.process.popen.send_signal(signal.SIGTERM)
            for thread in threads:
                thread.join(30)
        finally:
            close(held)
        assert replica.process.popen.wait(30) == 0
    written = [e["auditID"] for e in loaded(events(log))]
    assert len(written) == len(set(written))
    assert set(answered) <= set(written), len(set(answered) - set(written))


def test_a_killed_writer_is_restarted_and_later_events_are_written(dev_pki: pki.DevPKI, tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    with run_replicas([argv(dev_pki, "--audit-log-path", str(log))]) as (replica,):
        supervisor = replica.process.popen.pid
        held = spread(replica, dev_pki, 1)
        eventually(lambda: len(writers(supervisor, log)) == 1, "the writer opened the log")
        (writer,) = writers(supervisor, log)
        try:
            os.kill(writer, signal.SIGKILL)
            during = load(replica, held, 10)  # sent while no writer runs: they wait in the socket
            eventually(lambda: writers(supervisor, log) - {writer} != set(), "a new writer")
            after = load(replica, held, 10)
        finally:
            close(held)
        ids = set().union(*during.values(), *after.values())
        eventually(lambda: {e["auditID"] for e in loaded(events(log))} >= ids, "every event written")
        assert "the audit writer" in replica.process.output(200) and "restarting it" in replica.process.output(200)
    assert len(loaded(events(log))) == len(ids)
