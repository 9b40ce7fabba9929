"""Broken or hostile credential files on a live server.

A reload never widens trust (an emptied allowed-names file is refused and counted), each file reloads on its
own (a bad file never blocks revocation through another), a refused file is retried until good (a mode fix
is seen), and a FIFO in place of a file never freezes the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from secure_orca import pki
from tests.rotating import Rig, eventually, replace

from ..conftest import ClientCert, load_issued, write_client

NAMES = "allowed-names"


def front_proxy(rig: Rig, tmp_path: Path) -> ClientCert:
    live = pki.DevPKI(rig.root)
    return write_client(tmp_path, "fp", load_issued(live.cert("front_proxy_client"), live.key("front_proxy_client")))


def other_cn(rig: Rig, tmp_path: Path) -> ClientCert:
    """A certificate from the requestheader CA whose CN is not an allowed name."""
    live = pki.DevPKI(rig.root)
    fp_ca = load_issued(live.cert("front_proxy_ca"), live.key("front_proxy_ca"))
    return write_client(tmp_path, "other", pki.issue(fp_ca, "not-the-proxy"))


def failures(rig: Rig, flag: str) -> float:
    pattern = rf'secure_orca_credential_reloads_total\{{flag="{flag}",result="failure"\}} ([0-9.]+)'
    match = re.search(pattern, rig.metrics())
    return float(match.group(1)) if match else 0.0


def failures_above(rig: Rig, flag: str, count: float) -> Callable[[], bool]:
    return lambda: failures(rig, flag) > count


def test_emptied_allowed_names_file_is_refused_and_counted(rig: Rig, tmp_path: Path) -> None:
    other = other_cn(rig, tmp_path)
    with rig.client(other.cert, other.key) as http:
        assert not rig.report(http)
        for emptied in (b"", b"# nobody for now\n\n"):
            before = failures(rig, "--requestheader-allowed-names-file")
            replace(rig.root / NAMES, emptied, 0o644)
            eventually(failures_above(rig, "--requestheader-allowed-names-file", before), "refusal counted")
            assert not rig.report(http), "an emptied allowed-names file widened trust"
    assert "names no one" in rig.log()


def test_bad_allowed_names_file_does_not_block_ca_revocation(rig: Rig, tmp_path: Path) -> None:
    fp = front_proxy(rig, tmp_path)
    live = pki.DevPKI(rig.root)
    with rig.client(fp.cert, fp.key) as http:
        assert rig.report(http)
        replace(rig.root / NAMES, b"", 0o644)  # broken, refused
        eventually(lambda: "reload of --requestheader-allowed-names-file refused" in rig.log(), "names refused")
        replace(live.cert("front_proxy_ca"), pki.make_ca("replacement-ca").cert_pem(), 0o644)  # revoke
        eventually(lambda: not rig.report(http), "the removed CA stops granting while another file is bad")
    assert "reload of --requestheader-client-ca-file refused" not in rig.log()


def test_secret_refused_for_its_mode_is_reread_once_the_mode_is_fixed(rig: Rig) -> None:
    secret_file = rig.root / pki.SECRET_FILE
    leaked = secret_file.read_text().strip()
    fresh = pki.new_secret()
    with rig.client() as http:
        assert rig.report(http, f"TEXT; secret={leaked}")
        replace(secret_file, f"{fresh}\n".encode(), 0o644)  # rotation, but world-readable: refused
        eventually(lambda: "is world-readable" in rig.log(), "mode refusal logged")
        assert rig.report(http, f"TEXT; secret={leaked}")  # the last good content stays meanwhile
        secret_file.chmod(0o600)  # the operator fixes the mode only: same content, same inode
        eventually(lambda: not rig.report(http, f"TEXT; secret={leaked}"), "the leaked secret stops granting")
        assert rig.report(http, f"TEXT; secret={fresh}")
    log = rig.log()
    assert "reload of --endpoint-load-metrics-secret-file refused" in log  # names its own flag
    assert leaked not in log and fresh not in log


def test_refused_file_is_retried_until_good(rig: Rig) -> None:
    """A file that cannot be read (not a content change the fingerprint could see) is retried every poll."""
    names = rig.root / NAMES
    names.unlink()
    eventually(lambda: "no such file" in rig.log(), "missing file refused")
    count = rig.log().count("reload of --requestheader-allowed-names-file refused")
    time.sleep(0.5)  # several polls: retried silently, logged once
    assert rig.log().count("reload of --requestheader-allowed-names-file refused") == count
    names.write_text("some-other-proxy\n")
    eventually(lambda: "reloaded --requestheader-allowed-names-file" in rig.log(), "good file reloaded")


def test_fifo_in_place_of_a_credential_file_never_freezes_the_server(rig: Rig) -> None:
    names = rig.root / NAMES
    names.unlink()
    os.mkfifo(names)
    try:
        eventually(lambda: "is not a regular file" in rig.log(), "FIFO refused", timeout=5)
        with rig.client() as http:
            for _ in range(3):
                assert http.get(rig.replica.url + "/healthz", timeout=httpx.Timeout(3.0)).status_code == 200
    finally:  # a server stuck opening the FIFO (the bug) gets its end of file, so the test can finish
        with contextlib.suppress(OSError):
            os.close(os.open(names, os.O_WRONLY | os.O_NONBLOCK))


def test_a_stuck_read_never_blocks_the_loop_nor_doubles(dev_pki: pki.DevPKI, monkeypatch: pytest.MonkeyPatch) -> None:
    """A credential file on a filesystem that hangs: the poll gives up after its timeout (logged once), the
    event loop keeps running, and no second reader starts while the first is stuck."""
    from secure_orca.authz.authority import Authority
    from secure_orca.authz.policy import Policy
    from secure_orca.credentials import loader
    from secure_orca.server import reload
    from secure_orca.server.http.tls import make_server_context
    from secure_orca.server.trust import TrustService

    files = loader.CredentialFiles(cert=dev_pki.cert("server"), key=dev_pki.key("server"))
    material, seen = loader.load(files)
    trust = TrustService(Authority(Policy(frozenset())))
    context = make_server_context(material.serving, material.anchors())
    reloader = reload.Reloader(loader.sources(files), material, seen, context, trust, read_timeout=0.2)
    release, readers = threading.Event(), []
    real_read = loader.read_credential

    def hanging_read(path: Path, flag: str) -> object:
        readers.append(threading.current_thread().name)
        release.wait(10)
        return real_read(path, flag)

    monkeypatch.setattr(loader, "read_credential", hanging_read)

    async def scenario() -> int:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        running = asyncio.create_task(ticker())
        assert await reloader.poll() == []  # gave up after read_timeout
        assert await reloader.poll() == []  # still stuck: waited for, not doubled
        release.set()
        await asyncio.sleep(0.1)
        await reloader.poll()  # the stuck read finished meanwhile; its result is used
        running.cancel()
        return ticks

    with caplog_errors() as errors:
        ticks = asyncio.run(scenario())
    assert ticks >= 10  # the loop ran all along
    assert len(set(readers)) == 1 and len(readers) == 2  # one thread read both files of the serving pair
    assert sum("takes over" in message for message in errors) == 1


@contextlib.contextmanager
def caplog_errors() -> Iterator[list[str]]:
    """ERROR lines of the reload logger while the block runs."""
    messages: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append(record.getMessage())

    handler = Collect(level=logging.ERROR)
    logger = logging.getLogger("secure_orca.reload")
    logger.addHandler(handler)
    try:
        yield messages
    finally:
        logger.removeHandler(handler)
