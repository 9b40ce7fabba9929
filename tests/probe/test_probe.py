"""The bypass-client audit: pure parts (vectors, classification, statistics, verdict) and runs against our own
server in each configuration (real replicas on 127.0.0.1)."""

from __future__ import annotations

import json
import math
import random
import threading
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from secure_orca import cli, pki
from secure_orca.lab import launcher as lb
from secure_orca.lab import replicas as launch
from secure_orca.orca import oob
from secure_orca.probe import audit as probe
from secure_orca.probe import stats as probe_stats
from secure_orca.probe import transport as probe_transport
from secure_orca.probe import vectors as probe_vectors
from secure_orca.probe import verdict as probe_verdict
from secure_orca.probe.audit import ProbeConfig
from secure_orca.probe.verdict import Exchange
from tests.conftest import fp_flags
from tests.leaky import leaky_server
from tests.replicas import replica_fixture, run_replicas

SECRET = "s3cr3t-" + "x" * 36

# --- pure -------------------------------------------------------------------------------------------------


def _vectors(**kwargs: Any) -> list[probe_vectors.Vector]:
    identities = [probe_vectors.NO_CERT, *probe_vectors.mint_identities("front-proxy-client")]
    return probe_vectors.build_vectors(("/version", "/proxied/x"), identities, seed=1, **kwargs)


def test_vectors_cover_every_protocol_identity_and_path() -> None:
    vectors = _vectors()
    names = [v.name for v in vectors]
    assert len(names) == len(set(names))
    assert {v.protocol for v in vectors} == set(probe_vectors.PROTOCOLS)
    assert {v.identity for v in vectors} == {"none", "self-signed", "wrong-ca", "expired", "wrong-eku"}
    assert {v.path for v in vectors} == {
        "/version",
        "/proxied/x",
        probe_vectors.SELF_SUBJECT_REVIEWS,
        oob.PATH,
        *probe_vectors.LOAD_ENDPOINTS,
    }
    assert {v.group for v in vectors} == {
        "identity",
        "header",
        "secret",
        "path",
        "cleartext",
        "impersonation",
        "spelling",
        "oob",
        "load-endpoint",
    }
    variants = {v.variant for v in vectors}
    assert {"no-opt-in", "TEXT", "JSON", "BIN", "lowercase", "duplicate", "long-value", "non-ascii-utf8"} <= variants
    assert {"secret-empty", "secret-wrong", "secret-duplicate"} <= variants
    assert "secret-prefix-half" in {v.variant for v in _vectors(known_secret=SECRET)}
    assert all(v.description and v.shown for v in vectors if v.variant != "no-opt-in")


def test_a_body_makes_the_audited_paths_posts_of_it() -> None:
    """``--body``: a completion endpoint answers only POST; the out-of-band and impersonation vectors keep theirs."""
    body = b'{"prompt": "hi", "max_tokens": 1}'
    vectors = _vectors(body=body)
    audited = [v for v in vectors if v.path in ("/version", "/proxied/x")]
    assert audited and all(v.method == "POST" and v.body == body for v in audited)
    assert all(v.body != body for v in vectors if v.path not in ("/version", "/proxied/x"))
    lb = probe_vectors.mint_identities("front-proxy-client")[0]
    control = probe_vectors.control_vectors("/version", lb, SECRET, body=body)
    assert [v.method for v in control if v.path == "/version"] == ["POST", "POST"]
    assert {v.method for v in _vectors() if v.path == "/version"} == {"GET"}


@pytest.mark.parametrize("value", ["not json", "{" * 3, "x" * 70000])
def test_the_body_flag_must_be_json(value: str) -> None:
    from secure_orca.cli import probe as probe_cli
    from secure_orca.errors import UsageError

    with pytest.raises(UsageError, match="--body"):
        probe_cli._body(value)


def test_vectors_never_show_or_send_the_real_secret() -> None:
    vectors = _vectors(known_secret=SECRET, secret_guess="candidate-" + "g" * 30)
    for v in vectors:
        assert SECRET not in repr(v) and SECRET not in json.dumps(v.to_json())
        assert "candidate-" not in repr(v) and "candidate-" not in json.dumps(v.to_json())
        assert (probe_vectors.OPTIN, f"TEXT; secret={SECRET}".encode()) not in v.headers
    secret_values = {value for v in vectors if v.group == "secret" for _, value in v.headers}
    assert f"TEXT; secret={SECRET[:-1]}".encode() in secret_values  # a near miss of the real secret
    assert b"TEXT; secret=candidate-" + b"g" * 30 in secret_values  # the given guess


def test_wrong_secret_has_the_real_length() -> None:
    (wrong,) = [v for v in _vectors(known_secret=SECRET) if v.variant == "secret-wrong" and v.protocol == "h2"]
    assert len(wrong.headers[0][1]) == len(f"TEXT; secret={SECRET}")


def test_controls_use_the_lb_credentials() -> None:
    lb = probe_vectors.Identity("lb", "lb", Path("lb.crt"), Path("lb.key"))
    controls = probe.control_vectors("/version", lb, SECRET)
    assert [(c.identity, c.protocol, c.path) for c in controls] == [
        ("lb", "h2", "/version"),
        ("lb", "h2", oob.PATH),  # the out-of-band stream, with the same certificate
        ("none", "h2", "/version"),
    ]
    assert controls[2].headers == ((probe_vectors.OPTIN, f"TEXT; secret={SECRET}".encode()),)
    assert SECRET not in repr(controls) and "<redacted>" in controls[2].shown[0]
    assert probe.control_vectors("/version", None, None) == []


@pytest.mark.parametrize("index", [0, -1, 5])
def test_flip_changes_one_character_and_keeps_the_length(index: int) -> None:
    flipped = probe_vectors.flip(SECRET, index, random.Random(0))
    assert len(flipped) == len(SECRET)
    assert [i for i, (a, b) in enumerate(zip(flipped, SECRET, strict=True)) if a != b] == [index % len(SECRET)]


def test_find_orca_in_headers_and_trailers() -> None:
    assert probe_verdict.find_orca([(b"Endpoint-Load-Metrics", b"TEXT cpu_utilization=0.3")], []) == [
        "header endpoint-load-metrics"
    ]
    assert probe_verdict.find_orca([(b"endpoint-load-metrics-bin", b"CQAAAA==")], []) == [
        "header endpoint-load-metrics-bin"
    ]
    assert probe_verdict.find_orca([], [(b"x-load", b"TEXT cpu_utilization=0.3, rps_fractional=2")]) == [
        "trailer x-load"
    ]
    assert probe_verdict.find_orca([(b"x-load", b"TEXT cpu_utilization=0.3")], [(b"grpc-status", b"0")]) == []


@pytest.mark.parametrize(
    ("exchange", "protocol", "with_cert", "expected"),
    [
        (Exchange(200, [(b"endpoint-load-metrics", b"TEXT eps=1")]), "h2", False, "leak"),
        (Exchange(200, [(b"content-type", b"x")]), "http/1.1", False, "no-report"),
        (Exchange(error_kind="handshake", error="TLSV13_ALERT_CERTIFICATE_REQUIRED"), "h2", True, "refused-handshake"),
        (Exchange(error_kind="closed"), "h2", True, "refused-handshake"),
        (Exchange(error_kind="closed"), "h2", False, "not-accepted"),
        (Exchange(error_kind="reset", error="PROTOCOL_ERROR"), "h2", False, "not-accepted"),
        (Exchange(error_kind="not-h2"), "h2", False, "not-accepted"),
        (Exchange(error_kind="timeout"), "h2c", False, "not-accepted"),
        (Exchange(error_kind="protocol"), "http/1.1-cleartext", False, "not-accepted"),
        (Exchange(200, [(b"endpoint-load-metrics", b"TEXT eps=1")]), "http/1.1-cleartext", False, "leak"),
        (Exchange(error_kind="timeout"), "http/1.1", False, "error"),
        (Exchange(error_kind="connect"), "h2c", False, "error"),
    ],
)
def test_classify(exchange: Exchange, protocol: probe_vectors.Protocol, with_cert: bool, expected: str) -> None:
    assert probe_verdict.classify(exchange, protocol, with_cert)[0] == expected


def test_http1_parser_reads_chunked_trailers() -> None:
    raw = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: text/plain\r\n\r\n"
        b"5\r\nhello\r\n0\r\nEndpoint-Load-Metrics: TEXT cpu_utilization=0.5\r\n\r\n"
    )
    assert probe_transport.http1_complete(raw)
    got = probe_transport.parse_http1_response(raw)
    assert got.status == 200 and got.trailers == [(b"endpoint-load-metrics", b"TEXT cpu_utilization=0.5")]
    assert probe_verdict.classify(got, "http/1.1")[0] == "leak"
    assert not probe_transport.http1_complete(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort")
    assert probe_transport.parse_http1_response(b"\x15\x03\x03\x00\x02\x02\x46").error_kind == "protocol"
    assert probe_transport.parse_http1_response(b"").error_kind == "closed"


def test_u_test_on_separated_samples_matches_the_normal_approximation() -> None:
    # U = 0, mean 12.5, variance 5*5*11/12; z = (12.5 - 0.5) / sqrt(22.9167) = 2.5067; p = 0.01219
    result = probe_stats.mann_whitney_u([1, 2, 3, 4, 5], [6, 7, 8, 9, 10])
    assert result.u == 0
    assert result.z == pytest.approx(-2.5067, abs=1e-3)
    assert result.p_value == pytest.approx(0.01219, abs=1e-4)
    swapped = probe_stats.mann_whitney_u([6, 7, 8, 9, 10], [1, 2, 3, 4, 5])
    assert swapped.u == 25 and swapped.p_value == pytest.approx(result.p_value)


def test_u_test_with_ties_and_identical_samples() -> None:
    assert probe_stats.mann_whitney_u([3.0] * 10, [3.0] * 10).p_value == 1.0
    same = probe_stats.mann_whitney_u([1, 2, 2, 3, 4], [1, 2, 3, 3, 4])
    assert same.p_value > 0.5
    rng = random.Random(7)
    a = [rng.gauss(100, 5) for _ in range(300)]
    b = [rng.gauss(100, 5) for _ in range(300)]
    assert probe_stats.mann_whitney_u(a, b).p_value > 0.001
    shifted = [x + 3 for x in b]
    assert probe_stats.mann_whitney_u(a, shifted).p_value < 1e-6
    with pytest.raises(ValueError):
        probe_stats.mann_whitney_u([], [1.0])


def _result(outcome: probe_verdict.Outcome, group: str = "header") -> probe_verdict.VectorResult:
    vector = probe_vectors.Vector(f"{group}:{outcome}", "d", "none", "h2", "/version", group=group)
    return probe_verdict.VectorResult(vector, outcome, "kind: detail")


def test_verdicts() -> None:
    ok, failed = [_result("leak", "control")], [_result("no-report", "control")]
    clean = [_result("no-report"), _result("refused-handshake"), _result("not-accepted")]
    assert probe_verdict.decide(ok, clean)[0] == "no-leak"
    assert probe_verdict.decide(ok, [*clean, _result("leak")])[0] == "leak"
    assert probe_verdict.decide([], [*clean, _result("leak")])[0] == "leak"  # a leak needs no control
    assert probe_verdict.decide([], clean)[0] == "inconclusive"
    assert probe_verdict.decide(failed, clean)[0] == "inconclusive"
    assert probe_verdict.decide(ok, [*clean, _result("error")])[0] == "inconclusive"
    assert probe_verdict.decide([], [], "cannot reach")[0] == "unreachable"
    assert {v: probe_verdict.EXIT_CODES[v] for v in ("no-leak", "leak", "inconclusive", "unreachable")} == {
        "no-leak": 0,
        "leak": 1,
        "inconclusive": 2,
        "unreachable": 2,
    }


@pytest.mark.parametrize("url", ["http://127.0.0.1:1", "ftp://x", "https://", "https://127.0.0.1:99999"])
def test_target_refuses_bad_urls(url: str) -> None:
    with pytest.raises(probe.ProbeError):
        probe_transport.Target.parse(url)


# --- against our own server -------------------------------------------------------------------------------


class _OrcaBackend(BaseHTTPRequestHandler):
    """A proxied backend that always returns ORCA headers: the server in front must strip them."""

    def do_GET(self) -> None:
        body = b"{}"
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.send_header("endpoint-load-metrics", "TEXT cpu_utilization=0.99, rps_fractional=1")
        self.send_header("endpoint-load-metrics-bin", "CQAAAAAAAOA/")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def orca_backend() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _OrcaBackend)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


CONFIGS = ("header-only", "front-proxy", "shared-secret", "front-proxy,shared-secret")


@pytest.fixture(scope="module")
def servers(dev_pki: pki.DevPKI, orca_backend: str) -> Iterator[dict[str, str]]:
    """One replica per configuration, each proxying /proxied to a backend that returns ORCA headers."""
    argvs = [
        launch.serve_argv(dev_pki, fp_flags(dev_pki, modes, "--proxy", f"/proxied={orca_backend}")) for modes in CONFIGS
    ]
    with run_replicas(argvs) as started:
        yield {modes: replica.url for modes, replica in zip(CONFIGS, started, strict=True)}


def _config(dev_pki: pki.DevPKI, *, cert: bool = True, secret: bool = True, **kwargs: Any) -> ProbeConfig:
    return ProbeConfig(
        cacert=dev_pki.cert("ca"),
        lb_cert=dev_pki.cert("front_proxy_client") if cert else None,
        lb_key=dev_pki.key("front_proxy_client") if cert else None,
        lb_secret=dev_pki.secret.read_text().strip() if secret else None,
        client_cert=dev_pki.cert("user"),
        client_key=dev_pki.key("user"),
        paths=("/version", "/proxied/x"),
        **{"timing_samples": 0, "timeout": 5.0} | kwargs,
    )


def _by_name(result: probe_verdict.ProbeResult) -> dict[str, probe_verdict.Outcome]:
    return {r.vector.name: r.outcome for r in result.results}


def test_header_only_leaks_to_a_direct_client(servers: dict[str, str], dev_pki: pki.DevPKI) -> None:
    result = probe.probe(servers["header-only"], _config(dev_pki))
    assert result.verdict == "leak" and result.exit_code == 1
    outcomes = _by_name(result)
    assert outcomes["identity:TEXT/none/h2"] == "leak"
    assert outcomes["identity:TEXT/none/http/1.1"] == "leak"
    assert outcomes["header:no-opt-in/none/h2"] == "no-report"
    assert outcomes["header:JSON/none/h2"] == "no-report"  # option 1 as the KEP writes it: TEXT only
    assert outcomes["header:lowercase/none/h2"] == "no-report"
    assert outcomes["path:no-opt-in/none/h2 /proxied/x"] == "no-report"  # the backend's own headers are stripped
    leak = next(r for r in result.results if r.outcome == "leak")
    assert leak.evidence.startswith("TEXT ") and leak.report_ok


@pytest.mark.parametrize(
    ("modes", "cert", "secret"),
    [("front-proxy", True, False), ("shared-secret", False, True), ("front-proxy,shared-secret", True, True)],
)
def test_secured_modes_leak_nothing(
    servers: dict[str, str], dev_pki: pki.DevPKI, modes: str, cert: bool, secret: bool
) -> None:
    result = probe.probe(servers[modes], _config(dev_pki, cert=cert, secret=secret))
    assert result.control_ok, [c.detail for c in result.controls]
    assert result.verdict == "no-leak" and result.exit_code == 0, result.reason
    outcomes = _by_name(result)
    assert outcomes["identity:TEXT/client/h2"] == "no-report"  # an ordinary client certificate gets nothing
    assert outcomes["identity:TEXT/wrong-ca/h2"] == "refused-handshake"
    assert outcomes["cleartext:TEXT/none/h2c"] == "not-accepted"
    assert outcomes["cleartext:TEXT/none/http/1.1-cleartext"] == "not-accepted"


# Early/late pairs of the timing test below, for the leaky control and the real server alike. At 100 the control
# was caught in 30 runs of 30 beside a loaded suite (worst p 4e-5, alpha 1e-3); 200 cost about 1.5 CPU-s more.
TIMING_PAIRS = 100


def test_timing_check_reports_a_p_value(servers: dict[str, str], dev_pki: pki.DevPKI) -> None:
    """The real server's p-value, and in the same run the positive control: the same check against a server whose
    comparison leaks on purpose (tests/leaky.py, at least 1.6 ms between a first- and a last-character difference)
    must find it; a check that could not would say nothing about the real server."""
    secret = probe_vectors.random_secret(32, random.Random(1))
    with leaky_server(secret) as (url, cafile):
        connector = probe_transport.Connector(probe_transport.Target.parse(url), Path(cafile), False, 5.0)
        control = probe.timing_check(connector, "/version", TIMING_PAIRS, secret, seed=6315)
    assert control.suspicious, f"the timing check missed a deliberate leak (p = {control.test.p_value})"
    assert control.median_late_us > control.median_early_us
    result = probe.probe(servers["shared-secret"], _config(dev_pki, cert=False, timing_samples=TIMING_PAIRS))
    assert result.exit_code == 0
    assert result.timing is not None, result.timing_error
    assert result.timing.samples_per_kind == TIMING_PAIRS and result.timing.length_known
    # No assertion on absolute time or on the p-value itself; only on what must hold between the figures.
    test, n = result.timing.test, result.timing.samples_per_kind
    assert 0 <= test.u <= n * n
    assert test.p_value == min(1.0, math.erfc(abs(test.z) / math.sqrt(2)))  # two-sided, from its own z
    assert result.timing.suspicious == (test.p_value < probe_stats.TIMING_ALPHA)


def test_positive_control_fails_with_wrong_lb_credentials(
    servers: dict[str, str], dev_pki: pki.DevPKI, tmp_path: Path
) -> None:
    config = _config(dev_pki, cert=False, secret=False)
    wrong = ProbeConfig(
        **{**config.__dict__, "lb_cert": dev_pki.cert("user"), "lb_key": dev_pki.key("user"), "lb_secret": SECRET}
    )
    result = probe.probe(servers["front-proxy,shared-secret"], wrong)
    assert not result.control_ok
    assert result.verdict == "inconclusive" and result.exit_code == 2
    assert "positive control" in result.reason


def test_no_positive_control_is_inconclusive(servers: dict[str, str], dev_pki: pki.DevPKI) -> None:
    result = probe.probe(servers["front-proxy"], _config(dev_pki, cert=False, secret=False))
    assert result.verdict == "inconclusive" and result.exit_code == 2


def test_unreachable_url(dev_pki: pki.DevPKI) -> None:
    result = probe.probe(f"https://127.0.0.1:{launch.free_port()}", _config(dev_pki))
    assert result.verdict == "unreachable" and result.exit_code == 2


def test_untrusted_server_certificate_is_unreachable(servers: dict[str, str], dev_pki: pki.DevPKI) -> None:
    config = ProbeConfig(cacert=dev_pki.cert("client_ca"), timing_samples=0)
    result = probe.probe(servers["header-only"], config)
    assert result.verdict == "unreachable" and "not trusted" in result.reason


# --- the command line -------------------------------------------------------------------------------------


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(["probe", *argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["https://127.0.0.1:1", "--cacert", "/nonexistent/ca.crt"], "--cacert"),
        (["http://127.0.0.1:1"], "https://"),
        (["https://127.0.0.1:1", "--lb-cert", "x.crt"], "--lb-key"),
        (["https://127.0.0.1:1", "--timing-samples", "-1"], "--timing-samples"),
        (["https://127.0.0.1:1", "--path", "version"], "--path"),
        (["https://127.0.0.1:1", "--lb-secret-file", "/nonexistent/secret"], "--lb-secret-file"),
    ],
)
def test_cli_bad_input_is_one_line(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    code, out, err = _cli(capsys, *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("secure-orca probe: error:") and message in err


def test_cli_json(capsys: pytest.CaptureFixture[str], servers: dict[str, str], dev_pki: pki.DevPKI) -> None:
    secret = dev_pki.secret.read_text().strip()
    code, out, err = _cli(
        capsys,
        servers["front-proxy,shared-secret"],
        "--cacert",
        str(dev_pki.cert("ca")),
        "--lb-cert",
        str(dev_pki.cert("front_proxy_client")),
        "--lb-key",
        str(dev_pki.key("front_proxy_client")),
        "--lb-secret-file",
        str(dev_pki.secret),
        "--timing-samples",
        "50",
        "--json",
    )
    assert code == 0, err
    data = json.loads(out)
    assert data["verdict"] == "no-leak" and data["exit_code"] == 0 and data["control_ok"]
    assert data["vectors"] and all(v["outcome"] != "leak" for v in data["vectors"])
    timing = data["timing"]
    assert 0 <= timing["u"] <= timing["samples_per_kind"] ** 2
    assert math.isclose(timing["p_value"], math.erfc(abs(timing["z"]) / math.sqrt(2)), abs_tol=1e-3)  # z has 3 decimals
    assert timing["suspicious"] == (timing["p_value"] < timing["alpha"])
    assert secret not in out and secret not in err
    assert "[  1/" in err  # progress on stderr


def test_cli_table_shows_the_leak(
    capsys: pytest.CaptureFixture[str], servers: dict[str, str], dev_pki: pki.DevPKI
) -> None:
    code, out, _ = _cli(capsys, servers["header-only"], "--cacert", str(dev_pki.cert("ca")), "--timing-samples", "0")
    assert code == 1
    lines = out.splitlines()
    assert lines[0].startswith(
        "cause 1 of 1: any client (no certificate needed) that sends endpoint-load-metrics-request"
    )
    table = lines.index("") + 1  # the causes first, then the table
    assert lines[table].split()[:3] == ["OUTCOME", "IMPERSONATION", "GROUP"]
    assert "positive control: none" in out and "verdict: leak" in out


def test_header_only_control_makes_a_clean_lb_result_conclusive() -> None:
    from secure_orca.probe.audit import control_vectors

    (control,) = control_vectors("/version", None, None, header_only=True)
    assert control.group == "control" and control.identity == "none"
    assert control_vectors("/version", None, None) == []


# --- impersonation ----------------------------------------------------------------------------------------


def _review(user: str, *groups: str, **extra: list[str]) -> Exchange:
    info = {"username": user, "groups": list(groups), **({"extra": extra} if extra else {})}
    body = json.dumps({"kind": "SelfSubjectReview", "status": {"userInfo": info}}).encode()
    return Exchange(status=201, body=body)


@pytest.mark.parametrize(
    ("got", "outcome", "expected"),
    [
        (_review("system:anonymous", "system:unauthenticated"), "no-report", "none"),
        (_review("developer", "system:developers", "system:authenticated"), "no-report", "none"),
        (_review("system:admin", "system:authenticated"), "no-report", "leak"),
        (_review("front-proxy-client", "system:masters"), "no-report", "leak"),
        (_review("x", scopes=["probe-forged-extra"]), "no-report", "leak"),
        (Exchange(status=401), "no-report", "none"),
        (Exchange(error_kind="handshake"), "refused-handshake", "none"),
        (Exchange(error_kind="closed"), "not-accepted", "none"),
        (Exchange(status=404), "no-report", "unknown"),
        (Exchange(status=201, body=b"not json"), "no-report", "unknown"),
    ],
)
def test_impersonation_is_read_back_from_the_review(
    got: Exchange, outcome: probe_verdict.Outcome, expected: str
) -> None:
    assert probe_verdict.impersonation_of(got, outcome)[0] == expected


def test_impersonation_vectors_cover_identities_protocols_and_spellings() -> None:
    forged = [v for v in _vectors() if v.group == "impersonation"]
    assert {(v.identity, v.protocol) for v in forged} == {
        (i, p) for i in ("none", "self-signed", "wrong-ca", "expired", "wrong-eku") for p in ("h2", "http/1.1")
    }
    assert {v.variant for v in forged if v.protocol == "http/1.1"} == {
        "forged-plain",
        "forged-lower-case",
        "forged-upper-case",
        "forged-mixed-case",
        "forged-duplicates",
    }
    h2 = [v for v in forged if v.protocol == "h2"]
    assert {v.variant for v in h2} == {"forged-lower-case", "forged-duplicates"}
    assert all(name == name.lower() for v in h2 for name, _ in v.headers)  # valid HTTP/2 field names only
    assert all(v.method == "POST" and v.path == probe_vectors.SELF_SUBJECT_REVIEWS for v in forged)
    names = {name.lower() for v in forged for name, _ in v.headers}
    assert {b"x-remote-user", b"x-remote-group", b"x-remote-extra-scopes", b"x-remote-uid"} <= names


def test_impersonation_verdicts() -> None:
    vector = next(v for v in _vectors() if v.group == "impersonation")
    clean = probe_verdict.VectorResult(vector, "no-report", "status 201", impersonation="none")
    believed = probe_verdict.VectorResult(vector, "no-report", "status 201", impersonation="leak")
    control = probe_verdict.VectorResult(vector, "leak", "report", evidence="TEXT x", impersonation="leak")
    doubted = probe_verdict.VectorResult(vector, "leak", "report", evidence="TEXT x", impersonation="none")
    assert probe_verdict.decide([control], [clean, believed])[0] == "leak"
    assert probe_verdict.decide([control], [clean], identity_controls=[control])[0] == "no-leak"
    assert probe_verdict.decide([control], [clean], identity_controls=[doubted])[0] == "inconclusive"


def test_a_client_certificate_that_can_act_as_the_front_proxy_is_an_impersonation_leak(dev_pki: pki.DevPKI) -> None:
    """Misconfiguration: the client CA is also the requestheader CA and the user's CN is an allowed name, so an
    ordinary client certificate can assert any identity. The probe reports it and exits 1."""
    flags = fp_flags(dev_pki, "shared-secret")
    flags[flags.index("--requestheader-client-ca-file") + 1] = str(dev_pki.cert("client_ca"))
    flags[flags.index("--requestheader-allowed-names") + 1] = pki.USER_CN
    with run_replicas([launch.serve_argv(dev_pki, flags)]) as (replica,):
        result = probe.probe(replica.url, _config(dev_pki, cert=False))
    assert result.verdict == "leak" and result.exit_code == 1, result.reason
    leaked = {(r.vector.variant, r.vector.protocol) for r in result.results if r.impersonation == "leak"}
    assert {("forged-lower-case", "h2"), ("forged-plain", "http/1.1"), ("forged-duplicates", "h2")} <= leaked
    assert not any(r.outcome == "leak" for r in result.results)  # no load report leaked: only identity
    assert not {r.vector.identity for r in result.results if r.impersonation == "leak"} - {"client"}


# --- the ecosystem's spellings and the out-of-band stream ------------------------------------------------


def test_spelling_and_oob_vectors() -> None:
    vectors = _vectors()
    spellings = {v.variant: v for v in vectors if v.group == "spelling" and v.protocol == "h2"}
    assert set(spellings) == {
        "format-TEXT",
        "format-JSON",
        "format-BIN",
        "format-text",
        "format-json",
        "format-case",
        "format-underscore",
        "format-bin",
    }
    assert spellings["format-underscore"].headers == ((b"endpoint_load_metrics_format", b"text"),)
    assert spellings["format-JSON"].headers == ((probe_vectors.FORMAT_HEADER, b"JSON"),)
    streams = [v for v in vectors if v.group == "oob"]
    assert {(v.identity, v.protocol) for v in streams if v.variant == "grpc"} == {
        (i, p) for i in ("none", "self-signed", "wrong-ca", "expired", "wrong-eku") for p in ("h2", "http/1.1")
    }
    assert {v.variant for v in streams} == {"grpc", "json-content-type", "identity-headers", "opt-in"}
    for v in streams:
        assert v.method == "POST" and v.path == oob.PATH
        assert oob.parse_request(oob.unframe(v.body)).interval == 1.0


def _grpc_exchange(body: bytes) -> Exchange:
    return Exchange(status=200, headers=[(b":status", b"200"), (b"content-type", b"application/grpc")], body=body)


def test_a_streamed_report_is_a_leak_and_a_status_is_not() -> None:
    from xds.data.orca.v3 import orca_load_report_pb2

    report = oob.frame(orca_load_report_pb2.OrcaLoadReport(cpu_utilization=0.5).SerializeToString())
    assert probe_verdict.classify(_grpc_exchange(report), "h2") == ("leak", "grpc OrcaLoadReport message")
    assert probe_verdict.report_evidence(_grpc_exchange(report)) == "cpu_utilization: 0.5"
    refused = Exchange(status=200, headers=[(b"content-type", b"application/grpc"), (b"grpc-status", b"7")])
    assert probe_verdict.classify(refused, "h2")[0] == "no-report"
    assert (
        probe_verdict.classify(_grpc_exchange(oob.frame(b"")), "h2")[0] == "no-report"
    )  # an empty message says nothing
    not_grpc = Exchange(status=200, headers=[(b"content-type", b"application/json")], body=report)
    assert probe_verdict.classify(not_grpc, "h2")[0] == "no-report"


def test_a_leak_verdict_names_the_spelling_asked_and_answered() -> None:
    asked = next(v for v in _vectors() if v.variant == "format-text" and v.protocol == "http/1.1")
    leak = probe_verdict.VectorResult(asked, "leak", "header endpoint-load-metrics")
    verdict, reason = probe_verdict.decide([], [leak])
    assert verdict == "leak"
    assert "endpoint-load-metrics-format: text" in reason and "answered in header endpoint-load-metrics" in reason


def test_probe_finds_the_leak_of_a_server_answering_the_format_header(dev_pki: pki.DevPKI) -> None:
    """A stand-in that is not ours (tests/standin.py: Triton's behaviour, answering endpoint-load-metrics-format
    to anyone over HTTP/1.1): the probe reports a leak and names the spelling."""
    from tests.standin import serving

    with serving(dev_pki.cert("server"), dev_pki.key("server")) as url:
        result = probe.probe(url, ProbeConfig(cacert=dev_pki.cert("ca"), timing_samples=0, timeout=5.0))
    leaks = {r.vector.name for r in result.results if r.outcome == "leak"}
    assert result.verdict == "leak" and result.exit_code == 1
    # the stand-in reads names as HTTP/1.1 says, case-insensitively (``case``), and takes no other spelling
    assert leaks == {f"spelling:format-{value}/none/http/1.1" for value in ("TEXT", "JSON", "text", "json", "case")}
    assert "asked with endpoint-load-metrics-format: TEXT, answered in header endpoint-load-metrics" in result.reason


oob_replica = replica_fixture(lambda dev: lb.replica_flags(dev, "front-proxy,load-reader"))


def test_our_stream_leaks_to_no_bypass_client(oob_replica: launch.Replica, dev_pki: pki.DevPKI) -> None:
    """Against serve with StreamCoreMetrics on: the load balancer's certificate gets a streamed report (the
    control), and no bypass vector does: no certificate, client-CA users named like the front proxy or the
    load reader, minted look-alikes, HTTP/1.1, JSON, forged identity headers, the opt-in, every spelling."""
    config = replace(
        _config(dev_pki, secret=False),
        paths=("/version",),
        client_ca_cert=dev_pki.cert("client_ca"),
        client_ca_key=dev_pki.key("client_ca"),
    )
    result = probe.probe(oob_replica.url, config)
    stream_control = next(c for c in result.controls if c.vector.path == oob.PATH)
    assert stream_control.outcome == "leak" and stream_control.detail == "grpc OrcaLoadReport message"
    streams = [r for r in result.results if r.vector.group == "oob"]
    identities = {r.vector.identity for r in streams}
    assert {"client-ca-front-proxy-client", "client-ca-load-reader", "none", "client"} <= identities
    assert not [r.vector.name for r in result.results if r.outcome == "leak"]
    assert result.verdict == "no-leak", result.reason


# --- the shared-CA vector and the timing check's sensitivity -------------------------------------------------


def test_the_shared_ca_vector_finds_a_load_reader_ca_that_is_the_client_ca(dev_pki: pki.DevPKI) -> None:
    """Misconfiguration: --endpoint-load-metrics-client-ca-file names the CA of --client-ca-file, so an ordinary
    user certificate carrying the load reader's CN reads load. The probe, given the client CA, mints that
    certificate and reports the leak through it (and only through it: every other vector still gets nothing)."""
    flags = lb.replica_flags(dev_pki, "load-reader")
    flags[flags.index("--endpoint-load-metrics-client-ca-file") + 1] = str(dev_pki.cert("client_ca"))
    config = ProbeConfig(
        cacert=dev_pki.cert("ca"),
        lb_cert=dev_pki.cert("load_reader_client"),
        lb_key=dev_pki.key("load_reader_client"),
        lb_load_reader=True,
        client_ca_cert=dev_pki.cert("client_ca"),
        client_ca_key=dev_pki.key("client_ca"),
        timing_samples=0,
        paths=("/version",),
    )
    with run_replicas([launch.serve_argv(dev_pki, flags)]) as (replica,):
        result = probe.probe(replica.url, config)
    assert result.verdict == "leak" and result.exit_code == 1, result.reason
    leaked = {r.vector.identity for r in result.results if r.outcome == "leak"}
    assert leaked == {f"client-ca-{pki.LOAD_READER_CN}"}, leaked


def test_the_timing_check_states_the_smallest_shift_its_positive_controls_caught() -> None:
    """Each control adds a shift to every late sample of the measured noise: a quieter server shows a smaller
    leak, and a shift well past the noise is always caught."""
    rng = random.Random(1)
    quiet = [rng.gauss(50, 1) for _ in range(800)]
    noisy = [rng.gauss(50, 20) for _ in range(800)]
    small = probe_verdict.positive_controls(quiet[:400], quiet[400:])
    large = probe_verdict.positive_controls(noisy[:400], noisy[400:])
    assert set(small) == set(probe_verdict.CONTROL_SHIFTS_US)
    caught_quiet = min(s for s, p in small.items() if p < probe_stats.TIMING_ALPHA)
    caught_noisy = min(s for s, p in large.items() if p < probe_stats.TIMING_ALPHA)
    assert caught_quiet < caught_noisy <= 30
    timing = probe_verdict.TimingResult(
        400, 43, True, 50, 50, probe_stats.mann_whitney_u(quiet[:400], quiet[400:]), controls=small
    )
    assert timing.detectable_us == caught_quiet and timing.to_json()["detectable_us"] == caught_quiet
