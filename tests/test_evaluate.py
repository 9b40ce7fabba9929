"""`secure-orca evaluate`: the results, their rendering and the recommendation on a recorded quick run (pure:
tests/data/evaluation-quick/, written by a real ``evaluate --quick`` with Envoy and callgrind), and one live
``--quick --no-instructions`` run end to end (real replicas, real Envoy (CI installs it), h2load, the probe).
Callgrind itself is held by tests/test_instruction_guard.py and benchmarks/instructions.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from secure_orca.lab import launcher as lb
from secure_orca.lab.evaluate import request_hpack
from secure_orca.lab.markdown import noise, render_markdown
from secure_orca.lab.options import OPTIONS, OUT_OF_BAND
from secure_orca.lab.recommend import recommend
from secure_orca.lab.results import Evaluation, Instructions, to_json

RECORDED = Path(__file__).parent / "data" / "evaluation-quick"

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
        missing = [path for path, value in leaves(cell) if value is None and "handshake" not in path
                   and "timing_p_value" not in path]  # fmt: skip
        assert not missing, f"{option}: empty cells {missing}"
        expected = "leak" if option == "header-only" else "no-leak"
        assert cell["bypass"]["verdict"] == expected
        assert cell["bypass"]["control_ok"]
        if envoy:
            assert cell["through_lb"]["verdict"] == "no-leak"
        for ratio in ("throughput_ratio", "p50_ratio", "p99_ratio"):
            assert cell["request_cost"][ratio]["median"] > 0
        if option != OUT_OF_BAND:  # out of band no response carries a report
            assert cell["hpack_response"]["marginal_bytes_per_response"] > 0
        assert cell["title"] in markdown
        assert cell["bypass"]["grants"] == GRANTS[option], option
    assert results["options"]["shared-secret"]["bypass"]["timing_p_value"] is not None
    assert results["control"]["throughput_ratio"]["median"] > 0 and "A/A control" in markdown
    assert results["options"]["front-proxy"]["handshake"]["connections_per_s_ratio"]["median"] > 0
    assert len(results["recommendation"]) >= 4
    assert results["recommendation"][-1].startswith(
        "Recommendation for the KEP: resolve the open question with 2b. load-reader client certificate as the default"
    )
    secret_line = next(line for line in results["recommendation"] if "secret travels" in line)
    assert str(results["options"]["shared-secret"]["hpack_request_bytes"]) in secret_line
    check_out_of_band(results, markdown, envoy)


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
        if option != OUT_OF_BAND:  # out of band no request opts in (x0.9992 in a full run): check_out_of_band
            assert counted.per_request_on > counted.per_request_off
            assert counted.request_ratio.median > 1
    assert results.instructions.connection.ratio.median > 1  # the certificate costs instructions
    assert any("instructions under callgrind" in line for line in results.recommendation)


def test_the_recommendation_follows_the_recorded_figures(recorded: tuple[dict[str, Any], str]) -> None:
    """A changed figure changes the text: the secret's HPACK bytes, and the load reader's exposure."""
    document = json.loads(json.dumps(recorded[0]))
    document["options"]["shared-secret"]["hpack_request_bytes"] = 9.99
    assert any("(9.99 HPACK bytes per request" in line for line in recommend(Evaluation.from_json(document)))
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


def test_request_hpack_counts_the_opt_in_once_indexed() -> None:
    assert request_hpack(None) == 0
    bare = request_hpack("TEXT")
    with_secret = request_hpack("TEXT; secret=" + "x" * 43)
    assert 1.0 <= bare < with_secret < 2.0  # first send amortized over 100 requests, then one indexed byte


# --- one live run ------------------------------------------------------------------------------------------


@pytest.mark.timeout(600)
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


def check_out_of_band(results: dict[str, Any], markdown: str, envoy: bool) -> None:
    """Option 4's own figures are filled and its sentence cites them."""
    cell = results["options"][OUT_OF_BAND]
    oob = cell["out_of_band"]
    assert "hpack_response" not in cell and cell["hpack_request_bytes"] == 0  # the data path carries nothing
    assert oob["tls_bytes_per_report"] > oob["grpc_bytes_per_report"] > 0
    assert [w["rps"] for w in oob["wire"]] == [1, 10, 100, 1000]
    in_band = [w["in_band_bytes_per_s"] for w in oob["wire"]]
    assert in_band == sorted(in_band) and {w["out_of_band_bytes_per_s"] for w in oob["wire"]} == {
        round(oob["tls_bytes_per_report"] / oob["period"], 1)}  # fmt: skip
    paths = [(s["path"], s["lb_rps"]) for s in oob["staleness"]]
    rates = results["settings"]["stale_rates"] if envoy else []
    assert paths == [(path, rate) for rate in rates for path in ("in-band", "out-of-band")]
    (line,) = [line for line in results["recommendation"] if line.startswith(cell["title"] + ":")]
    assert f"{oob['tls_bytes_per_report']} bytes on the wire per report" in line
    for s in oob["staleness"]:
        assert (
            f"{s['seconds']} s {s['path'].replace('-', ' ')}" if s["moved"] else f"not within {oob['bound']:g}"
        ) in line
    counted = results["instructions"]
    if "missing" not in counted:
        per_report = counted["oob_report"]["per_report"]["median"]
        assert per_report > 0 and f"{per_report:,.0f} instructions and" in line
        ratios = {o: counted["options"][o]["request_ratio"]["median"] for o in OPTIONS}
        assert ratios[OUT_OF_BAND] < ratios["load-reader"]  # same replica and certificate, no in-band report
    assert "## 4. Out of band" in markdown


def test_recorded_run_with_option_4_renders_as_written(recorded: tuple[dict[str, Any], str]) -> None:
    document, markdown = recorded
    results = Evaluation.from_json(document)
    assert to_json(results) == document
    assert recommend(results) == document["recommendation"]
    assert render_markdown(results) == markdown
    check_out_of_band(document, markdown, envoy=True)


def test_option_4_sentence_follows_the_recorded_figures(recorded: tuple[dict[str, Any], str]) -> None:
    """A changed figure changes option 4's sentence and its clause in the recommendation."""
    document = json.loads(json.dumps(recorded[0]))
    oob = document["options"][OUT_OF_BAND]["out_of_band"]
    oob["tls_bytes_per_report"] = 9999.9
    for s in oob["staleness"]:
        s |= (
            {"seconds": oob["bound"], "moved": False}
            if s["path"] == "out-of-band"
            else {"seconds": 0.25, "moved": True}
        )
    text = recommend(Evaluation.from_json(document))
    (line,) = [line for line in text if line.startswith("4. out-of-band stream (certificate):")]
    assert "9999.9 bytes on the wire per report" in line
    assert f"not within {oob['bound']:g} s out of band against 0.25 s in band" in line
    assert "fresher weights" not in text[-1] and "but staler weights than in band" in text[-1]


def test_wall_clock_cells_print_only_what_resolves(recorded: tuple[dict[str, Any], str]) -> None:
    """A wall-clock ratio no farther from 1 than the A/A control's is printed as 'does not resolve'."""
    results = Evaluation.from_json(recorded[0])
    rows: dict[str, list[str]] = {}
    for line in recorded[1].splitlines():  # the matrix comes first; the burden table repeats the titles
        if line.startswith("| ") and " | " in line:
            rows.setdefault(line.split(" | ")[0].removeprefix("| "), line.split(" | "))
    for option in OPTIONS:
        cell = results.options[option]
        for column, key in ((5, "throughput_ratio"), (6, "p99_ratio")):
            ratio, control = getattr(cell.request_cost, key), getattr(results.control, key)
            resolves = abs(ratio.median - 1) > noise(control)
            assert rows[cell.title][column] == (str(ratio.median) if resolves else "does not resolve")
    assert not any("noise bound" in line for line in results.recommendation)
