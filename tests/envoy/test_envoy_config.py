"""The generated Envoy bootstrap: structure per option and policy (pure), the file format, the CLI, and
``envoy --mode validate`` on every combination (skipped only when envoy is not installed)."""

from __future__ import annotations

import itertools
import json
import stat
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from secure_orca import cli, pki
from secure_orca.envoy import bootstrap as envoy
from secure_orca.envoy import files
from secure_orca.lab import launcher as lb
from secure_orca.orca.headers import OPTIN

UPSTREAMS = (envoy.Upstream("127.0.0.1", 7001), envoy.Upstream("::1", 7002))
ZONED = (envoy.Upstream("127.0.0.1", 7001, "zone-a"), envoy.Upstream("127.0.0.1", 7002, "zone-b"))
needs_envoy = pytest.mark.skipif(not lb.envoy_available(), reason="envoy not installed (extra 'envoy')")


def config(dev: pki.DevPKI, upstreams: tuple[envoy.Upstream, ...] = UPSTREAMS, **settings: Any) -> envoy.LBConfig:
    settings.setdefault("sds_path", Path("/nonexistent/sds.yaml"))
    return files.dev_config(dev, upstreams, **settings)


def hcm(bootstrap: dict[str, Any]) -> dict[str, Any]:
    listener = bootstrap["static_resources"]["listeners"][0]
    return listener["filter_chains"][0]["filters"][0]["typed_config"]


def all_routes(bootstrap: dict[str, Any]) -> list[dict[str, Any]]:
    """The routes to the replicas (Envoy's own refusals come before them: tests/hostile/test_envoy_oob_path.py)."""
    return [r for r in hcm(bootstrap)["route_config"]["virtual_hosts"][0]["routes"] if "route" in r]


def the_route(bootstrap: dict[str, Any]) -> dict[str, Any]:
    """The catch-all route (the last one); the first differs only in its match and retry_on."""
    return all_routes(bootstrap)[-1]


def the_cluster(bootstrap: dict[str, Any]) -> dict[str, Any]:
    return bootstrap["static_resources"]["clusters"][0]


def filter_names(bootstrap: dict[str, Any]) -> list[str]:
    return [f["name"] for f in hcm(bootstrap)["http_filters"]]


def lb_policy(bootstrap: dict[str, Any]) -> dict[str, Any]:
    return the_cluster(bootstrap)["load_balancing_policy"]["policies"][0]["typed_extension_config"]


# ---- parsing upstreams ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("127.0.0.1:6443", envoy.Upstream("127.0.0.1", 6443)),
        ("localhost:1@zone-a", envoy.Upstream("localhost", 1, "zone-a")),
        ("[::1]:6443@b", envoy.Upstream("::1", 6443, "b")),
        (" 10.0.0.1:443 ", envoy.Upstream("10.0.0.1", 443)),
    ],
)
def test_parse_upstream(spec: str, expected: envoy.Upstream) -> None:
    assert envoy.parse_upstream(spec) == expected


@pytest.mark.parametrize("spec", ["127.0.0.1", ":6443", "::1:6443", "[zz]:1", "h:0", "h:70000", "h:1@", "h:1@a b"])
def test_parse_upstream_refuses(spec: str) -> None:
    with pytest.raises(envoy.ConfigError):
        envoy.parse_upstream(spec)


# ---- structure per option -----------------------------------------------------------------------------------


@pytest.mark.parametrize("option", envoy.OPTIONS)
def test_every_option_strips_orca_and_replaces_the_client_optin(dev_pki: pki.DevPKI, option: str) -> None:
    boot = envoy.build_bootstrap(config(dev_pki, option=option))
    route = the_route(boot)
    # the legacy JSON header too: older Envoys read it, and a backend's value must not reach clients either way
    expected = ["endpoint-load-metrics", "endpoint-load-metrics-bin", "endpoint-load-metrics-json"]
    assert route["response_headers_to_remove"] == expected
    names = filter_names(boot)
    assert names[0] == "envoy.filters.http.header_mutation" and names[-1] == "envoy.filters.http.router"
    mutations = hcm(boot)["http_filters"][0]["typed_config"]["mutations"]
    assert mutations["request_mutations"] == [{"remove": OPTIN}]
    assert [m["remove"] for m in mutations["response_trailers_mutations"]] == expected
    retry = route["route"]["retry_policy"]
    assert {"refused-stream", "reset-before-request"} <= set(retry["retry_on"].split(","))
    assert not {"5xx", "reset", "gateway-error"} & set(retry["retry_on"].split(","))
    safe, catch_all = all_routes(boot)
    assert {k: v for k, v in safe.items() if k not in ("match", "route")} == {
        k: v for k, v in catch_all.items() if k not in ("match", "route")
    }
    assert safe["match"]["headers"][0]["string_match"]["safe_regex"]["regex"] == "GET|HEAD|OPTIONS"
    assert set(safe["route"]["retry_policy"]["retry_on"].split(",")) == set(retry["retry_on"].split(",")) | {"reset"}
    assert the_cluster(boot)["circuit_breakers"]["thresholds"][0]["max_retries"] >= 64
    assert boot["admin"]["address"]["socket_address"]["address"] == "127.0.0.1"


@pytest.mark.parametrize("option", envoy.OPTIONS)
def test_client_certificate_upstream_only_for_its_option(dev_pki: pki.DevPKI, option: str) -> None:
    tls = the_cluster(envoy.build_bootstrap(config(dev_pki, option=option)))["transport_socket"]["typed_config"]
    common = tls["common_tls_context"]
    assert common["validation_context"]["trusted_ca"]["filename"] == str(dev_pki.cert("ca"))
    assert common["validation_context"]["match_typed_subject_alt_names"] == [
        {"san_type": "DNS", "matcher": {"exact": "localhost"}}
    ]
    assert tls["sni"] == "localhost"
    assert common["alpn_protocols"] == ["h2"]
    presented = {"front-proxy": "front_proxy_client", "load-reader": "load_reader_client"}
    role = next((r for mode, r in presented.items() if mode in option), None)
    if role is not None:
        assert common["tls_certificates"][0]["certificate_chain"]["filename"] == str(dev_pki.cert(role))
    else:
        assert "tls_certificates" not in common


def test_ip_server_name_checks_an_ip_san_without_sni(dev_pki: pki.DevPKI) -> None:
    tls = the_cluster(envoy.build_bootstrap(config(dev_pki, server_name="127.0.0.1")))["transport_socket"]
    typed = tls["typed_config"]
    assert "sni" not in typed
    assert typed["common_tls_context"]["validation_context"]["match_typed_subject_alt_names"][0]["san_type"] == (
        "IP_ADDRESS"
    )


def test_downstream_listener_offers_h2_and_http11(dev_pki: pki.DevPKI) -> None:
    chain = envoy.build_bootstrap(config(dev_pki))["static_resources"]["listeners"][0]["filter_chains"][0]
    assert chain["transport_socket"]["typed_config"]["common_tls_context"]["alpn_protocols"] == ["h2", "http/1.1"]


@pytest.mark.parametrize("option", ["front-proxy", "header-only"])
def test_optin_without_secret_is_set_with_overwrite(dev_pki: pki.DevPKI, option: str) -> None:
    boot = envoy.build_bootstrap(config(dev_pki, option=option))
    assert the_route(boot)["request_headers_to_add"] == [
        {"header": {"key": OPTIN, "value": "TEXT"}, "append_action": "OVERWRITE_IF_EXISTS_OR_ADD"}
    ]
    assert "envoy.filters.http.credential_injector" not in filter_names(boot)


@pytest.mark.parametrize("fmt", ["JSON", "BIN"])
def test_the_optin_asks_for_the_configured_format(dev_pki: pki.DevPKI, fmt: str) -> None:
    boot = envoy.build_bootstrap(config(dev_pki, option="front-proxy", report_format=fmt))
    assert the_route(boot)["request_headers_to_add"][0]["header"] == {"key": OPTIN, "value": fmt}
    sds = envoy.build_bootstrap(config(dev_pki, option="shared-secret", report_format=fmt))
    injector = next(f for f in hcm(sds)["http_filters"] if f["name"] == "envoy.filters.http.credential_injector")
    assert injector["typed_config"]["credential"]["typed_config"]["header_value_prefix"] == f"{fmt}; secret="


@pytest.mark.parametrize("fmt", ["text", "XML", "TEXT; secret=x"])
def test_a_format_envoy_does_not_parse_is_refused(dev_pki: pki.DevPKI, fmt: str) -> None:
    for option in ("front-proxy", "shared-secret"):
        with pytest.raises(envoy.ConfigError, match="report format"):
            envoy.build_bootstrap(config(dev_pki, option=option, report_format=fmt))


@pytest.mark.parametrize("option", ["shared-secret", "front-proxy,shared-secret"])
def test_secret_by_sds_stays_out_of_the_bootstrap(dev_pki: pki.DevPKI, option: str) -> None:
    secret = dev_pki.secret.read_text().strip()
    boot = envoy.build_bootstrap(config(dev_pki, option=option))
    assert secret not in json.dumps(boot)
    assert "request_headers_to_add" not in the_route(boot)
    injector = next(f for f in hcm(boot)["http_filters"] if f["name"] == "envoy.filters.http.credential_injector")
    typed = injector["typed_config"]
    assert typed["overwrite"] is True
    generic = typed["credential"]["typed_config"]
    assert generic["header"] == OPTIN and generic["header_value_prefix"] == "TEXT; secret="
    assert generic["credential"]["sds_config"]["path_config_source"]["path"] == "/nonexistent/sds.yaml"
    resource = envoy.sds_resource(config(dev_pki, option=option))["resources"][0]
    assert resource["generic_secret"]["secret"] == {"filename": str(dev_pki.secret)}


def test_secret_inline_uses_overwrite_and_a_private_file(dev_pki: pki.DevPKI, tmp_path: Path) -> None:
    secret = dev_pki.secret.read_text().strip()
    cfg = config(dev_pki, option="shared-secret", secret_delivery="inline")
    assert the_route(envoy.build_bootstrap(cfg))["request_headers_to_add"] == [
        {"header": {"key": OPTIN, "value": f"TEXT; secret={secret}"}, "append_action": "OVERWRITE_IF_EXISTS_OR_ADD"}
    ]
    out = tmp_path / "envoy.yaml"
    assert files.write(cfg, out) == [out]
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert "CONTAINS THE SHARED SECRET" in out.read_text()


def test_write_sds_delivery_writes_two_public_files(dev_pki: pki.DevPKI, tmp_path: Path) -> None:
    out = tmp_path / "lb.yaml"
    written = files.write(files.dev_config(dev_pki, UPSTREAMS, option="shared-secret"), out)
    assert written == [out, tmp_path / "lb-secret-sds.yaml"]
    secret = dev_pki.secret.read_text().strip()
    for path in written:
        assert secret not in path.read_text()
        assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert str(written[1]) in out.read_text()


def test_lb_secret_file_must_hold_one_secret(dev_pki: pki.DevPKI, tmp_path: Path) -> None:
    two = tmp_path / "two"
    two.write_text("a-secret-of-enough-length-1234567890\nanother-secret-of-enough-length-123456\n")
    two.chmod(0o600)
    creds = files.dev_credentials(dev_pki)
    cfg = envoy.LBConfig(UPSTREAMS, envoy.Credentials(**{**creds.__dict__, "secret_file": two}), option="shared-secret")
    with pytest.raises(envoy.ConfigError, match="exactly one secret"):
        files.write(cfg, tmp_path / "out.yaml")


# ---- identity: the authenticating front proxy ------------------------------------------------------------------


def lua_of(bootstrap: dict[str, Any]) -> str:
    (lua,) = [f for f in hcm(bootstrap)["http_filters"] if f["name"] == "envoy.filters.http.lua"]
    return lua["typed_config"]["default_source_code"]["inline_string"]


@pytest.mark.parametrize("option", envoy.OPTIONS)
def test_every_option_strips_client_identity_headers(dev_pki: pki.DevPKI, option: str) -> None:
    boot = envoy.build_bootstrap(config(dev_pki, option=option))
    lua = lua_of(boot)
    assert '"x-remote-user", "x-remote-group", "x-remote-uid"' in lua and '{"x-remote-extra-"}' in lua
    names = [f["name"] for f in hcm(boot)["http_filters"]]
    assert names.index("envoy.filters.http.lua") < names.index("envoy.filters.http.router")
    assert hcm(boot)["common_http_protocol_options"] == {"headers_with_underscores_action": "DROP_HEADER"}
    asserts = "front-proxy" in option
    assert ("local AUTHENTICATE = true" in lua) is asserts
    downstream = boot["static_resources"]["listeners"][0]["filter_chains"][0]["transport_socket"]["typed_config"]
    if asserts:
        assert downstream["common_tls_context"]["validation_context"] == {
            "trusted_ca": {"filename": str(dev_pki.cert("client_ca"))}
        }
        assert downstream["require_client_certificate"] is False  # token and anonymous clients still connect
    else:
        assert "validation_context" not in downstream["common_tls_context"]


def test_configured_identity_header_names_are_stripped_and_set(dev_pki: pki.DevPKI) -> None:
    names = envoy.IdentityHeaders(username=("X-User", "X-Remote-User"), group=("X-Groups",), extra_prefix=("X-E-",))
    lua = lua_of(envoy.build_bootstrap(config(dev_pki, option="front-proxy", identity=names)))
    assert '"x-user", "x-remote-user", "x-groups", "x-remote-uid"' in lua and '{"x-e-"}' in lua
    assert 'local USER_HEADER = "X-User"' in lua and 'local GROUP_HEADER = "X-Groups"' in lua
    assert lua.endswith(envoy.IDENTITY_LUA)  # the program itself, after the prologue that names them


@pytest.mark.parametrize("bad", ["X Remote", 'X-"User"', "", "X-User\r\nInjected: 1", "x-user:"])
def test_identity_header_names_must_be_tokens(dev_pki: pki.DevPKI, bad: str) -> None:
    with pytest.raises(envoy.ConfigError, match="not an HTTP header name"):
        envoy.build_bootstrap(config(dev_pki, option="front-proxy", identity=envoy.IdentityHeaders(username=(bad,))))


def test_without_a_client_ca_the_front_proxy_asserts_nothing(dev_pki: pki.DevPKI) -> None:
    creds = replace(files.dev_credentials(dev_pki), client_ca=None)
    cfg = envoy.LBConfig(UPSTREAMS, creds, option="front-proxy")
    assert not cfg.authenticates and "local AUTHENTICATE = false" in lua_of(envoy.build_bootstrap(cfg))


# ---- load balancing policy ------------------------------------------------------------------------------------


def test_cswrr_is_the_default_with_explicit_penalty_and_periods(dev_pki: pki.DevPKI) -> None:
    policy = lb_policy(envoy.build_bootstrap(config(dev_pki)))
    assert policy["name"] == "envoy.load_balancing_policies.client_side_weighted_round_robin"
    typed = policy["typed_config"]
    assert typed["error_utilization_penalty"] == 1.0
    assert (typed["blackout_period"], typed["weight_update_period"], typed["weight_expiration_period"]) == (
        "10s",
        "1s",
        "180s",
    )


def test_test_timing_is_short(dev_pki: pki.DevPKI) -> None:
    typed = lb_policy(envoy.build_bootstrap(config(dev_pki, timing=envoy.TEST_TIMING)))["typed_config"]
    assert (typed["blackout_period"], typed["weight_update_period"], typed["weight_expiration_period"]) == (
        "1s",
        "0.1s",
        "3s",
    )


def test_round_robin_on_request(dev_pki: pki.DevPKI) -> None:
    policy = lb_policy(envoy.build_bootstrap(config(dev_pki, policy="round-robin")))
    assert policy["name"] == "envoy.load_balancing_policies.round_robin"


@pytest.mark.parametrize("policy", envoy.POLICIES)
def test_zones_wrap_the_policy_in_load_aware_locality(dev_pki: pki.DevPKI, policy: str) -> None:
    boot = envoy.build_bootstrap(config(dev_pki, ZONED, policy=policy))
    outer = lb_policy(boot)
    assert outer["name"] == "envoy.load_balancing_policies.load_aware_locality"
    inner = outer["typed_config"]["endpoint_picking_policy"]["policies"][0]["typed_extension_config"]
    assert inner["name"] == lb_policy(envoy.build_bootstrap(config(dev_pki, policy=policy)))["name"]
    assert outer["typed_config"]["utilization_variance_threshold"] == 0.1
    assert outer["typed_config"]["remote_probe_fraction"] == 0.03
    assert boot["node"]["locality"] == {"zone": "zone-a"}
    groups = the_cluster(boot)["load_assignment"]["endpoints"]
    assert [g["locality"]["zone"] for g in groups] == ["zone-a", "zone-b"]


def test_local_zone_can_be_chosen(dev_pki: pki.DevPKI) -> None:
    assert envoy.build_bootstrap(config(dev_pki, ZONED, local_zone="zone-b"))["node"]["locality"] == {"zone": "zone-b"}


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"option": "bogus"}, "option"),
        ({"policy": "random"}, "policy"),
        ({"upstreams": ()}, "at least one upstream"),
        ({"upstreams": (ZONED[0], UPSTREAMS[1])}, "every upstream a zone"),
        ({"upstreams": ZONED, "local_zone": "zone-c"}, "local zone"),
        ({"admin_host": "0.0.0.0"}, "loopback"),
        ({"secret_delivery": "env"}, "secret delivery"),
    ],
)
def test_inconsistent_settings_are_refused(dev_pki: pki.DevPKI, settings: dict[str, Any], message: str) -> None:
    upstreams = settings.pop("upstreams", UPSTREAMS)
    with pytest.raises(envoy.ConfigError, match=message):
        envoy.build_bootstrap(config(dev_pki, upstreams, **settings))


# ---- the file format ------------------------------------------------------------------------------------------


def test_bootstrap_file_is_json_after_comment_lines(dev_pki: pki.DevPKI) -> None:
    boot = envoy.build_bootstrap(config(dev_pki, option="header-only"))
    text = envoy.render(boot, header="one\ntwo")
    comments, _, body = text.partition("\n{")
    assert comments.splitlines() == ["# one", "# two"]
    assert json.loads("{" + body) == boot


def test_write_leaves_no_temporary_file_and_replaces_atomically(dev_pki: pki.DevPKI, tmp_path: Path) -> None:
    out = tmp_path / "envoy.yaml"
    out.write_text("old")
    planted = tmp_path / ".envoy.yaml.tmp"  # the name the old writer used: a symlink here must not be followed
    planted.symlink_to(tmp_path / "victim")
    assert files.write(config(dev_pki, option="header-only"), out) == [out]
    assert not (tmp_path / "victim").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [".envoy.yaml.tmp", "envoy.yaml"]
    assert "static_resources" in json.loads("{" + out.read_text().partition("\n{")[2])


# ---- envoy --mode validate on every combination --------------------------------------------------------------


@pytest.mark.envoy
@needs_envoy
@pytest.mark.parametrize(
    ("option", "policy", "zoned", "delivery"),
    [
        combo
        for combo in itertools.product(envoy.OPTIONS, envoy.POLICIES, (False, True), envoy.SECRET_DELIVERIES)
        if combo[3] == "sds" or "shared-secret" in combo[0]  # inline delivery only where there is a secret
    ],
)
def test_envoy_validates(
    dev_pki: pki.DevPKI, tmp_path: Path, option: str, policy: str, zoned: bool, delivery: str
) -> None:
    out = tmp_path / "envoy.yaml"
    cfg = files.dev_config(
        dev_pki,
        ZONED if zoned else UPSTREAMS,
        option=option,
        policy=policy,
        secret_delivery=delivery,
        timing=envoy.TEST_TIMING,
    )
    files.write(cfg, out)
    ok, output = files.validate(out)
    assert ok, output
    assert "Unknown retry_on" not in output


@pytest.mark.envoy
@needs_envoy
def test_validate_rejects_a_broken_config(dev_pki: pki.DevPKI, tmp_path: Path) -> None:
    out = tmp_path / "envoy.yaml"
    boot = envoy.build_bootstrap(config(dev_pki, option="header-only"))
    lb_policy(boot)["typed_config"]["blackout_period"] = "soon"
    out.write_text(envoy.render(boot))
    ok, output = files.validate(out)
    assert not ok and "blackout_period" in output


@pytest.mark.envoy
@needs_envoy
def test_envoy_compiles_identity_lua(dev_pki: pki.DevPKI, tmp_path: Path) -> None:
    """identity.lua is a Lua file a tool checks: Envoy's validator loads it after its prologue (and runs its top
    level), and refuses it with one `end` missing."""
    out = tmp_path / "envoy.yaml"
    boot = envoy.build_bootstrap(config(dev_pki, option="header-only"))
    (lua,) = [f for f in hcm(boot)["http_filters"] if f["name"] == "envoy.filters.http.lua"]
    source = lua["typed_config"]["default_source_code"]
    assert source["inline_string"].endswith(envoy.IDENTITY_LUA)
    out.write_text(envoy.render(boot))
    ok, output = files.validate(out)
    assert ok, output
    source["inline_string"] = source["inline_string"].replace("\nend\n", "\n", 1)
    out.write_text(envoy.render(boot))
    ok, output = files.validate(out)
    assert not ok and "script load error" in output


# ---- the CLI ------------------------------------------------------------------------------------------------


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(["envoy-config", *argv])
    out, err = capsys.readouterr()
    return code, out, err


@needs_envoy
@pytest.mark.envoy
def test_cli_writes_and_validates(dev_pki: pki.DevPKI, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "lb.yaml"
    code, stdout, _ = run_cli(
        capsys,
        "--certs-dir",
        str(dev_pki.root),
        "--upstream",
        "127.0.0.1:7001@a",
        "--upstream",
        "[::1]:7002@b",
        "--timing",
        "test",
        "--option",
        "front-proxy,shared-secret",
        "-o",
        str(out),
        "--validate",
    )
    assert code == 0
    assert "validate OK" in stdout and (tmp_path / "lb-secret-sds.yaml").exists()
    assert "load_aware_locality" in out.read_text()


def test_cli_prints_to_stdout_without_secret(dev_pki: pki.DevPKI, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(
        capsys,
        "--certs-dir",
        str(dev_pki.root),
        "--upstream",
        "127.0.0.1:7001",
        "--option",
        "front-proxy",
        "--policy",
        "round-robin",
    )
    assert code == 0 and "envoy.load_balancing_policies.round_robin" in out and "front-proxy-client.crt" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "--upstream: give at least one"),
        (["--upstream", "h:99999"], "--upstream"),
        (["--upstream", "h:1", "--option", "nope"], "--option"),
        (["--upstream", "h:1", "--option", "shared-secret"], "--output"),  # SDS delivery needs a file
        (["--upstream", "h:1", "--option", "header-only", "--listen", "h"], "--listen"),
        (["--upstream", "h:1@a", "--upstream", "h:2", "-o", "x.yaml"], "every upstream a zone"),
        (
            ["--upstream", "h:1", "--option", "front-proxy", "--requestheader-username-headers", "X User"],
            "not an HTTP header name",
        ),
        (["--upstream", "h:1", "--option", "front-proxy", "--requestheader-group-headers", ""], "at least one"),
        (
            ["--upstream", "h:1", "--option", "load-reader", "--load-reader-cert-file", "/nonexistent.crt"],
            "--load-reader-cert-file",
        ),
        (["--upstream", "h:1", "--option", "front-proxy", "--client-ca-file", "/nonexistent.crt"], "--client-ca-file"),
    ],
)
def test_cli_errors_are_one_line(
    dev_pki: pki.DevPKI, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, _, err = run_cli(capsys, "--certs-dir", str(dev_pki.root), *argv)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("secure-orca envoy-config: error: ") and message in err


def test_cli_missing_dev_pki_names_the_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "--certs-dir", str(tmp_path / "none"), "--upstream", "h:1", "-o", "x.yaml")
    assert code == 2 and "--tls-cert-file" in err and "secure-orca certs" in err


# ---- out-of-band reports (StreamCoreMetrics, Envoy PR 44403) ------------------------------------------------


@pytest.mark.parametrize("option", envoy.OOB_OPTIONS)
def test_out_of_band_enables_oob_reports_and_sets_no_optin(dev_pki: pki.DevPKI, option: str) -> None:
    boot = envoy.build_bootstrap(config(dev_pki, option=option, oob_period=1.0))
    typed = lb_policy(boot)["typed_config"]
    assert (typed["enable_oob_load_report"], typed["oob_reporting_period"]) == (True, "1s")
    for route in all_routes(boot):
        assert "request_headers_to_add" not in route  # no request opts in
        assert set(route["response_headers_to_remove"]) == set(envoy.ORCA_RESPONSE_HEADERS)
    assert "envoy.filters.http.credential_injector" not in filter_names(boot)
    assert OPTIN not in json.dumps(all_routes(boot))
    tls = the_cluster(boot)["transport_socket"]["typed_config"]["common_tls_context"]
    assert len(tls["tls_certificates"]) == 1  # the certificate that entitles the stream


def test_in_band_has_no_oob_fields(dev_pki: pki.DevPKI) -> None:
    assert "enable_oob_load_report" not in lb_policy(envoy.build_bootstrap(config(dev_pki)))["typed_config"]


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"option": "front-proxy,shared-secret"}, "entitled by certificate"),
        ({"option": "header-only"}, "entitled by certificate"),
        ({"option": "front-proxy", "policy": "round-robin"}, "cswrr"),
        ({"option": "front-proxy", "oob_period": 0.0}, "between"),
    ],
)
def test_out_of_band_refuses_what_cannot_work(dev_pki: pki.DevPKI, settings: dict[str, Any], message: str) -> None:
    with pytest.raises(envoy.ConfigError, match=message):
        envoy.build_bootstrap(config(dev_pki, **{"oob_period": 1.0, **settings}))


@pytest.mark.envoy
@needs_envoy
@pytest.mark.parametrize(("option", "zoned"), list(itertools.product(envoy.OOB_OPTIONS, (False, True))))
def test_envoy_validates_out_of_band(dev_pki: pki.DevPKI, tmp_path: Path, option: str, zoned: bool) -> None:
    out = tmp_path / "envoy.yaml"
    cfg = files.dev_config(dev_pki, ZONED if zoned else UPSTREAMS, option=option, oob_period=0.5)
    files.write(cfg, out)
    ok, output = files.validate(out)
    assert ok, output
    assert "enable_oob_load_report" in out.read_text()


@needs_envoy
@pytest.mark.envoy
def test_cli_out_of_band(dev_pki: pki.DevPKI, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "lb.yaml"
    argv = ["--certs-dir", str(dev_pki.root), "--upstream", "127.0.0.1:7001", "--option", "load-reader"]
    code, stdout, _ = run_cli(capsys, *argv, "--out-of-band", "2s", "-o", str(out), "--validate")
    assert code == 0 and "validate OK" in stdout
    assert '"oob_reporting_period": "2s"' in out.read_text()
    code, _, err = run_cli(capsys, *argv, "--out-of-band", "soon")
    assert code != 0 and "--out-of-band" in err and "Traceback" not in err
