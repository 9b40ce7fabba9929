"""Flag values and credential files: each bad input is one clear error naming the flag, never the content."""

from __future__ import annotations

from pathlib import Path

import pytest

from secure_orca import credential_flags as flags
from secure_orca import pki
from secure_orca.credentials import devpki
from secure_orca.credentials.loader import read_ca_bundle, read_key_pair, read_secrets
from secure_orca.errors import CredentialError, FlagError
from secure_orca.server.flags import parse_duration, parse_feature_gates, parse_list, parse_proxy


@pytest.mark.parametrize(("text", "seconds"), [("100ms", 0.1), ("1s", 1.0), ("1m30s", 90.0), ("0", 0.0), ("1.5s", 1.5)])
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "100", "ms", "1x", "-1s", "1s 2s", "1ss"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(FlagError, match="invalid duration"):
        parse_duration(text)


def test_feature_gates() -> None:
    assert parse_feature_gates("RequestCostAggregation=true") == {"RequestCostAggregation": True}
    assert parse_feature_gates(" RequestCostAggregation = False ,") == {"RequestCostAggregation": False}
    assert parse_feature_gates("") == {}
    for bad, rule in [
        ("Nope=true", "unrecognized"),
        ("RequestCostAggregation", "missing bool"),
        ("RequestCostAggregation=yes", "not a boolean"),
    ]:
        with pytest.raises(FlagError, match=rule):
            parse_feature_gates(bad)


def test_lists_and_proxy_routes() -> None:
    assert parse_list(" a, ,b ") == ["a", "b"]
    route = parse_proxy("/apis/metrics.k8s.io=http://127.0.0.1:9000/")
    assert (route.prefix, route.upstream) == ("/apis/metrics.k8s.io", "http://127.0.0.1:9000")
    for bad in ["apis=http://x", "/x", "/x=ftp://h", "/x=http://"]:
        with pytest.raises(FlagError):
            parse_proxy(bad)


@pytest.fixture()
def issued(tmp_path: Path) -> pki.DevPKI:
    return devpki.generate(tmp_path / "pki")


def write(path: Path, data: bytes, mode: int = 0o600) -> Path:
    path.write_bytes(data)
    path.chmod(mode)
    return path


def test_secret_file_rules(tmp_path: Path) -> None:
    good = write(tmp_path / "s", b"# rotated 2026-12\nfirst-secret-0123456789\n\nsecond-secret-0123456789\n")
    assert read_secrets(good, "--f") == ("first-secret-0123456789", "second-secret-0123456789")
    cases = {
        "holds no secret": write(tmp_path / "empty", b"\n# nothing\n"),
        "world-readable": write(tmp_path / "open", b"first-secret-0123456789\n", 0o644),
        "shorter than": write(tmp_path / "short", b"tiny\n"),
        "characters": write(tmp_path / "chars", b"has spaces in the secret ok\n"),
        "not ASCII": write(tmp_path / "utf", "sécret-sécret-sécret".encode()),
        "no such file": tmp_path / "missing",
        "is a directory": tmp_path,
    }
    for rule, path in cases.items():
        with pytest.raises(CredentialError, match=rule) as refused:
            read_secrets(path, "--endpoint-load-metrics-secret-file")
        assert str(refused.value).startswith("--endpoint-load-metrics-secret-file: ")
        assert "0123456789" not in str(refused.value) and "sécret" not in str(refused.value)


def test_cert_bundle_rules(tmp_path: Path, issued: pki.DevPKI) -> None:
    assert len(read_ca_bundle(issued.cert("front_proxy_ca"), "--x")) == 1
    for rule, data in [
        ("no PEM certificate", b"hello"),
        ("malformed", b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"),
    ]:
        with pytest.raises(CredentialError, match=rule):
            read_ca_bundle(write(tmp_path / "b.crt", data), "--requestheader-client-ca-file")


def check_key_pair(cert: Path, key: Path) -> None:
    read_key_pair(cert, key, flags.TLS_CERT, flags.TLS_KEY)


def test_key_pair_rules(tmp_path: Path, issued: pki.DevPKI) -> None:
    check_key_pair(issued.cert("server"), issued.key("server"))
    with pytest.raises(CredentialError, match=r"--tls-private-key-file: .* does not match"):
        check_key_pair(issued.cert("server"), issued.key("user"))
    with pytest.raises(CredentialError, match=r"--tls-private-key-file: .* no PEM private key"):
        check_key_pair(issued.cert("server"), issued.cert("ca"))
    with pytest.raises(CredentialError, match=r"--tls-cert-file: .* no such file"):
        check_key_pair(tmp_path / "nope.crt", issued.key("server"))


def test_pki_never_overwrites_without_force(tmp_path: Path) -> None:
    first = devpki.generate(tmp_path)
    before = first.cert("ca").read_bytes()
    with pytest.raises(FileExistsError, match="--force"):
        devpki.generate(tmp_path)
    assert first.cert("ca").read_bytes() == before
    devpki.generate(tmp_path, force=True)
    assert first.cert("ca").read_bytes() != before
    assert first.secret.stat().st_mode & 0o077 == 0 and first.key("ca").stat().st_mode & 0o077 == 0
