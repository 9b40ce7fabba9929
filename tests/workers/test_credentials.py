"""The credential region's format: what the reader publishes is what a worker reads back (bytes, identity, mode),
and the region is sized for every live source at the credential size limit."""

from __future__ import annotations

from pathlib import Path

from secure_orca import pki
from secure_orca.credentials import loader
from secure_orca.credentials.files import MAX_CREDENTIAL_BYTES, FileContent
from secure_orca.workers.credentials import SharedCredentials, capacity, encode


def test_a_snapshot_reads_back_exactly(dev_pki: pki.DevPKI) -> None:
    files = loader.CredentialFiles(dev_pki.cert("server"), dev_pki.key("server"), client_ca=dev_pki.cert("client_ca"))
    _, contents = loader.load_contents(files)
    shared = SharedCredentials(capacity(loader.sources(files)))
    shared.material.publish(encode(7, list(contents.items())))
    got = shared.read()
    assert got is not None
    _, generation, sources = got
    assert generation == 7 and sources == contents  # paths, bytes, device, inode, mode and owner alike


def test_the_region_holds_every_live_source_at_the_size_limit(tmp_path: Path) -> None:
    files = loader.CredentialFiles(
        tmp_path / "server.crt",
        tmp_path / "server.key",
        client_ca=tmp_path / "client-ca.crt",
        secret_file=tmp_path / "a-rather-long-file-name-for-the-secret" / "secret",
    )
    sources = loader.sources(files)
    largest = [
        (s.flag, [FileContent(p, b"x" * MAX_CREDENTIAL_BYTES, 2**63, 2**63, 0o7777, 2**31) for p in s.paths])
        for s in sources
    ]
    assert len(encode(2**63, largest)) == capacity(sources)
