"""`secure-orca serve` and `certs` refuse bad input with one line naming the flag, exit 2, no traceback."""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from secure_orca import pki
from secure_orca.credentials import devpki
from secure_orca.lab import replicas as launch
from tests.commandline import base, run_cli, write
from tests.conftest import fp_flags
from tests.replicas import run_replicas


@pytest.fixture(scope="module")
def busy_port() -> Iterator[int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    yield sock.getsockname()[1]
    sock.close()


def bad_cases(p: pki.DevPKI, tmp: Path, busy_port: int) -> dict[str, tuple[list[str], str]]:
    garbage = write(tmp / "garbage.crt", b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
    empty_secret = write(tmp / "empty-secret", b"\n")
    open_secret = write(tmp / "open-secret", pki.new_secret().encode(), 0o644)
    no_names = write(tmp / "no-names", b"# nobody\n\n")
    fifo = tmp / "fifo-secret"
    os.mkfifo(fifo)
    gate = ["--feature-gates", "RequestCostAggregation=true"]
    fp = [*gate, "--enable-endpoint-load-metrics", "--endpoint-load-metrics-auth", "front-proxy,shared-secret"]
    return {
        "missing file": (
            [*base(p), *fp, "--requestheader-client-ca-file", str(tmp / "nope.crt")],
            "--requestheader-client-ca-file: .* no such file",
        ),
        "malformed CA": (
            [*base(p), *fp, "--requestheader-client-ca-file", garbage],
            "--requestheader-client-ca-file: .* malformed",
        ),
        "key mismatch": (
            [*base(p), "--tls-private-key-file", str(p.key("user"))],
            "--tls-private-key-file: .* does not match",
        ),
        "key is a cert": (
            [*base(p), "--tls-private-key-file", str(p.cert("ca"))],
            "--tls-private-key-file: .* no PEM private key",
        ),
        "cert without key": (["serve", "--tls-cert-file", str(p.cert("server"))], "must be given together"),
        "empty secret file": (
            [*base(p), *fp, "--endpoint-load-metrics-secret-file", empty_secret],
            "--endpoint-load-metrics-secret-file: .* holds no secret",
        ),
        "world-readable secret": (
            [*base(p), *fp, "--endpoint-load-metrics-secret-file", open_secret],
            "--endpoint-load-metrics-secret-file: .* world-readable",
        ),
        "unknown gate": ([*base(p), "--feature-gates", "Bogus=true"], "--feature-gates: unrecognized feature gate"),
        "bad duration": (
            [*base(p), "--endpoint-load-metrics-interval", "100"],
            "--endpoint-load-metrics-interval: invalid duration",
        ),
        "interval too short": ([*base(p), "--endpoint-load-metrics-interval", "10us"], "between 1ms and 60s"),
        "unknown mode": ([*base(p), "--endpoint-load-metrics-auth", "trust-me"], "unknown mode trust-me"),
        "flag without gate": ([*base(p), "--enable-endpoint-load-metrics"], "requires --feature-gates"),
        "no usable material": ([*base(p), *fp], "no listed mode is usable"),
        "shared CA, no names": (
            [*base(p), *fp, "--requestheader-client-ca-file", str(p.cert("client_ca"))],
            "--requestheader-allowed-names: must not be empty",
        ),
        "port in use": ([*base(p), "--secure-port", str(busy_port)], "already in use"),
        "bad port": ([*base(p), "--secure-port", "70000"], "--secure-port: 70000 is not a port"),
        "bad proxy": ([*base(p), "--proxy", "metrics=http://x"], "--proxy: invalid proxy route"),
        "bad proxy timeout": ([*base(p), "--proxy-timeout", "soon"], "--proxy-timeout: invalid duration"),
        "bad request timeout": ([*base(p), "--request-timeout", "soon"], "--request-timeout: invalid duration"),
        "request timeout zero": ([*base(p), "--request-timeout", "0"], "--request-timeout: must be between 10ms"),
        "goaway chance too high": ([*base(p), "--goaway-chance", "0.5"], "--goaway-chance: 0.5 is not between"),
        "too many workers": ([*base(p), "--workers", "65"], "--workers: 65 is not between 0 and 64"),
        "negative workers": ([*base(p), "--workers", "-1"], "--workers: -1 is not between 0 and 64"),
        "bad reload interval": ([*base(p), "--credential-reload-interval", "1ms"], "between 50ms and 1h"),
        "bad metrics address": ([*base(p), "--metrics-bind-address", "nowhere"], "--metrics-bind-address: invalid"),
        "metrics port in use": (
            [*base(p), "--metrics-bind-address", f"127.0.0.1:{busy_port}"],
            "--metrics-bind-address: cannot listen on 127.0.0.1:",
        ),
        "metrics port in use, workers": (  # /metrics in a process of its own, bound before it forks
            [*base(p), "--workers", "2", "--metrics-bind-address", f"127.0.0.1:{busy_port}"],
            "--metrics-bind-address: cannot listen on 127.0.0.1:",
        ),
        "names twice": (
            [*base(p), "--requestheader-allowed-names", "a", "--requestheader-allowed-names-file", str(tmp / "names")],
            "give either it or --requestheader-allowed-names",
        ),
        "bad decimals": ([*base(p), "--endpoint-load-metrics-decimals", "13"], "between 0 and 12"),
        "empty names file": (
            [
                *base(p),
                *fp,
                "--requestheader-client-ca-file",
                str(p.cert("front_proxy_ca")),
                "--requestheader-allowed-names-file",
                no_names,
            ],
            "--requestheader-allowed-names-file: .* names no one",
        ),
        "FIFO secret file": (
            [*base(p), *fp, "--endpoint-load-metrics-secret-file", str(fifo)],
            "--endpoint-load-metrics-secret-file: .* not a regular file",
        ),
    }


CASES = [
    "missing file",
    "malformed CA",
    "key mismatch",
    "key is a cert",
    "cert without key",
    "empty secret file",
    "world-readable secret",
    "unknown gate",
    "bad duration",
    "interval too short",
    "unknown mode",
    "flag without gate",
    "no usable material",
    "shared CA, no names",
    "port in use",
    "bad port",
    "bad proxy",
    "bad proxy timeout",
    "bad request timeout",
    "request timeout zero",
    "goaway chance too high",
    "too many workers",
    "negative workers",
    "bad reload interval",
    "bad metrics address",
    "metrics port in use",
    "metrics port in use, workers",
    "names twice",
    "bad decimals",
    "empty names file",
    "FIFO secret file",
]


def test_every_bad_case_is_run(dev_pki, tmp_path, busy_port) -> None:
    """CASES parametrizes the test below; a case added to ``bad_cases`` but not to CASES would never run."""
    assert sorted(CASES) == sorted(bad_cases(dev_pki, tmp_path, busy_port))
    assert len(set(CASES)) == len(CASES)


@pytest.mark.parametrize("case", CASES)
def test_bad_input_is_one_line_exit_2(dev_pki, tmp_path, busy_port, case) -> None:
    import re

    args, expected = bad_cases(dev_pki, tmp_path, busy_port)[case]
    result = run_cli(*args)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("secure-orca serve: error: ")
    assert re.search(expected, last), last
    assert dev_pki.secret.read_text().strip() not in result.stderr


def test_header_only_starts_with_a_warning(dev_pki) -> None:
    flags = [
        "--feature-gates",
        "RequestCostAggregation=true",
        "--enable-endpoint-load-metrics",
        "--endpoint-load-metrics-auth",
        "header-only",
    ]
    with run_replicas([launch.serve_argv(dev_pki, flags)]) as (replica,):
        pass
    assert any("WARNING" in line and "header-only" in line for line in replica.process.lines)


@pytest.mark.parametrize("host", ["127.0.0.1", "[::1]"])
def test_metrics_on_loopback_start_without_the_unauthenticated_warning(dev_pki, host: str) -> None:
    """The warning itself needs an address off loopback, which the tests do not bind (addresses.is_loopback is
    tested on its own)."""
    with run_replicas([launch.serve_argv(dev_pki, ["--metrics-bind-address", f"{host}:0"])]) as (replica,):
        pass
    assert any("metrics on http://" in line for line in replica.process.lines), replica.process.output()
    assert not any("not a loopback address" in line for line in replica.process.lines), replica.process.output()


def test_one_mode_without_material_is_noted(dev_pki) -> None:
    flags = fp_flags(dev_pki)
    cut = flags.index("--endpoint-load-metrics-secret-file")
    del flags[cut : cut + 2]
    with run_replicas([launch.serve_argv(dev_pki, flags)]) as (replica,):
        pass
    assert any("shared-secret is listed but has no material" in line for line in replica.process.lines)


def test_serve_without_tls_flags_creates_and_uses_the_dev_pki(tmp_path) -> None:
    argv = [sys.executable, "-m", "secure_orca", "serve", "--secure-port", "0", "--certs-dir", str(tmp_path / "c")]
    with run_replicas([argv]) as (replica,):
        pass
    out = "".join(replica.process.lines)
    assert "created a development PKI" in out and "load metrics on" in out
    assert not devpki.missing(pki.DevPKI(tmp_path / "c"))


def test_certs_command_completes_and_never_overwrites(tmp_path) -> None:
    first = run_cli("certs", "--dir", str(tmp_path))
    assert first.returncode == 0, first.stderr
    before = {p: p.read_bytes() for p in pki.DevPKI(tmp_path).all_paths()}
    again = run_cli("certs", "--dir", str(tmp_path))
    assert again.returncode == 0 and "nothing written" in again.stdout and "Traceback" not in again.stderr
    assert {p: p.read_bytes() for p in before} == before
    assert run_cli("certs", "--dir", str(tmp_path), "--force").returncode == 0
    assert all(p.read_bytes() != before[p] for p in before)


def test_certs_prints_every_client_identity_with_its_cn(tmp_path) -> None:
    out = run_cli("certs", "--dir", str(tmp_path)).stdout
    for cn in (pki.USER_CN, pki.FRONT_PROXY_CN, pki.LOAD_READER_CN):
        assert f"CN={cn}," in out
    assert f"jane: {tmp_path / pki.TOKENS_FILE}:" in out


def test_sigterm_stops_cleanly(dev_pki) -> None:
    with run_replicas([launch.serve_argv(dev_pki, fp_flags(dev_pki))]) as (replica,):
        assert replica.process.stop() == 0
