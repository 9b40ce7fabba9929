"""`secure-orca evaluate`: the results, their rendering and the recommendation on a recorded quick run (pure:
tests/data/evaluation-quick/, written by a real ``evaluate --quick`` with Envoy and callgrind), and one live
``--quick --no-instructions`` run end to end (real replicas, real Envoy (CI installs it), h2load, the probe).
Callgrind itself is held by tests/lab/test_instruction_guard.py and benchmarks/instructions.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from secure_orca.lab import launcher as lb
from secure_orca.lab.evaluate import request_hpack
from secure_orca.lab.markdown import columns, interval, render_markdown
from secure_orca.lab.options import OPTIONS, OUT_OF_BAND, TITLES
from secure_orca.lab.recommend import beta_path, recommend, recommended_option, run_reasons
from secure_orca.lab.results import Evaluation, Instructions, Interval, Spread, to_json

RECORDED = Path(__file__).parents[1] / "data" / "evaluation-quick"

# What else each load balancer credential grants, read back from selfsubjectreviews by the probe.
GRANTS = {
    "header-only": "nothing needed",
    "front-proxy": "any identity",
    "load-reader": "load only",
    "shared-secret": "load only",
    "front-proxy,shared-secret": "any identity",
    "out-of-band": "load only",
}


def leaves(value: Any, path: str = "") -> list[tuple[str, Any]]:
    if isinstance(value, dict):
        return [leaf for key, item in value.items() for leaf in leaves(item, f"{path}.{key}")]
    return [(path, value)]


def check_cells(results: dict[str, Any], markdown: str, envoy: bool) -> None:
    """Every cell of evaluation.json filled and every verdict as measured so far."""
    assert results["envoy"] == envoy
    for option in OPTIONS:
        cell = results["options"][option]
        missing = [
            path
            for path, value in leaves(cell)
            if value is None and "handshake" not in path and "timing_p_value" not in path
        ]
        assert not missing, f"{option}: empty cells {missing}"
        expected = "leak" if option == "header-only" else "no-leak"
        assert cell["bypass"]["verdict"] == expected
        assert cell["bypass"]["control_ok"]
        if envoy:
            assert cell["through_lb"]["verdict"] == "no-leak"
            assert cell["through_lb"]["weights_moved"], f"{option}: Envoy's weights did not move"
        for ratio in ("throughput_ratio", "p50_ratio", "p99_ratio"):
            assert cell["request_cost"][ratio]["median"] > 0
        if option != OUT_OF_BAND:  # out of band no response carries a report
            assert cell["hpack_response"]["marginal_bytes_per_response"] > 0
        assert cell["title"] in markdown
        assert cell["bypass"]["grants"] == GRANTS[option], option
    assert results["options"]["shared-secret"]["bypass"]["timing_p_value"] is not None
    assert results["control"]["throughput_ratio"]["median"] > 0 and "A/A control (two replicas)" in markdown
    rounds = results["settings"]["rounds"]
    assert [len(results["control"]["runs"][k]) for k in ("throughput_ratio", "p99_ratio")] == [rounds, rounds]
    assert results["options"]["front-proxy"]["handshake"]["connections_per_s_ratio"]["median"] > 0
    assert len(results["recommendation"]) >= 4
    chosen = results["recommended_option"]
    assert chosen in OPTIONS and chosen not in ("header-only",)
    assert f"resolve the open question with {TITLES[chosen]} as the default" in results["recommendation"][-1]
    secret = results["options"]["shared-secret"]
    secret_line = next(line for line in results["recommendation"] if "secret travels" in line)
    assert f"{secret['hpack_request_first_bytes']} HPACK bytes once per connection" in secret_line
    assert f"then {secret['hpack_request_bytes']} per request" in secret_line
    assert f"p = {secret['bypass']['timing_p_value']:.3g}" in secret_line
    assert results["provenance"]["commit"] and results["provenance"]["command"].startswith("secure-orca")
    assert results["provenance"]["commit_end"]
    assert results["reasons"] and results["reasons"] == run_reasons(Evaluation.from_json(results))
    assert results["beta_path"] == beta_path(Evaluation.from_json(results))
    assert "## How this was made" in markdown and "## What a reviewer will ask" in markdown
    assert "### Policy, not measurement" in markdown
    if envoy:
        check_out_of_band(results, markdown)


# --- a recorded run (pure) ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def recorded() -> tuple[dict[str, Any], str]:
    return json.loads((RECORDED / "evaluation.json").read_text()), (RECORDED / "evaluation.md").read_text()


def test_recorded_run_reads_back_and_renders_as_written(recorded: tuple[dict[str, Any], str]) -> None:
    """Typed results hold everything evaluation.json holds: read back, written again, rendered again and the
    recommendation derived again from the figures, each is the recorded file byte for byte."""
    document, markdown = recorded
    results = Evaluation.from_json(document)
    assert to_json(results) == document
    assert json.dumps(to_json(results), indent=2) + "\n" == (RECORDED / "evaluation.json").read_text()
    assert recommend(results) == document["recommendation"]
    assert render_markdown(results) == markdown


def test_recorded_run_fills_every_cell_with_instruction_counts(recorded: tuple[dict[str, Any], str]) -> None:
    document, markdown = recorded
    check_cells(document, markdown, envoy=True)
    results = Evaluation.from_json(document)
    assert isinstance(results.instructions, Instructions)
    for option in OPTIONS:
        counted = results.instructions.options[option]
        assert counted.per_request_on > 0 and counted.per_request_off > 0
        if option != OUT_OF_BAND and results.instructions.repeats >= 2:  # one layout orders nothing (±0.3%)
            assert counted.per_request_on > counted.per_request_off
            assert counted.request_ratio.median > 1
    connections = results.instructions.connections
    assert sorted(connections) == ["front-proxy", "load-reader"]
    assert all(c.ratio.median > 1 for c in connections.values())  # a certificate costs instructions
    rows = matrix(markdown)
    for option in ("front-proxy", "load-reader", "front-proxy,shared-secret", OUT_OF_BAND):  # every certificate
        assert rows[TITLES[option]][4] != "n/a (no certificate)", option
    for option in ("header-only", "shared-secret"):
        assert rows[TITLES[option]][4] == "n/a (no certificate)", option
    assert any("A new TLS connection presenting the load-reader certificate" in line for line in results.recommendation)


def matrix(markdown: str) -> dict[str, list[str]]:
    """The matrix's rows by title (it comes first; the burden table repeats the titles)."""
    rows: dict[str, list[str]] = {}
    for line in markdown.splitlines():
        if line.startswith("| ") and " | " in line:
            rows.setdefault(line.split(" | ")[0].removeprefix("| "), line.split(" | "))
    return rows


def test_the_rules_output_on_the_recorded_figures_is_the_recorded_default(recorded: tuple[dict[str, Any], str]) -> None:
    document = recorded[0]
    assert recommended_option(Evaluation.from_json(document)) == document["recommended_option"]
    assert f"Alpha default (evaluation.json `recommended_option`): `{document['recommended_option']}`" in recorded[1]


PUBLISHED = Path(__file__).parents[2] / "docs" / "security-options.json"


@pytest.mark.skipif(not PUBLISHED.exists(), reason="docs/security-options.json not published yet (evaluate --publish)")
def test_the_published_document_follows_from_its_figures() -> None:
    """The committed document's recommendation and default are what the rules give on its own figures."""
    document = json.loads(PUBLISHED.read_text())
    results = Evaluation.from_json(document)
    assert recommend(results) == document["recommendation"]
    assert recommended_option(results) == document["recommended_option"]
    assert PUBLISHED.with_suffix(".md").read_text().endswith(render_markdown(results))


def test_the_recommendation_follows_the_recorded_figures(recorded: tuple[dict[str, Any], str]) -> None:
    """A changed figure changes the text: the secret's HPACK bytes, and the load reader's exposure."""
    document = json.loads(json.dumps(recorded[0]))
    document["options"]["shared-secret"]["hpack_request_bytes"] = 9.99
    assert any("then 9.99 per request" in line for line in recommend(Evaluation.from_json(document)))
    document["options"]["shared-secret"]["bypass"]["timing_p_value"] = 1e-9
    text = recommend(Evaluation.from_json(document))
    assert any("p = 1e-09: evidence of a timing leak" in line for line in text)
    assert "never 1. header only, 3. shared secret" in text[-1]
    document["options"]["shared-secret"]["bypass"]["timing_p_value"] = 0.5
    document["options"]["load-reader"]["bypass"] |= {"verdict": "leak", "leaks": 3}
    advice = recommend(Evaluation.from_json(document))[-1]
    assert "2b. load-reader client certificate as the default" not in advice
    assert "never 1. header only, 2b. load-reader client certificate" in advice


def test_without_instruction_counts_the_text_says_so(recorded: tuple[dict[str, Any], str]) -> None:
    document = {**recorded[0], "instructions": {"missing": "valgrind not found (Debian package valgrind)"}}
    results = Evaluation.from_json(document)
    text = recommend(results)
    assert "Instruction counts were not taken (valgrind not found (Debian package valgrind))" in text[0]
    assert not any("A new TLS connection" in line for line in text)
    assert "| not measured | not measured |" in render_markdown(results)


def test_request_hpack_counts_the_opt_in_once_per_connection_then_indexed() -> None:
    assert request_hpack(None) == (0, 0)
    (bare_first, bare), (secret_first, secret) = request_hpack("TEXT"), request_hpack("TEXT; secret=" + "x" * 43)
    assert bare_first < secret_first and secret_first > 43  # the literal
    assert bare == 1.0  # the bare opt-in: then one indexed byte per request
    assert secret == secret_first  # a secret is sent never-indexed (RFC 7541 §7.1.3): the literal on every request


# --- one live run ------------------------------------------------------------------------------------------


@pytest.mark.timeout(600)
@pytest.mark.starts_first  # about 3 minutes: the suite's longest test
def test_quick_evaluation_fills_every_cell(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "secure_orca", "evaluate", "--quick", "--no-instructions", "--output", str(tmp_path)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    results = json.loads((tmp_path / "evaluation.json").read_text())
    markdown = (tmp_path / "evaluation.md").read_text()
    check_cells(results, markdown, envoy=lb.envoy_available())
    assert results["instructions"] == {"missing": "--no-instructions was given"}
    assert "Instruction counts were not taken (--no-instructions was given)" in markdown
    # no secret of the run leaked into the outputs
    assert "secret=" not in markdown and "secret=" not in (tmp_path / "evaluation.json").read_text()


# --- option 4, the out-of-band stream -----------------------------------------------------------------------


def check_out_of_band(results: dict[str, Any], markdown: str) -> None:
    """The matched-freshness table is filled, each cell repeated, and option 4's sentence cites every cell."""
    cell = results["options"][OUT_OF_BAND]
    oob = cell["out_of_band"]
    assert "hpack_response" not in cell and cell["hpack_request_bytes"] == 0  # the data path carries nothing
    settings = results["settings"]
    cells = {(c["path"], c["period"]): c for c in oob["cells"]}
    assert sorted(cells) == sorted((p, t) for p in ("in-band", "out-of-band") for t in settings["matched_periods"])
    (line,) = [line for line in results["recommendation"] if line.startswith(cell["title"] + ":")]
    for (path, _), c in cells.items():
        assert c["runs"] == len(c["bytes_runs"]) == len(c["staleness_runs"]) == settings["matched_repeats"]
        assert len(c["delivered_runs"]) == len(c["bytes_per_report_runs"]) == len(c["recovery_runs"]) == c["runs"]
        assert c["bytes_per_s"]["min"] > 0 and min(c["delivered_runs"]) > 0 and min(c["bytes_per_report_runs"]) > 0
        assert ("model_bytes_per_s" in c) == (path == "in-band")  # the model, beside the wire figure
        if path == "in-band":  # with its error against the median on the wire
            error = round(c["model_bytes_per_s"] / c["bytes_per_s"]["median"] - 1, 3)
            assert f"| {c['model_bytes_per_s']:g} ({error:+.0%}) |" in markdown
        assert f"{c['staleness']['median']:g} s ({c['staleness']['min']:g}–{c['staleness']['max']:g})" in line
        per_report = Spread.of(c["bytes_per_report_runs"], 1)
        assert f"{per_report.median:g} B ({per_report.min:g}–{per_report.max:g}) per delivered report" in line or (
            f"against {per_report.median:g} B ({per_report.min:g}–{per_report.max:g})" in line
        )
    counted = results["instructions"]
    if "missing" not in counted:
        per_report = counted["oob_report"]["per_report"]["median"]
        assert per_report > 0 and f"{per_report:,.0f} instructions per streamed report" in line
        ratios = {o: counted["options"][o]["request_ratio"]["median"] for o in OPTIONS}
        if counted["repeats"] >= 2:  # one layout has no spread: a 0.5% difference is not resolved by it
            assert ratios[OUT_OF_BAND] < ratios["load-reader"]  # same replica and certificate, no in-band report
    assert "## In band against out of band at matched freshness" in markdown


def test_recorded_run_with_option_4_renders_as_written(recorded: tuple[dict[str, Any], str]) -> None:
    document, markdown = recorded
    results = Evaluation.from_json(document)
    assert to_json(results) == document
    assert recommend(results) == document["recommendation"]
    assert render_markdown(results) == markdown
    check_out_of_band(document, markdown)


def test_option_4_figures_move_the_beta_path_and_never_the_alpha_default(recorded: tuple[dict[str, Any], str]) -> None:
    """Ten runs a side past the staleness threshold move the beta path both ways; the alpha default stays in band."""
    document = json.loads(json.dumps(recorded[0]))
    oob = document["options"][OUT_OF_BAND]["out_of_band"]
    for out_staler in (True, False):
        for c in oob["cells"]:
            out = c["path"] == "out-of-band"
            c["staleness_runs"] = [3.0 + i / 100 if out == out_staler else 0.25 + i / 100 for i in range(10)]
        results = Evaluation.from_json(document)
        assert recommended_option(results) == "load-reader"
        against = any(r.startswith("beta: against out of band, staleness at") for r in run_reasons(results))
        assert against == out_staler
        if out_staler:
            assert beta_path(results) is None
        (line,) = [line for line in recommend(results) if line.startswith("4. out-of-band stream (certificate):")]
        assert "staleness at" in line and ("(out of band worse)" if out_staler else "(out of band better)") in line


def test_wall_clock_cells_print_only_outside_the_a_a_interval(recorded: tuple[dict[str, Any], str]) -> None:
    """A wall-clock median inside the A/A control's 95% interval prints 'does not resolve'; a column in which
    nothing resolves is dropped."""
    results = Evaluation.from_json(recorded[0])
    rows = matrix(recorded[1])
    keys = columns(results)
    for option in OPTIONS:
        cell = results.options[option]
        for column, key in enumerate(keys, start=5):
            median, control = getattr(cell.request_cost, key).median, interval(results, key)
            assert rows[cell.title][column] == ("does not resolve" if control.holds(median) else str(median))
    for key in {"throughput_ratio", "p99_ratio"} - set(keys):
        assert all(interval(results, key).holds(getattr(results.options[o].request_cost, key).median) for o in OPTIONS)


def test_the_a_a_interval_is_a_prediction_interval() -> None:
    same = Interval.of([1.0] * 10)
    assert (same.low, same.high) == (1.0, 1.0)
    spread = Interval.of([0.9, 1.1] * 5)
    assert spread.low < 0.9 and spread.high > 1.1  # wider than the rounds themselves: one more round's ratio
    assert not Interval.of([1.0]).holds(float("nan")) and Interval.of([1.0]).holds(123.0)  # one round: nothing resolves
