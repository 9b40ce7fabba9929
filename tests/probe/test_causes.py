"""The probe reports causes, not vectors: leaking vectors grouped by the request shape that leaked (pure, on
constructed results), and the report printed against a real stand-in server on loopback (tests/standin.py)."""

from __future__ import annotations

from typing import Any

import pytest

from secure_orca import cli, pki
from secure_orca.cli import probe as probe_cli
from secure_orca.orca import oob
from secure_orca.probe import audit as probe
from secure_orca.probe import vectors as probe_vectors
from secure_orca.probe import verdict as probe_verdict
from secure_orca.probe.audit import ProbeConfig
from secure_orca.probe.verdict import Exchange, VectorResult
from tests.standin import serving

OPTIN = probe_vectors.OPTIN.decode()
FORMAT = probe_vectors.FORMAT_HEADER.decode()


def _vectors(**kwargs: Any) -> dict[str, probe_vectors.Vector]:
    identities = [probe_vectors.NO_CERT, *probe_vectors.mint_identities("front-proxy-client")]
    return {v.name: v for v in probe_vectors.build_vectors(("/version",), identities, seed=1, **kwargs)}


VECTORS = _vectors()
REVIEWS = probe_vectors.SELF_SUBJECT_REVIEWS


def _leak(name: str, detail: str = "header endpoint-load-metrics", **kwargs: Any) -> VectorResult:
    return VectorResult(VECTORS[name], "leak", detail, 200, evidence="TEXT cpu_utilization=0.5", **kwargs)


def _clean(name: str, **kwargs: Any) -> VectorResult:
    return VectorResult(VECTORS[name], "no-report", "status 200", 200, **kwargs)


# --- grouping (pure) --------------------------------------------------------------------------------------


def test_one_opt_in_answered_to_anyone_is_one_cause_whatever_else_the_request_carried() -> None:
    """The bare opt-in answered to anyone: a certificate, a wrong secret, forged identity headers or the gRPC
    content type beside it change nothing, so every such leak is that one cause."""
    leaks = [
        _leak("identity:TEXT/none/h2"),
        _leak("identity:TEXT/self-signed/http/1.1"),  # a certificate the server does not even check
        _leak("secret:secret-wrong/none/h2"),
        _leak("header:leading-space/none/http/1.1"),
        _leak("oob:opt-in/none/h2 " + oob.PATH),
        _leak(f"impersonation:forged-plain/wrong-ca/http/1.1 {REVIEWS}", impersonation="unknown"),
    ]
    results = [_clean("header:no-opt-in/none/h2"), *leaks]
    (cause,) = probe_verdict.find_causes(results)
    assert cause.kind == "report" and cause.who == probe_verdict.ANY_CLIENT and cause.asked == OPTIN
    assert list(cause.results) == leaks
    assert "no secret is checked (1 wrong secrets got one)" in cause.title
    assert cause.answers() == ["header endpoint-load-metrics: TEXT cpu_utilization=0.5"]
    assert cause.by_group()[f"impersonation {REVIEWS}"] == ["forged-plain/wrong-ca/http/1.1"]
    verdict, reason = probe_verdict.decide([], results)
    assert verdict == "leak" and reason.startswith("6 of 7 vectors leaked, from 1 cause: any client")


def test_other_shapes_and_identities_are_other_causes() -> None:
    """A spelling, the stream and a leak that needed one certificate are each a cause of their own; the largest
    comes first."""
    results = [
        _leak("spelling:format-text/none/http/1.1"),
        _leak("spelling:format-JSON/none/http/1.1"),
        _leak("spelling:format-json/none/http/1.1"),
        _leak("oob:grpc/wrong-eku/h2 " + oob.PATH, detail=probe_verdict.STREAM_FOUND),
        _leak("identity:TEXT/expired/h2"),
        _clean("identity:TEXT/none/h2"),
        _clean(f"impersonation:forged-lower-case/none/h2 {REVIEWS}", impersonation="none"),
        _clean(f"impersonation:forged-lower-case/expired/h2 {REVIEWS}", impersonation="leak"),
    ]
    causes = probe_verdict.find_causes(results)
    assert [(c.kind, c.asked, c.who, len(c.results)) for c in causes] == [
        ("report", FORMAT, probe_verdict.ANY_CLIENT, 3),
        ("report", f"POST {oob.PATH}", "wrong-eku", 1),
        ("report", OPTIN, "expired", 1),
        ("identity", "x-remote-* identity headers", "expired", 1),
    ]
    assert (
        causes[1].title
        == f"a client with the 'wrong-eku' identity that opens the out-of-band stream (POST {oob.PATH}) gets load "
        "reports"
    )
    assert "is believed" in causes[3].title
    assert probe_verdict.decide([], results)[1].startswith("6 of 8 vectors leaked, from 4 causes: ")


def test_a_believed_load_reader_identity_is_a_cause_and_a_front_proxy_one_is_not() -> None:
    control = VectorResult(
        VECTORS[f"impersonation:forged-lower-case/none/h2 {REVIEWS}"], "leak", "x", impersonation="leak"
    )
    assert probe_verdict.find_causes([], [control], lb_identity_believed=True) == []
    (cause,) = probe_verdict.find_causes([], [control], lb_identity_believed=False)
    assert cause.kind == "identity"


def test_the_whole_leaked_value_is_shown_and_escaped() -> None:
    fields = ", ".join(f"named_metrics.m{i}={i / 1000}" for i in range(60))
    value = f"TEXT cpu_utilization=0.5, {fields}".encode()
    assert len(value) > 1000
    got = Exchange(200, [(b"endpoint-load-metrics", value)])
    assert probe_verdict.report_evidence(got) == value.decode()
    hostile = Exchange(200, [(b"endpoint-load-metrics", b"TEXT a=1\x1b[2J" + b"b" * 300)])
    evidence = probe_verdict.report_evidence(hostile)
    assert "\x1b" not in evidence and evidence.endswith("b" * 300)


# --- the summary's words (pure) ---------------------------------------------------------------------------


def _forged(*seen: probe_verdict.Impersonation) -> list[VectorResult]:
    name = f"impersonation:forged-plain/none/http/1.1 {REVIEWS}"
    return [_clean(name, impersonation=s) for s in seen]


def test_not_checked_is_never_none() -> None:
    assert probe_verdict.impersonation_summary(_forged("unknown", "unknown")) == (
        "not checked: no identity could be read back (2 forged identities: 2 unknown)"
    )
    assert probe_verdict.impersonation_summary(_forged("none", "unknown", "unknown")) == (
        "not checked for 2 of 3 forged identities: no identity could be read back "
        "(3 forged identities: 1 none, 2 unknown)"
    )
    assert probe_verdict.impersonation_summary(_forged("none", "none")) == "none believed (2 forged identities: 2 none)"
    assert probe_verdict.impersonation_summary(_forged("leak", "unknown")).startswith("LEAK ")  # type: ignore[union-attr]
    assert probe_verdict.impersonation_summary([_clean("identity:TEXT/none/h2")]) is None


def _control(outcome: probe_verdict.Outcome, secret: bool = True) -> VectorResult:
    lb = probe_vectors.Identity("lb", "lb", pem=(b"", b""))
    controls = probe_vectors.control_vectors("/version", lb, "s" * 43 if secret else None)
    return VectorResult(controls[-1], outcome, "d")


def test_the_timing_check_runs_only_where_the_control_proved_a_secret_is_checked() -> None:
    refused = [_clean("secret:secret-wrong/none/h2")]
    assert probe_verdict.timing_skip([_control("leak")], refused) is None
    assert "no --lb-secret-file" in str(probe_verdict.timing_skip([_control("leak", secret=False)], refused))
    assert "got no report" in str(probe_verdict.timing_skip([_control("no-report")], refused))
    assert "no secret is checked" in str(
        probe_verdict.timing_skip([_control("leak")], [_leak("secret:secret-wrong/none/h2")])
    )


def test_a_refused_front_proxy_identity_with_a_working_certificate_suggests_the_load_reader_flag() -> None:
    review = f"impersonation:forged-lower-case/none/h2 {REVIEWS}"
    report = [_control("leak")]
    answered = VectorResult(
        VECTORS[review], "leak", "x", 201, impersonation="none", identity_detail="seen as load-reader"
    )
    verdict, reason = probe_verdict.decide(report, [_clean("identity:TEXT/none/h2")], identity_controls=[answered])
    assert verdict == "inconclusive" and "add --lb-load-reader" in reason
    refused = VectorResult(VECTORS[review], "refused-handshake", "x", impersonation="none", identity_detail="refused")
    verdict, reason = probe_verdict.decide(report, [_clean("identity:TEXT/none/h2")], identity_controls=[refused])
    assert verdict == "inconclusive" and "--lb-load-reader" not in reason


def test_a_control_row_says_control_never_leak() -> None:
    lb = probe_vectors.Identity("lb", "lb", pem=(b"", b""))
    text, _stream = probe_vectors.control_vectors("/version", lb, None)
    (review,) = probe_vectors.impersonation_controls(lb)
    got = VectorResult(text, "leak", "header endpoint-load-metrics", 200, evidence="TEXT a=1")
    believed = VectorResult(review, "leak", "header endpoint-load-metrics", 201, impersonation="leak")
    assert probe_cli.row(got, {})[:2] == ("control: report", "-")
    assert probe_cli.row(believed, {})[:2] == ("control: report", "control: believed")
    assert probe_cli.row(believed, {}, lb_identity_believed=False)[1] == "leak"  # a load reader's: a real leak
    assert probe_cli.row(_leak("identity:TEXT/none/h2"), {})[0] == "leak"


# --- against a real stand-in on loopback -------------------------------------------------------------------


def _table_row(out: str, name_parts: tuple[str, ...]) -> str:
    return next(line for line in out.splitlines() if all(f" {p} " in f" {line} " for p in name_parts))


@pytest.mark.parametrize(
    ("header", "leaked"),
    [(OPTIN, 44), (FORMAT, 5)],  # the opt-in answered to anyone; Triton's spelling, its case variant too
)
def test_a_server_that_answers_anyone_prints_one_cause_first_with_its_vectors_under_it(
    capsys: pytest.CaptureFixture[str], dev_pki: pki.DevPKI, header: str, leaked: int
) -> None:
    with serving(dev_pki.cert("server"), dev_pki.key("server"), header=header) as url:
        # --lb-header-only: the bare opt-in is the control; the default 500 timing pairs
        code = cli.main(["probe", url, "--cacert", str(dev_pki.cert("ca")), "--lb-header-only"])
        result = probe.probe(url, ProbeConfig(cacert=dev_pki.cert("ca"), timing_samples=0))
    out, err = capsys.readouterr()
    assert code == 1
    lines = out.splitlines()
    assert lines[0].startswith(f"cause 1 of 1: any client (no certificate needed) that sends {header} gets a load")
    assert lines[1].startswith("  answered: header endpoint-load-metrics: ")
    assert "named_metrics.kv_cache_utilization=0.42" in lines[1]  # the whole value
    assert f"  {leaked} vectors:" in lines
    listed = [
        name
        for line in lines[: lines.index("")]
        if line.startswith("    ")
        for name in line.split(": ", 1)[1].split(", ")
    ]
    leaks = [r for r in result.results if r.outcome == "leak"]
    assert len(listed) == len(leaks) == leaked
    assert all("(cause 1)" in line for line in lines if line.startswith("leak "))
    assert "cause 2" not in out
    (control,) = [line for line in lines if "  control  " in line]  # labelled as a control
    assert control.startswith("control: not-accepted")  # the header-only control goes over h2; this is HTTP/1.1
    assert "impersonation: none" not in out
    assert "timing: skipped - no secret was accepted by the positive control" in out
    assert "timing check skipped" in err and "early/late pairs over one" not in err
    assert "1 cause: any client" in out.splitlines()[-1]
