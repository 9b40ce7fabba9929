"""The one writer of the development PKI: a whole PKI with token file and kubeconfig, completed (never
overwritten) on a second run; minting is pure (Blobs in memory)."""

from __future__ import annotations

import json

import pytest
from cryptography import x509

from secure_orca import pki
from secure_orca import pki as mint
from secure_orca.credentials import devpki


def test_a_fresh_directory_gets_every_file_with_its_mode(tmp_path) -> None:
    written = devpki.ensure(tmp_path)
    dev = pki.DevPKI(tmp_path)
    assert sorted(written) == sorted(dev.all_paths()) and not devpki.missing(dev)
    for path in dev.all_paths():
        mode = path.stat().st_mode & 0o777
        assert mode == (0o644 if path.suffix == ".crt" else 0o600), path.name
    token = mint.token_of(dev.tokens.read_bytes())
    assert token and mint.kubeconfig_token(dev.kubeconfig.read_bytes()) == token


def test_a_second_run_writes_nothing_and_changes_nothing(tmp_path) -> None:
    devpki.ensure(tmp_path)
    before = {p: p.read_bytes() for p in pki.DevPKI(tmp_path).all_paths()}
    assert devpki.ensure(tmp_path) == []
    assert {p: p.read_bytes() for p in before} == before


def test_a_missing_kubeconfig_is_written_with_the_token_already_in_the_token_file(tmp_path) -> None:
    dev = devpki.generate(tmp_path)
    token = mint.token_of(dev.tokens.read_bytes())
    dev.kubeconfig.unlink()
    assert devpki.ensure(tmp_path, "https://localhost:7443") == [dev.kubeconfig]
    config = json.loads(dev.kubeconfig.read_text())
    assert mint.kubeconfig_token(dev.kubeconfig.read_bytes()) == token
    assert config["clusters"][0]["cluster"]["server"] == "https://localhost:7443"


def test_a_missing_token_file_takes_the_token_the_kubeconfig_holds(tmp_path) -> None:
    dev = devpki.generate(tmp_path)
    token = mint.kubeconfig_token(dev.kubeconfig.read_bytes())
    dev.tokens.unlink()
    assert devpki.ensure(tmp_path) == [dev.tokens]
    assert mint.token_of(dev.tokens.read_bytes()) == token


def test_a_missing_leaf_is_issued_by_the_ca_already_there(tmp_path) -> None:
    dev = devpki.generate(tmp_path)
    ca = x509.load_pem_x509_certificate(dev.cert("load_reader_ca").read_bytes())
    dev.cert("load_reader_client").unlink()
    dev.key("load_reader_client").unlink()
    assert sorted(devpki.ensure(tmp_path)) == sorted([dev.cert("load_reader_client"), dev.key("load_reader_client")])
    leaf = x509.load_pem_x509_certificate(dev.cert("load_reader_client").read_bytes())
    leaf.verify_directly_issued_by(ca)
    assert leaf.subject.rfc4514_string() == f"CN={pki.LOAD_READER_CN}"


def test_a_directory_from_before_load_readers_is_completed(tmp_path) -> None:
    """A PKI written before the load-reader CA existed gains it (the CA option 2b needs), keeping the rest."""
    dev = devpki.generate(tmp_path)
    for role in ("load_reader_ca", "load_reader_client"):
        dev.cert(role).unlink()
        dev.key(role).unlink()
    kept = dev.cert("server").read_bytes()
    assert len(devpki.ensure(tmp_path)) == 4 and dev.cert("server").read_bytes() == kept


def test_minting_is_pure_data() -> None:
    ca = mint.make_ca("x")
    cert, key = mint.pair(ca)
    assert cert.mode == 0o644 and key.mode == 0o600 and cert.data.startswith(b"-----BEGIN CERTIFICATE-----")
    assert mint.load_issued(cert.data, key.data).cert == ca.cert


@pytest.mark.parametrize("kept", ["cert", "key"])
def test_half_a_pair_is_never_completed(tmp_path, kept) -> None:
    dev = devpki.generate(tmp_path)
    (dev.key if kept == "cert" else dev.cert)("user").unlink()
    with pytest.raises(devpki.IncompletePKI, match="without"):
        devpki.ensure(tmp_path)
