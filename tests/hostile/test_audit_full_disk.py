"""The audit file on a full disk (a real 2 MiB tmpfs, tests.workers.fulldisk): a write that fails part-way leaves
no partial line, the next write after space returns goes on from the last whole line, and a file left ending in a
partial line (its writer killed mid-write) is cut back when it is opened. Before: the short write's bytes stayed,
a partial JSON line that the next write (after a newline) left in the file for good."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path
from typing import Any

from secure_orca.server.audit import log as audit
from secure_orca.server.audit.file import RotatingFile, append
from tests.asgi_call import run_asgi
from tests.workers.fulldisk import full_disk


def lines(n: int, size: int) -> bytes:
    return b"".join(json.dumps({"n": i, "pad": "x" * size}).encode() + b"\n" for i in range(n))


def test_a_write_that_fills_the_disk_is_rolled_back_whole(tmp_path: Path) -> None:
    with full_disk(tmp_path / "disk") as disk:
        sink = RotatingFile(disk.root / "audit.log", 0, 0)
        first = lines(3, 100)
        assert not append(sink, first, False)
        disk.fill(leave=8 * 1024)
        assert append(sink, lines(4, 10_000), False)  # about 40 KB where 8 KB are left: ENOSPC part-way
        assert (disk.root / "audit.log").read_bytes() == first
        disk.empty()
        later = lines(2, 100)
        assert not append(sink, later, True)  # space is back: the next write succeeds at once
        sink.close()
        data = (disk.root / "audit.log").read_bytes()
    assert data == first + later
    assert [json.loads(line)["n"] for line in data.splitlines()] == [0, 1, 2, 0, 1]


def test_a_partial_line_left_by_a_killed_writer_is_cut_when_the_file_is_opened(tmp_path: Path) -> None:
    path = tmp_path / "audit.log"
    whole = lines(2, 70_000)  # longer than one read of the tail
    path.write_bytes(whole + b'{"n": 2, "pad": "xxxx')
    sink = RotatingFile(path, 0, 0)
    assert not append(sink, b'{"n": 3}\n', False)
    sink.close()
    assert path.read_bytes() == whole + b'{"n": 3}\n'
    path.write_bytes(b'{"partial')
    sink = RotatingFile(path, 0, 0)
    assert not append(sink, b"{}\n", False)
    sink.close()
    assert path.read_bytes() == b"{}\n"


async def _ok(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [(b"audit-id", scope["id"])]})
    await send({"type": "http.response.body", "body": b"ok", "more_body": False})


def _scope(n: int, query: bytes = b"") -> dict[str, Any]:
    return {
        "type": "http",
        "method": "GET",
        "path": "/version",
        "raw_path": b"/version",
        "query_string": query,
        "headers": [],
        "client": ("127.0.0.1", 1),
        "id": str(uuid.UUID(int=n)).encode(),
    }


def test_one_process_in_blocking_strict_answers_200_only_with_its_event_written(tmp_path: Path) -> None:
    """The response is held until the writer thread wrote its event: the first request after the disk filled is a
    500 (before: 200, its event dropped by a write that failed after the response had gone)."""
    with full_disk(tmp_path / "disk") as disk:
        path = disk.root / "audit.log"
        log = audit.AuditLog(RotatingFile(path, 0, 0), mode=audit.BLOCKING_STRICT)
        app = audit.AuditMiddleware(_ok, log)
        log.start()
        try:
            answers = [asyncio.run(run_asgi(app, _scope(0)))[0]["status"]]
            disk.fill(leave=4 * 1024)
            answers += [asyncio.run(run_asgi(app, _scope(n, b"q=" + b"a" * 20_000)))[0]["status"] for n in (1, 2)]
            disk.empty()
            for n in range(3, 200):  # a bounded wait for the writer thread's retry (at most about 10 s)
                answers.append(asyncio.run(run_asgi(app, _scope(n)))[0]["status"])
                if answers[-1] == 200:
                    break
                time.sleep(0.05)
        finally:
            log.stop()
        written = [json.loads(line)["auditID"] for line in path.read_bytes().splitlines()]
    assert answers[:3] == [200, 500, 500] and answers[-1] == 200, answers
    answered = [str(uuid.UUID(int=n)) for n, status in enumerate(answers) if status == 200]
    assert set(answered) <= set(written), (answered, written)
