"""The smaller holes. Each test names what it guards."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from secure_orca import pki
from secure_orca.addresses import is_loopback
from secure_orca.authz.policy import DECISIONS
from secure_orca.credentials import devpki
from secure_orca.lab import loadgen
from secure_orca.lab import replicas as launch
from secure_orca.server.asgi import respond
from secure_orca.server.metrics import Metrics
from secure_orca.server.sampler import Sampler
from tests.replicas import run_replicas

from ..conftest import fp_flags
from .backends import Recorded, recording_backend
from .wire import get_h2, h1_exchange, h1_get, h1_status

OPT_IN = "endpoint-load-metrics-request"


@pytest.fixture(scope="module")
def rig(dev_pki: pki.DevPKI) -> Iterator[tuple[launch.Replica, Recorded]]:
    with recording_backend() as (url, recorded):
        argv = launch.serve_argv(dev_pki, [*fp_flags(dev_pki), "--proxy", f"/apis/x={url}"])
        with run_replicas([argv]) as (replica,):
            yield replica, recorded


@pytest.mark.parametrize("path", ["/apis/x/nocontent", "/apis/x/notmodified"])
def test_204_and_304_carry_no_content_length(rig, dev_pki, path) -> None:
    replica, _ = rig
    reply = get_h2(replica, dev_pki, path)
    assert reply.status in (204, 304)
    assert reply.header("content-length") == []
    response = h1_get(replica, dev_pki, path)
    head = response.split(b"\r\n\r\n", 1)[0].lower()
    assert h1_status(response) in (204, 304) and b"content-length" not in head


def test_respond_sends_no_body_nor_length_on_204() -> None:
    sent: list[dict[str, Any]] = []

    async def send(message: Any) -> None:
        sent.append(message)

    asyncio.run(respond(send, 204, b"ignored", [(b"content-type", b"text/plain")]))
    assert all(name != b"content-length" for name, _ in sent[0]["headers"])
    assert sent[1]["body"] == b""


def test_upgrade_h2c_is_not_accepted_over_tls(rig, dev_pki) -> None:
    replica, _ = rig
    request = (
        b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: Upgrade, HTTP2-Settings\r\n"
        b"Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n"
    )
    response = h1_exchange(replica, dev_pki, request)
    assert h1_status(response) == 200, response[:200]
    assert b"101" not in response.split(b"\r\n", 1)[0]


def test_underscore_opt_in_never_reaches_a_backend(rig, dev_pki) -> None:
    """A backend that reads ``_`` as ``-`` (CGI, WSGI) would see the opt-in; it must not get there."""
    replica, recorded = rig
    before = len(recorded.headers)
    get_h2(replica, dev_pki, "/apis/x/y", ("endpoint_load_metrics_request", "TEXT"), (OPT_IN, "TEXT"))
    h1_get(replica, dev_pki, "/apis/x/y", "endpoint_load_metrics_request: TEXT")
    seen = recorded.headers[before:]
    assert len(seen) == 2
    for headers in seen:
        assert all(name.lower().replace("_", "-") != OPT_IN for name, _ in headers), headers


def test_every_reason_is_counted_without_keyerror() -> None:
    metrics = Metrics(Sampler(), lambda: 0)
    for decision in DECISIONS.values():
        metrics.on_decision(decision)  # a reason without a pre-bound child would raise here


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.0.0.2", True),
        ("::1", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("10.0.0.1", False),
        ("metrics.example", False),
    ],
)
def test_non_loopback_metrics_addresses_are_recognised(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_pki_never_writes_through_a_planted_temporary_name(tmp_path: Path) -> None:
    """A local user who can write to the certificate directory plants the old predictable temporary names as
    symlinks to a victim file: generating the PKI must not write through them."""
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    root = tmp_path / "certs"
    root.mkdir()
    for name in ("server.key", "ca.key", "secret", "server.crt"):
        (root / f".{name}.tmp").symlink_to(victim)
    devpki.generate(root)
    assert victim.read_bytes() == b"precious"
    assert not [p for p in root.iterdir() if p.name.endswith(".tmp") and not p.is_symlink()]


@pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None, reason="no C compiler")
def test_h2load_shim_is_never_taken_from_a_shared_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another local user plants a library where the shim used to be built (a fixed name in the shared
    temporary directory): the shim used must be the one we built, in a directory only we can write."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    planted = tmp_path / "secure-orca-shim" / "h2load_client_cert.so"
    planted.parent.mkdir()
    planted.write_bytes(b"not the shim")
    os.utime(planted, (4_000_000_000, 4_000_000_000))  # newer than the source, as an attacker would set it
    monkeypatch.setattr(loadgen, "_built_shims", {}, raising=False)
    shim = loadgen.build_shim()
    assert shim != planted
    assert shim.read_bytes()[:4] == b"\x7fELF"
    info = shim.parent.stat()
    assert info.st_uid == os.getuid() and info.st_mode & 0o077 == 0
