"""serve's options per concern: the development PKI fills in every CA the chosen modes need, errors name only
the modes asked for, and an allowed name that no certificate of the (development) CA carries is a start-up
warning. build_config reads and writes no file: it runs here on paths that do not exist."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from secure_orca import pki
from secure_orca.authz.policy import Mode
from secure_orca.cli import serve
from secure_orca.errors import UsageError
from secure_orca.server.config import build_config

NOWHERE = pki.DevPKI(Path("/nonexistent/certs"))  # build_config never opens these


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    serve.add_arguments(parser)
    return parser.parse_args(list(argv))


def explicit(*argv: str) -> argparse.Namespace:
    """Flags with a serving certificate (no development PKI) and the feature on."""
    gate = ("--feature-gates", "RequestCostAggregation=true", "--enable-endpoint-load-metrics")
    return parse("--tls-cert-file", "s.crt", "--tls-private-key-file", "s.key", *gate, *argv)


def test_the_development_pki_fills_in_the_load_reader_ca_and_its_one_name() -> None:
    config = build_config(parse(), NOWHERE)
    assert config.load_metrics.modes == {Mode.LOAD_READER}
    assert config.files.load_reader_ca == NOWHERE.cert("load_reader_ca")
    assert config.files.load_reader_names == (pki.LOAD_READER_CN,)
    assert config.files.token_file == NOWHERE.tokens and config.files.client_ca == NOWHERE.cert("client_ca")
    assert config.oob is not None


@pytest.mark.parametrize("modes", ["front-proxy", "shared-secret", "front-proxy,shared-secret,load-reader"])
def test_the_development_pki_fills_in_every_mode(modes: str) -> None:
    config = build_config(parse("--endpoint-load-metrics-auth", modes), NOWHERE)
    assert config.load_metrics.modes == {Mode(m) for m in modes.split(",")}


@pytest.mark.parametrize(
    ("modes", "named", "unnamed"),
    [
        ("load-reader", ["load-reader needs --endpoint-load-metrics-client-ca-file"], ["front-proxy", "shared"]),
        ("shared-secret", ["shared-secret needs --endpoint-load-metrics-secret-file"], ["front-proxy", "load-reader"]),
        ("front-proxy,load-reader", ["front-proxy needs", "load-reader needs"], ["shared-secret"]),
    ],
)
def test_an_error_names_only_the_modes_asked_for(modes: str, named: list[str], unnamed: list[str]) -> None:
    with pytest.raises(UsageError) as raised:
        build_config(explicit("--endpoint-load-metrics-auth", modes))
    message = str(raised.value)
    assert all(n in message for n in named), message
    assert not any(u in message for u in unnamed), message


@pytest.mark.parametrize(
    ("flag", "name"),
    [
        ("--endpoint-load-metrics-allowed-names", "load-reader-client"),  # the file's name, not the CN
        ("--requestheader-allowed-names", "front-proxy"),
    ],
)
def test_a_name_the_development_ca_never_issued_is_a_warning(flag: str, name: str) -> None:
    config = build_config(parse("--endpoint-load-metrics-auth", "load-reader,front-proxy", flag, name), NOWHERE)
    warnings = [n for n in config.notes if n.startswith("WARNING") and "can never match" in n]
    assert len(warnings) == 1 and flag in warnings[0] and repr(name) in warnings[0], config.notes


def test_the_same_files_named_explicitly_are_recognised(tmp_path: Path) -> None:
    dev = pki.DevPKI(tmp_path / "certs")
    args = explicit(
        "--endpoint-load-metrics-auth",
        "load-reader",
        "--endpoint-load-metrics-client-ca-file",
        str(dev.cert("load_reader_ca")),
        "--endpoint-load-metrics-allowed-names",
        "load-reader,lb",
        "--certs-dir",
        str(dev.root),
    )
    warnings = [n for n in build_config(args).notes if "can never match" in n]
    assert len(warnings) == 1 and "'lb'" in warnings[0]


def test_any_other_ca_may_sign_any_name_so_nothing_is_said() -> None:
    args = explicit(
        "--endpoint-load-metrics-auth",
        "load-reader",
        "--endpoint-load-metrics-client-ca-file",
        "/etc/lb/ca.crt",
        "--endpoint-load-metrics-allowed-names",
        "anything",
    )
    assert not [n for n in build_config(args).notes if "can never match" in n]


def test_every_problem_is_named_at_once() -> None:
    with pytest.raises(UsageError) as raised:
        build_config(explicit("--secure-port", "70000", "--audit-log-maxsize", "-1", "--proxy-timeout", "soon"))
    message = str(raised.value)
    assert "--secure-port" in message and "--audit-log-maxsize" in message and "--proxy-timeout" in message


def test_building_a_configuration_mutates_no_flag() -> None:
    args = parse()
    before = vars(args).copy()
    build_config(args, NOWHERE)
    assert vars(args) == before


@pytest.mark.parametrize("value", ["-1", "10001"])
def test_the_streams_per_connection_are_bounded(value: str) -> None:
    with pytest.raises(UsageError, match="--http2-max-streams-per-connection"):
        build_config(explicit("--http2-max-streams-per-connection", value))


def test_the_streams_per_connection_reach_the_serving_config() -> None:
    assert build_config(parse(), NOWHERE).serving.h2_max_streams == 0  # hypercorn's 100
    assert build_config(parse("--http2-max-streams-per-connection", "1000"), NOWHERE).serving.h2_max_streams == 1000
