"""A configured credential is redacted whatever its spelling: literal, percent-encoded, or both (issue 36 row 3).

A bearer token configured as ``tok%41en…`` and sent literally in the query, the User-Agent or with its
Authorization was written verbatim: the redactor matched the configured values against the percent-decoded text,
where the literal ``%41`` had become ``A``. The same held for a client's own presented token with a ``%``, and for
a credential after a stray ``%`` that took its first hex digits into an escape.
"""

from __future__ import annotations

import json
import string
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from secure_orca import pki
from secure_orca.lab import replicas as launch
from secure_orca.server.audit import log as audit
from tests.replicas import run_replicas
from tests.rotating import eventually

from ..conftest import fp_flags
from .wire import h1_get, h1_status, write_private

TOKEN = "tok%41en-31ad%2Fq+z"  # two escapes in it, and a plus
OTHER = "another-Configured+token"


def _record(path: bytes = b"/api", query: bytes = b"", headers: list[tuple[bytes, bytes]] | None = None) -> Any:
    return audit.AuditRecord(
        {
            "type": "http",
            "method": "GET",
            "path": "",
            "raw_path": path,
            "query_string": query,
            "headers": headers or [],
            "client": ("127.0.0.1", 5555),
        }
    )


def _written(record: Any, known: tuple[str, ...] = (TOKEN, OTHER)) -> str:
    line = audit.line(record, audit.Redactor(known))
    json.loads(line)
    return line


SPELLINGS = {
    "literal": TOKEN,
    "percent-encoded": quote(TOKEN, safe=""),
    "both": "%74ok%41%65n-31ad%2F%71+z",  # its own escapes literal, some letters escaped
}
PLACES = {
    "query": lambda s: _record(query=b"a=1&t=" + s.encode() + b"&b=2"),
    "path": lambda s: _record(path=b"/api/" + s.encode() + b"/x"),
    "user-agent": lambda s: _record(headers=[(b"user-agent", b"curl/8 " + s.encode())]),
    "authorization+query": lambda s: _record(
        query=b"t=" + s.encode(), headers=[(b"authorization", b"Bearer " + s.encode())]
    ),
}


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("spelling", SPELLINGS)
def test_a_configured_token_with_a_percent_is_redacted(place: str, spelling: str) -> None:
    spelled = SPELLINGS[spelling]
    written = _written(PLACES[place](spelled))
    assert spelled not in written and TOKEN not in written
    assert "[redacted]" in written


@pytest.mark.parametrize("place", ["query", "user-agent"])
def test_a_presented_token_with_a_percent_is_redacted_unconfigured(place: str) -> None:
    """The client's own token (not configured: a wrong one), sent literally beside its Authorization."""
    token = "my%41own-token"
    headers = [(b"authorization", b"Bearer " + token.encode())]
    if place == "query":
        record = _record(query=b"t=" + token.encode(), headers=headers)
    else:
        record = _record(headers=[*headers, (b"user-agent", token.encode())])
    assert token not in _written(record, ())


def test_a_token_after_a_stray_percent_is_redacted() -> None:
    """A ``%`` before a token that starts with hex digits made them an escape of the decoded text."""
    token = "deadbeef-0123-token"
    written = _written(_record(query=b"x=%" + token.encode()), (token,))
    assert token not in written and "[redacted]" in written


_CHARS = string.ascii_letters + string.digits + "%/+=-_.~"


@st.composite
def _placed(draw: st.DrawFn) -> tuple[str, str, Any]:
    """A configured token with ``%`` escapes of its own, spelled with each character literal or escaped."""
    piece = st.one_of(
        st.text(_CHARS, min_size=1, max_size=4), st.sampled_from(["%41", "%2f", "%2F", "%25", "%20", "%"])
    )
    pieces = draw(st.lists(piece, min_size=3, max_size=8))
    token = "".join(pieces)
    spelled = "".join(c if draw(st.booleans()) else f"%{ord(c):02x}" for c in token)
    where = draw(st.sampled_from(sorted(PLACES)))
    return token, spelled, PLACES[where](spelled)


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(_placed())
def test_every_spelling_of_a_token_with_a_percent_is_redacted(placed: tuple[str, str, Any]) -> None:
    token, spelled, record = placed
    if len(token) < 6:
        return
    written = _written(record, (token, OTHER))
    assert spelled not in written and token not in written


def test_a_live_server_writes_no_spelling_of_a_token_with_a_percent(dev_pki: pki.DevPKI, tmp_path: Path) -> None:
    """A real ``serve`` with the token in its ``--token-auth-file``: the token authenticates when sent as it is
    configured, and no spelling of it, sent in the query, the User-Agent and the Authorization, is in the log."""
    tokens = write_private(tmp_path / "tokens.csv", f'{TOKEN},jane,1001,"dev"\n'.encode())
    log = tmp_path / "audit" / "audit.log"
    argv = launch.serve_argv(
        dev_pki, [*fp_flags(dev_pki), "--token-auth-file", str(tokens), "--audit-log-path", str(log)]
    )
    with run_replicas([argv]) as (replica,):
        statuses = []
        for spelled in SPELLINGS.values():
            headers = (f"User-Agent: curl/8 {spelled}", f"Authorization: Bearer {spelled}")
            statuses.append(h1_status(h1_get(replica, dev_pki, f"/version?a=1&t={spelled}&b=2", *headers)))
        eventually(lambda: log.exists() and len(log.read_text().splitlines()) >= len(SPELLINGS), "audit events")
    assert statuses[0] == 200  # the literal token is the configured one: it authenticates
    text = log.read_text()
    assert [json.loads(line)["user"].get("username") for line in text.splitlines()][:1] == ["jane"]
    for spelled in (*SPELLINGS.values(), TOKEN):
        assert spelled not in text
