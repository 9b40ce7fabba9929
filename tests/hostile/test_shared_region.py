"""Material larger than the region ``serve --workers`` shares it in (each file within the size limit): refused
by the credential reader before it installs anything, logged once, retried at every poll; the generation the
workers follow never changes, and once the file fits again it is installed, shared and followed."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from secure_orca import pki
from secure_orca.credentials import loader
from secure_orca.server.http.tls import make_server_context
from secure_orca.server.reload import Reloader
from secure_orca.server.trust import TrustService, authority_from
from secure_orca.workers.credentials import Publisher, SharedCredentials, Subscriber, encode, in_force


def reloader(dev: pki.DevPKI, names: Path) -> Reloader:
    files = loader.CredentialFiles(
        cert=dev.cert("server"),
        key=dev.key("server"),
        requestheader_ca=dev.cert("front_proxy_ca"),
        allowed_names_file=names,
    )
    material, contents = loader.load_contents(files)
    seen = {flag: loader.fingerprint(read) for flag, read in contents.items()}
    context = make_server_context(material.serving, material.anchors())
    trust = TrustService(authority_from(material, frozenset()))
    return Reloader(loader.sources(files), material, seen, context, trust, contents=contents)


def test_material_larger_than_the_shared_region_is_refused_before_anything_is_installed(
    dev_pki: pki.DevPKI, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    names = tmp_path / "allowed-names"
    names.write_text(f"{pki.FRONT_PROXY_CN}\n")
    reader, worker = reloader(dev_pki, names), reloader(dev_pki, names)
    first = encode(1, in_force(reader.watched))
    shared = SharedCredentials(len(first) + 1024)  # room for the material in force, not for 64 KiB more
    shared.material.publish(first)
    reader.reading = Publisher(shared, reader, generation=1)
    worker.reading = subscriber = Subscriber(shared)
    worker.check()
    before = (reader.material, reader.trust.authority, shared.material.sequence())

    names.write_text(f"{pki.FRONT_PROXY_CN}\n" + "another-proxy\n" * 5000)  # valid, and far below the file limit
    with caplog.at_level(logging.ERROR):
        assert reader.check() == []
        assert reader.check() == []  # retried at every poll, said once
    refusals = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert len(refusals) == 1, refusals
    assert "shared with the workers" in refusals[0]
    assert (reader.material, reader.trust.authority, shared.material.sequence()) == before  # nothing installed
    assert not subscriber.changed() and worker.check() == [] and subscriber.generation == 1

    names.write_text(f"{pki.FRONT_PROXY_CN}\nanother-proxy\n")  # fits again: installed, shared, followed
    assert reader.check() == ["--requestheader-allowed-names-file"]
    assert subscriber.changed()
    assert worker.check() == ["--requestheader-allowed-names-file"]
    assert subscriber.generation == 2
    assert worker.material.allowed_names == reader.material.allowed_names == (pki.FRONT_PROXY_CN, "another-proxy")
