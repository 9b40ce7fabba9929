"""Oversized credential material under ``serve --workers``: refused whole, once for the server, with the last
good trust kept by the reader and by every worker (no worker, nor the reader, ever holds part of it).

Live: a secret file past the credential size limit is refused by the one reader, logged once (before the shared
reader, each worker refused it and said so itself), and both workers keep granting the old secret. In process:
material that fits the size limit per file but not the shared region is refused before the reader installs it,
so the generation the workers follow never changes."""

from __future__ import annotations

import time
from pathlib import Path

from secure_orca import pki
from secure_orca.credentials.files import MAX_CREDENTIAL_BYTES
from tests.workers.live import close, eventually, granted, live, rotate

SECRET = "--endpoint-load-metrics-secret-file"


def test_a_secret_file_past_the_size_limit_is_refused_once_and_every_worker_keeps_the_old(
    dev_pki: pki.DevPKI, tmp_path: Path
) -> None:
    with live(dev_pki, tmp_path) as server:
        url = server.replica.url
        old = server.dev.secret.read_text().strip()
        held = server.held(old)
        try:
            line = f"{pki.new_secret()}\n".encode()
            rotate(server.dev.secret, line * (MAX_CREDENTIAL_BYTES // len(line) + 1))  # valid lines, too many
            eventually(lambda: f"reload of {SECRET} refused" in server.log(), "the refusal")
            time.sleep(0.5)  # five more polls
            assert all(granted(c[0], url, old) for c in held.values())  # the old trust, on every worker
        finally:
            close(held)
        refusals = [line for line in server.log().splitlines() if f"reload of {SECRET} refused" in line]
    assert len(refusals) == 1, refusals  # once for the server
    assert f"larger than {MAX_CREDENTIAL_BYTES} bytes" in refusals[0]
    assert old not in server.log()
