"""No client makes the audit writer work for it, and no spelling of a credential is written.

Row 1 (HIGH): an ``Authorization: Bearer`` followed by 4,800 random 6-character parts made every part a credential
to search for in every string of the event (O(parts x length), in the writer thread but under the GIL), and the
queued record kept the whole scope. The work per event is counted here, never timed: Python and C function calls
made while one event is written (``sys.setprofile``), memory kept per queued event (``tracemalloc``), bytes
queued. Row 2 (LOW): a configured secret spelled with lower-case escapes (``%2f``) or a needless escape of its
first character was written; a property test tries every spelling.
"""

from __future__ import annotations

import asyncio
import errno
import gc
import json
import logging
import random
import string
import sys
import time
import tracemalloc
from collections.abc import MutableMapping
from typing import Any
from urllib.parse import unquote_to_bytes

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from secure_orca.server.audit import log as audit

SECRET = "s3cr3t/Value+with=signs"
PATH = "/api/" + "a" * 2000  # the same path in the hostile and the control request
_RNG = random.Random(26)
HOSTILE_AUTHORIZATION = (
    "Bearer " + " ".join("".join(_RNG.choices(string.ascii_letters + string.digits, k=6)) for _ in range(4800))
).encode()
CONTROL_AUTHORIZATION = b"Bearer " + HOSTILE_AUTHORIZATION.split(b" ")[1]  # one part: the same token


def _scope(authorization: bytes, path: str = PATH, query: bytes = b"") -> dict[str, Any]:
    return {
        "type": "http",
        "method": "GET",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query,
        "headers": [(b"authorization", authorization), (b"user-agent", b"flood/1.0")],
        "client": ("127.0.0.1", 5555),
    }


class _Sink:
    def __init__(self) -> None:
        self.data = b""
        self.full = False

    def write(self, data: bytes) -> None:
        if self.full:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.data += data


def _calls_to_write(log: audit.AuditLog, authorization: bytes) -> int:
    """Function calls (Python and C) made while the writer writes one event of a request with ``authorization``."""
    log.submit(audit.AuditRecord(_scope(authorization)))
    calls = 0

    def count(frame: Any, event: str, arg: Any) -> None:
        nonlocal calls
        if event in ("call", "c_call"):
            calls += 1

    before = sys.getprofile()
    sys.setprofile(count)
    try:
        written = log.drain()
    finally:
        sys.setprofile(before)
    assert written == 1
    return calls


def test_the_work_per_event_does_not_grow_with_authorization_parts() -> None:
    """The 4,800-part Authorization costs the writer what a one-part one costs (old code: about 4,800 times more
    calls: a redactor with every part's forms built and searched per event)."""
    log = audit.AuditLog(_Sink(), lambda: [SECRET])
    _calls_to_write(log, CONTROL_AUTHORIZATION)  # warm: the matcher of the configured secret is built once
    control = _calls_to_write(log, CONTROL_AUTHORIZATION)
    hostile = _calls_to_write(log, HOSTILE_AUTHORIZATION)
    assert hostile <= control + 10, (hostile, control)
    for _ in range(20):
        _calls_to_write(log, HOSTILE_AUTHORIZATION)
    assert log.redactors_built == 1  # one precompiled matcher, rebuilt only when the credentials change


def test_a_presented_token_is_the_one_kube_parses() -> None:
    """Redacted: the token kube's bearertoken parsing takes (the second space-separated part), in any spelling;
    not every later part (the old code made each of them a credential)."""
    token = HOSTILE_AUTHORIZATION.split(b" ")[1].decode()
    third = HOSTILE_AUTHORIZATION.split(b" ")[2].decode()
    needless = "%" + token[0].encode().hex() + token[1:]  # its first character escaped
    record = audit.AuditRecord(_scope(HOSTILE_AUTHORIZATION, f"/x/{token}/{third}", b"t=" + needless.encode()))
    uri = audit.event(record)["requestURI"]
    assert token not in uri and uri.startswith("/x/[redacted]/") and third in uri and uri.endswith("t=[redacted]")
    assert record.presented == (token,)


async def _request(log: audit.AuditLog, scope: dict[str, Any], sent: list[dict[str, Any]]) -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"ok", "more_body": False})

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b""}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(dict(message))

    await audit.AuditMiddleware(app, log)(scope, receive, send)


def test_a_queued_event_keeps_no_header_list() -> None:
    """Memory kept per queued event, measured (tracemalloc), is within what the record is charged in the queue and
    does not hold the 58 KB Authorization (old code: the whole scope, its headers included, stayed queued)."""
    log = audit.AuditLog(_Sink())  # the queue has room: the mode does not matter
    count = 20

    async def flood() -> None:
        for _ in range(count):
            await _request(log, _scope(bytes(bytearray(HOSTILE_AUTHORIZATION)), "/x"), [])  # a fresh copy each time

    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        asyncio.run(flood())
        gc.collect()
        kept = (tracemalloc.get_traced_memory()[0] - before) / count
    finally:
        tracemalloc.stop()
    assert len(log.queue) == count
    assert kept < 4096, f"{kept:.0f} bytes kept per queued event"
    assert kept <= log.queued_bytes / count  # the charge is an upper bound of the memory kept


def test_the_queue_is_bounded_in_bytes_and_batch_drops_are_counted_and_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = audit.AuditLog(_Sink(), max_bytes=200_000, mode=audit.BATCH)
    path = "/" + "p" * 24_000
    with caplog.at_level(logging.WARNING, "secure_orca.audit"):
        for _ in range(50):
            asyncio.run(_request(log, _scope(HOSTILE_AUTHORIZATION, path), []))
    fits = 200_000 // log.queue[0].size
    assert log.queue[0].size > 24_000 and fits >= 2  # the charge covers the path
    assert log.queued_bytes <= 200_000 and (len(log.queue), log.dropped) == (fits, 50 - fits)
    drops = [r for r in caplog.records if "events are dropped" in r.getMessage()]
    assert len(drops) == 1  # rate-limited: one line per DROP_LOG_INTERVAL
    assert log.drain() == fits and log.queued_bytes == 0


def test_blocking_mode_the_flooding_request_waits_and_nothing_is_lost() -> None:
    """kube's default mode: a request whose event finds the queue full awaits room before its response ends; the
    loop goes on, and once the writer frees room the event is queued, not dropped (old code: dropped)."""
    sink = _Sink()
    log = audit.AuditLog(sink, limit=1)
    log.submit(audit.AuditRecord(_scope(CONTROL_AUTHORIZATION)))
    sent: list[dict[str, Any]] = []

    async def scenario() -> None:
        waiting = asyncio.create_task(_request(log, _scope(HOSTILE_AUTHORIZATION), sent))
        for _ in range(20):
            await asyncio.sleep(0)  # the loop is free: other tasks run
        assert [m["type"] for m in sent] == ["http.response.start"] and not waiting.done()
        assert log.dropped == 0 and log.waiting == 1
        assert await asyncio.to_thread(log.drain) >= 1  # the writer thread frees room
        await asyncio.wait_for(waiting, 5)

    asyncio.run(scenario())
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]
    log.drain()
    assert (log.written, log.dropped, log.waiting) == (2, 0, 0)
    assert sink.data.count(b"\n") == 2
    assert log.mode == audit.BLOCKING == audit.DEFAULT_MODE


def test_blocking_strict_refuses_while_the_log_cannot_be_written() -> None:
    """kube's blocking-strict: a request whose event cannot be stored fails (500, kube's text). A response is held
    until the writer thread wrote its event, so the first request after the disk filled fails too (issue 40); the
    refused request's event makes the writer try again, and serving resumes once a write succeeds."""
    sink = _Sink()
    log = audit.AuditLog(sink, mode=audit.BLOCKING_STRICT, period=0.01)
    sink.full = True
    log.start()
    try:
        for _ in range(2):  # the held response whose write failed, then one refused at once
            sent: list[dict[str, Any]] = []
            asyncio.run(_request(log, _scope(CONTROL_AUTHORIZATION), sent))
            assert sent[0]["status"] == 500 and sent[1]["body"] == b"Internal Server Error: failed to store audit event"
        assert log.broken
        sink.full = False
        deadline = time.monotonic() + 10
        while log.broken and time.monotonic() < deadline:  # the refused request's event, written at the next try
            time.sleep(0.01)
        sent.clear()
        asyncio.run(_request(log, _scope(CONTROL_AUTHORIZATION), sent))
        assert sent[0]["status"] == 200
    finally:
        log.stop()
    written = [line for line in sink.data.split(b"\n") if line]  # a fresh line after the failed write
    assert len(written) == 2  # the refused request's event and the last one's


def test_an_unknown_mode_is_refused_as_kube() -> None:
    with pytest.raises(ValueError, match="invalid audit log mode queue, allowed modes are"):
        audit.AuditLog(_Sink(), mode="queue")


# --- row 2: every percent-encoding of a configured credential --------------------------------------------------

_CHARS = string.ascii_letters + string.digits + "/+=-_.~%?#& é€"
_ALWAYS_ESCAPED = {"path": set("?# %"), "query": set("#&% +")}  # raw, these would change what the URI says


@st.composite
def _spelling(draw: st.DrawFn, secret: str, where: str) -> str:
    """One percent-encoding of ``secret``: each UTF-8 byte raw (where that keeps its meaning) or escaped, each hex
    digit upper or lower case; in a query a space may be ``+``."""
    out = []
    for char in secret:
        if char == " " and where == "query" and draw(st.booleans()):
            out.append("+")
            continue
        for byte in char.encode():
            raw = chr(byte)
            if byte < 0x80 and raw not in _ALWAYS_ESCAPED[where] and draw(st.booleans()):
                out.append(raw)
            else:
                digits = f"{byte:02X}"
                out.append("%" + "".join(d.lower() if draw(st.booleans()) else d for d in digits))
    return "".join(out)


@st.composite
def _placed(draw: st.DrawFn) -> tuple[str, str, bytes, bytes]:
    secret = draw(st.text(_CHARS, min_size=6, max_size=24))
    where = draw(st.sampled_from(["path", "query"]))
    spelled = draw(_spelling(secret, where))
    if where == "path":
        return secret, spelled, b"/api/" + spelled.encode("latin-1", "replace") + b"/x", b"a=1"
    return secret, spelled, b"/api", b"a=1&t=" + spelled.encode("latin-1", "replace") + b"&b=2"


def _decoded(text: str) -> bytes:
    """What a server reads from the written URI: percent-decoded, ``+`` as a space."""
    return unquote_to_bytes(text.encode("latin-1").replace(b"+", b" "))


@settings(max_examples=400, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(_placed())
def test_no_percent_encoding_of_a_configured_credential_is_written(placed: tuple[str, str, bytes, bytes]) -> None:
    secret, spelled, path, query = placed
    record = audit.AuditRecord(
        {
            "type": "http",
            "method": "GET",
            "path": "",
            "raw_path": path,
            "query_string": query,
            "headers": [],
            "client": None,
        }
    )
    line = audit.line(record, audit.Redactor([secret, "another-Configured+token"]))
    uri: str = json.loads(line)["requestURI"]
    assert spelled not in uri
    assert secret.encode().replace(b"+", b" ") not in _decoded(uri)
    assert "[redacted]" in uri
