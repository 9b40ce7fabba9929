"""``secure-orca hpack measure`` against the real server: frame capture, the command, model agreement, h2load.

Tolerances (stated here and in docs/hpack.md):
- the walker's attributed marginal and the plain A/B difference (opted-in minus other connections' mean
  header block) agree within 1 byte per response + 5%;
- model and wire, at 10-100 responses/s per connection, agree within 15% on new report literals per second
  and on marginal bytes per response per octet of report (the server reports five fields, the model three,
  so raw bytes are compared per octet of the field). The model samples every 100 ms, or at the longer
  interval between new report values that the wire saw: how many new values a connection meets is the
  sampler's timing, which a test must not assert on;
- h2load's "headers" total and ours for the same run shape agree within 1% without the opt-in and within 3%
  with it, against a server that samples every 60 s (with 100 ms sampling the number of new report literals,
  ~90 bytes each, depends on timing: -3% to +5.3% was observed).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from secure_orca import pki
from secure_orca.cli import main
from secure_orca.cli.hpack.measure import status_warning
from secure_orca.hpackcost.wire import Credentials, HeaderCapture, WireError, model_interval, parse_target
from secure_orca.lab import h2load
from secure_orca.lab import replicas as launch
from secure_orca.orca.headers import OPTIN as OPT_IN
from secure_orca.orca.report import DEFAULT_DECIMALS
from tests.conftest import fp_flags
from tests.replicas import run_replicas

HEADERS, CONTINUATION, GOAWAY = 0x1, 0x9, 0x7  # RFC 9113 frame types and flags, written out independently
END_HEADERS, PADDED, PRIORITY = 0x4, 0x8, 0x20


def frame(kind: int, flags: int, stream_id: int, payload: bytes) -> bytes:
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream_id.to_bytes(4, "big") + payload


# --- frame capture (pure) ----------------------------------------------------------------------------


def test_capture_strips_padding_and_priority_and_joins_continuation() -> None:
    payload = bytes([3]) + b"\x80\x00\x00\x00\x10" + b"\x88\x40" + b"\x00" * 3  # pad length, priority, block, pad
    ended = frame(HEADERS, PADDED | PRIORITY | END_HEADERS, 1, payload)
    first = frame(HEADERS, 0, 3, b"\x88")
    rest = frame(CONTINUATION, END_HEADERS, 3, b"\x89")
    frames = [frame(0x0, 0x1, 1, b"body"), ended, first, rest]  # whole, as H2Loop shows them (tests/h2client)
    capture = HeaderCapture()
    forwarded = [raw for raw in frames if capture.frame(raw, 1.5)]
    assert forwarded == frames  # in order, all of them handed to h2
    assert [(b.stream_id, b.block, b.at) for b in capture.blocks] == [(1, b"\x88\x40", 1.5), (3, b"\x88\x89", 1.5)]
    assert capture.h2load_bytes == 2 + 1  # HEADERS fragments only, as h2load counts them
    assert (capture.frames, capture.frame_bytes) == (3, len(ended) + len(first) + len(rest))


def test_capture_keeps_goaway_from_h2() -> None:
    capture = HeaderCapture()
    goaway = frame(GOAWAY, 0, 0, (7).to_bytes(4, "big") + bytes(4))
    block = frame(HEADERS, END_HEADERS, 7, b"\x88")
    assert [raw for raw in (goaway, block) if capture.frame(raw, 0.0)] == [block]
    assert capture.goaway and capture.goaway_last_stream == 7 and len(capture.blocks) == 1


def test_capture_refuses_stray_continuation() -> None:
    with pytest.raises(WireError, match="CONTINUATION"):
        HeaderCapture().frame(frame(CONTINUATION, END_HEADERS, 1, b"\x88"), 0.0)


@pytest.mark.parametrize(
    ("url", "path"), [("http://h:1", "/"), ("https://:1", "/"), ("https://h:x", "/"), ("https://h", "v")]
)
def test_bad_targets(url: str, path: str) -> None:
    with pytest.raises(WireError):
        parse_target(url, path)


def test_the_user_is_named_only_by_a_front_proxy_that_has_one() -> None:
    cert = Path("lb.crt")
    assert Credentials(cert=cert, key=cert, user="lb").identity() == [(b"x-remote-user", b"lb")]
    assert Credentials(cert=cert, key=cert).identity() == []  # --remote-user ''
    assert Credentials(secret="s", user="lb").identity() == []  # no certificate: not a front proxy


@pytest.mark.parametrize(
    ("statuses", "without", "warning"),
    [
        ({200: 5}, {200: 4}, None),  # the same statuses, all 2xx: like with like
        ({200: 5}, {200: 3, 201: 2}, "were 200 x5, without it 200 x3, 201 x2: the figures"),
        ({200: 5}, {200: 5, 404: 1}, "with the opt-in were 200 x5, without it 200 x5, 404 x1: the figures"),
        ({404: 5}, {404: 5}, "were 404 x5, without it 404 x5: the figures are those of these responses"),
        ({401: 5}, {}, "were 401 x5, without it none: the figures are those of these responses (does the server"),
    ],
)
def test_unlike_responses_are_named(statuses: dict[int, int], without: dict[int, int], warning: str | None) -> None:
    result = SimpleNamespace(rate=5.0, statuses=statuses, statuses_without=without)
    text = status_warning(result)  # type: ignore[arg-type]
    if warning is None:
        assert text is None
    else:
        assert text is not None and text.startswith("rate 5: responses with the opt-in ") and warning in text
    assert text is None or ("--remote-user" in text) == (401 in statuses)


def test_model_samples_no_faster_than_the_server_or_the_wire() -> None:
    assert model_interval(0.1, 8.0) == 0.125  # fewer new values than samples due: the wire's interval
    assert model_interval(0.1, 12.0) == 0.1  # never faster than the server samples
    assert model_interval(0.1, 0.0) == 0.1  # no report seen: the server's interval


# --- the command against the real server ---------------------------------------------------------------


def lb_args(dev_pki: pki.DevPKI, *, cert: bool = True, secret: bool = False) -> list[str]:
    args = ["--cacert", str(dev_pki.cert("ca"))]
    if cert:
        args += [
            "--lb-cert",
            str(dev_pki.cert("front_proxy_client")),
            "--lb-key",
            str(dev_pki.key("front_proxy_client")),
        ]
    if secret:
        args += ["--lb-secret-file", str(dev_pki.secret)]
    return args


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> list[dict]:
    assert main(["hpack", "measure", *argv, "--json"]) == 0
    out, err = capsys.readouterr()
    assert "hpack measure:" in err  # progress on stderr
    return json.loads(out)["results"]


def test_measure_attributes_every_response(secured_replica, dev_pki, capsys) -> None:
    (r,) = run_json(capsys, secured_replica.url, *lb_args(dev_pki), "--rate", "10", "--duration", "2")
    assert (r["responses"], r["responses_without"], r["reported"], r["refused"]) == (20, 20, 20, 0)
    assert r["replay_exact"]  # hypercorn encodes with hpack.Encoder: the walker's replay is byte-exact
    assert r["uncompressed"] > 100 and r["entry_size"] == pytest.approx(r["uncompressed"] + 32)
    assert r["first_send"] > r["orca_bytes"] > 0
    assert abs(r["marginal"] - r["ab_marginal"]) <= 1 + 0.05 * r["marginal"]
    assert r["marginal"] == pytest.approx(r["orca_bytes"] + r["eviction_cost"])
    assert r["header_bytes"] > r["header_bytes_without"] > 0
    assert r["literals_per_s"] <= r["values_per_s"]  # a literal only for a new value
    assert r["model"]["interval"] == pytest.approx(model_interval(0.1, r["values_per_s"]))
    assert r["model"]["rate"] == 10 and r["model"]["decimals"] == DEFAULT_DECIMALS


def test_measure_tables_never_show_the_secret(secured_replica, dev_pki, capsys) -> None:
    argv = [secured_replica.url, *lb_args(dev_pki, cert=False, secret=True), "--rate", "5", "--duration", "1"]
    assert main(["hpack", "measure", *argv]) == 0
    out, err = capsys.readouterr()
    assert "Model | wire" in out and "marginal/resp" in out
    assert dev_pki.secret.read_text().strip() not in out + err


def test_model_and_wire_agree(dev_pki, capsys) -> None:
    """100 ms sampling, 3 decimals, 10 and 100 responses/s per connection: within 15%. How many new values reach
    a connection is the sampler's timing, not HPACK: a busy machine samples late (CI once saw 8.3 new values/s
    where 10 were due, and the model at 100 ms then disagreed by 17%), and at 10/s requests and samples beat
    against each other. So the model samples at the interval between new values the wire saw (never shorter
    than 100 ms), and both are held to the encoding: new values cost literals at the model's rate, and the
    bytes per response per report octet agree. Where every response meets a new sample (2/s) a quiet server's
    values also repeat (at 2 decimals often); that made the wire 0.51-0.64 of the model's per-octet cost, so
    that rate is not held to the model here. A new value can also be one the connection's table still holds
    (seen: 9.13 literals/s for 9.56 new values/s): it is then indexed, not a literal. How often values recur is
    the server's load, not HPACK (under xdist the wire once cost 0.51 of a report octet per response where the
    model cost 0.61), so the bytes are compared per literal sent and the model's literals to the wire's values."""
    rates = ["--rate", "10", "--rate", "100", "--decimals", "3"]
    argv = launch.serve_argv(dev_pki, [*fp_flags(dev_pki), "--endpoint-load-metrics-decimals", "3"])
    with run_replicas([argv]) as (replica,):
        results = run_json(capsys, replica.url, *lb_args(dev_pki), *rates, "--duration", "3")
    for r in results:
        model = r["model"]
        per_literal = model["marginal"] / model["uncompressed"] / model["literals_per_s"]
        assert r["marginal_ratio"] / r["literals_per_s"] == pytest.approx(per_literal, rel=0.15), r["rate"]
        assert model["literals_per_s"] == pytest.approx(r["values_per_s"], rel=0.15), r["rate"]
        assert r["literals_per_s"] <= r["values_per_s"], r["rate"]  # the value just sent is never a literal again
        assert model["interval"] == pytest.approx(model_interval(0.1, r["values_per_s"])), r["rate"]


# ``secure-orca serve`` with hypercorn's Date header fixed to one instant, as secure_orca.cli.pinned fixes it,
# and nothing else changed (the sampler still ticks).
FIXED_DATE = (
    "import sys, hypercorn.config; from secure_orca.cli import main, pinned; "
    "vars(hypercorn.config)['time'] = lambda: pinned.FIXED_TIME; sys.exit(main(sys.argv[1:]))"
)


def fixed_date(argv: list[str]) -> list[str]:
    return [argv[0], "-c", FIXED_DATE, *argv[argv.index("serve") :]]


def test_front_proxy_names_a_user_as_kube_requires(dev_pki, capsys) -> None:
    """kube-apiserver answers a verified front proxy that names no user with 401. The measurement names one
    (default --remote-user) on both variants, so both get the same 200s; without a user it says what it got.

    The A/B figure compares the mean header block of two connections, 4 steady responses each (the first is
    warm-up): a Date header that changed between one connection's first response and the other's put one
    Date literal (~22 bytes) in one mean only (76.0 against 81.5 once). The replica's Date is fixed here."""
    argv = launch.serve_argv(dev_pki, [*fp_flags(dev_pki), "--requestheader-missing-user=unauthorized"])
    shape = ["--rate", "5", "--duration", "1"]
    with run_replicas([fixed_date(argv)]) as (replica,):
        (named,) = run_json(capsys, replica.url, *lb_args(dev_pki), *shape)
        assert "warning" not in capsys.readouterr().err
        assert main(["hpack", "measure", replica.url, *lb_args(dev_pki), *shape, "--remote-user", ""]) == 0
        err = capsys.readouterr().err
    assert named["statuses"] == named["statuses_without"] == {"200": 5}
    assert named["ab_marginal"] == pytest.approx(named["marginal"], abs=1 + 0.05 * named["marginal"])
    assert "warning: rate 5: responses with the opt-in were 401 x5, without it 401 x5" in err
    assert "--remote-user" in err


def test_follows_graceful_goaway(dev_pki, capsys) -> None:
    argv = launch.serve_argv(dev_pki, [*fp_flags(dev_pki), "--max-requests-per-connection", "25"])
    with run_replicas([argv]) as (replica,):
        (r,) = run_json(capsys, replica.url, *lb_args(dev_pki), "--rate", "50", "--duration", "1")
    assert r["responses"] == r["reported"] == 50 and r["responses_without"] == 50
    assert r["opened"] >= 4  # each worker needed a second connection


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--cacert", "/nonexistent/ca.crt", "--lb-secret-file", "/nonexistent/s"], "--cacert: /nonexistent/ca.crt"),
        ([], "give the load balancer's credentials"),
        (["--lb-cert", "x.crt"], "--lb-cert and --lb-key must be given together"),
        (["--lb-secret-file", "/nonexistent/s", "--rate", "0"], "--rate"),
        (["--lb-secret-file", "/nonexistent/s", "--remote-user", "a\r\nx-remote-group: x"], "--remote-user"),
        (["--lb-secret-file", "/nonexistent/s", "--remote-user", " lead"], "--remote-user"),
    ],
)
def test_bad_input_is_one_line(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["hpack", "measure", "https://127.0.0.1:1", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and message in err


def test_unreachable_server_is_one_line(dev_pki, capsys) -> None:
    port = launch.free_port()
    assert main(["hpack", "measure", f"https://127.0.0.1:{port}", *lb_args(dev_pki)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"secure-orca hpack: error: cannot connect to 127.0.0.1:{port}: Connection refused"


def test_refused_credentials_are_one_line(secured_replica, dev_pki, client_certs, capsys) -> None:
    user = client_certs["user"]
    argv = ["--cacert", str(dev_pki.cert("ca")), "--lb-cert", str(user.cert), "--lb-key", str(user.key)]
    assert main(["hpack", "measure", secured_replica.url, *argv]) == 2
    assert "no report in the response" in capsys.readouterr().err


# --- h2load cross-check ----------------------------------------------------------------------------------

H2LOAD_HEADERS = re.compile(r"traffic: .*?, \S+ \((\d+)\) headers \(space savings")


def h2load_header_bytes(url: str, requests: int, clients: int, rps: int, headers: list[str]) -> int:
    """h2load's "headers" figure: the HEADERS frames' payloads less padding and priority (no frame headers)."""
    argv = h2load.argv(url, requests=requests, clients=clients, rps=rps, headers=headers)
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True).stdout
    assert f"{requests} succeeded" in out, out
    match = H2LOAD_HEADERS.search(out)
    assert match, out
    return int(match.group(1))


@pytest.mark.skipif(shutil.which("h2load") is None, reason="h2load (Debian nghttp2-client) not installed")
def test_h2load_agrees(dev_pki, capsys) -> None:
    """Same shape for both tools: 2 connections, 100 requests each at 50/s, GET /version, the shared secret
    (h2load presents no client certificate). Like with like: h2load counts each HEADERS frame's length less
    padding and priority, without the 9-byte frame header and without CONTINUATION; ours is ``header_bytes``
    (the same count, from our own frame split).

    The three runs follow each other, so the server samples every 60 s: a report value is then sent once per
    connection and indexed after, whatever the machine's load. With 100 ms sampling the number of new values
    (about 90 bytes each) differed between runs by the sampler's timing: +5.3% was seen beside an evaluation.
    A sample that lands inside one run adds one literal per connection, under 2% of the block bytes."""
    requests, clients, rps = 200, 2, 50
    argv = launch.serve_argv(dev_pki, [*fp_flags(dev_pki), "--endpoint-load-metrics-interval", "60s"])
    secret = Path(dev_pki.secret).read_text().strip()
    with run_replicas([argv]) as (replica,):
        url = replica.url + "/version"
        theirs_with = h2load_header_bytes(url, requests, clients, rps, [f"{OPT_IN}: TEXT; secret={secret}"])
        theirs_without = h2load_header_bytes(url, requests, clients, rps, [])
        shape = ["--rate", str(rps), "--connections", str(clients), "--duration", str(requests / clients / rps)]
        (r,) = run_json(capsys, replica.url, *lb_args(dev_pki, cert=False, secret=True), *shape)
    assert r["responses"] == r["responses_without"] == requests
    assert r["header_bytes_without"] == pytest.approx(theirs_without, rel=0.01)
    assert r["header_bytes"] == pytest.approx(theirs_with, rel=0.03)
    theirs_marginal = (theirs_with - theirs_without) / requests
    assert r["ab_marginal"] == pytest.approx(theirs_marginal, rel=0.25)  # ours is steady state: no first send
