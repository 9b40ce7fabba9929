"""The HPACK model: a small case computed by hand, the mitigations' effects, determinism, and the CLI."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from secure_orca.cli import main
from secure_orca.hpackcost.model import MITIGATIONS, Scenario, grid, published, response_headers, simulate, trace
from secure_orca.orca.headers import REPORT as HEADER
from secure_orca.orca.report import LoadReport

# RFC 7541 Appendix B code lengths (bits) of the characters used below.
HUFFMAN_BITS = {
    **dict.fromkeys("012aceiost", 5),
    **dict.fromkeys(" -.3456789=_dflmnpru", 6),
    **dict.fromkeys("zTE", 7),
    **dict.fromkeys(",X", 8),
}


def huffman_bytes(text: str) -> int:
    return -(-sum(HUFFMAN_BITS[c] for c in text) // 8)


def test_three_responses_by_hand() -> None:
    """1 response/s, a new sample every second, 1 decimal: every response carries a new report value.

    Response 0: literal with incremental indexing and a literal name: 0x40, then the name (1 length byte +
    15 Huffman bytes: 10 six-bit and 11 five-bit characters = 115 bits) and the value (1 length byte + 49
    Huffman bytes: 387 bits) = 67 bytes. Responses 1 and 2: the name is the report's own entry, index
    62 + (entries inserted since): 67, then 65, both past the 6-bit prefix (two bytes), plus the new
    value (50 bytes) = 52 bytes. The table holds under 2 kB, so nothing is evicted and no other field
    changes size (their indices shift by one but stay in the same integer length): marginal = 67, 52, 52.
    """
    scenario = Scenario(rate=1, interval=1, decimals=1, duration=3)
    values = [dict(headers)[HEADER] for headers in trace(scenario).header_lists]
    assert values == [
        "TEXT cpu_utilization=0.4, mem_utilization=0.6, rps_fractional=297.6",
        "TEXT cpu_utilization=0.5, mem_utilization=0.6, rps_fractional=299.8",
        "TEXT cpu_utilization=0.3, mem_utilization=0.6, rps_fractional=276.5",
    ]
    assert huffman_bytes(HEADER) == 15
    assert [huffman_bytes(v) for v in values] == [49, 49, 49]
    result = simulate(scenario)
    assert (result.responses, result.warmup) == (3, 0)
    assert result.first_send == 1 + (1 + 15) + (1 + 49) == 67
    assert result.marginal == result.orca_bytes == (67 + 52 + 52) / 3 == 57.0
    assert result.eviction_cost == 0 and result.evictions_per_s == 0
    assert result.uncompressed == len(HEADER) + 67 == 88 and result.entry_size == 120
    assert result.literals_per_s == result.reports_per_s == 1.0
    assert result.bytes_per_s == 57.0 and result.replay_exact


def test_deterministic_for_a_seed() -> None:
    scenario = Scenario(rate=100, interval=0.1, duration=5)
    assert simulate(scenario) == simulate(scenario)
    assert trace(scenario).header_lists != trace(replace(scenario, seed=2)).header_lists


def test_response_headers_look_like_kube_apiserver() -> None:
    import random

    rng = random.Random(0)
    first, later = response_headers(rng, 0.2), response_headers(rng, 1.7)
    assert [n for n, _ in first] == [
        ":status",
        "audit-id",
        "cache-control",
        "content-type",
        "x-kubernetes-pf-flowschema-uid",
        "x-kubernetes-pf-prioritylevel-uid",
        "content-length",
        "date",
    ]
    assert dict(first)["date"] == "Thu, 01 Jan 2026 00:00:00 GMT"
    assert dict(later)["date"] == "Thu, 01 Jan 2026 00:00:01 GMT"
    assert dict(first)["audit-id"] != dict(later)["audit-id"]
    assert dict(first)["x-kubernetes-pf-flowschema-uid"] == dict(later)["x-kubernetes-pf-flowschema-uid"]


def test_threshold_publishes_only_moves() -> None:
    reports = [
        LoadReport(cpu_utilization=c, rps_fractional=r) for c, r in [(0.5, 100), (0.52, 104), (0.56, 100), (0.56, 106)]
    ]
    # 0.52 and 104 (4%) stay within 0.05; 0.56 moved 0.06 from 0.5; 106 moved 6% from 100.
    assert published(reports, 0.05) == [0, 0, 2, 3]
    assert published(reports, 0.0) == [0, 1, 2, 3]


def test_once_per_interval_attaches_one_report_per_new_value() -> None:
    scenario = Scenario(rate=100, interval=0.1, duration=2, mitigation=MITIGATIONS["once-per-interval"])
    run = trace(scenario)
    assert sum(run.attached) == 20 and run.attached[:11] == [True] + [False] * 9 + [True]
    result = simulate(scenario)
    assert result.reports_per_s <= 1 / scenario.interval
    assert result.max_age < scenario.interval


def test_mitigations_against_baseline_at_high_rate() -> None:
    base = Scenario(rate=2000, interval=0.1, duration=1)  # 2,000 responses per mitigation
    none = simulate(base)
    results = {name: simulate(replace(base, mitigation=m)) for name, m in MITIGATIONS.items()}
    assert all(r.replay_exact for r in results.values())
    # Never-indexed: no table entry, so no evictions by the report, but the full literal every time.
    never = results["never-indexed"]
    assert never.orca_evictions_per_s == 0 and never.eviction_cost == 0
    assert never.marginal > 10 * none.marginal and never.literals_per_s == pytest.approx(2000)
    # Churn from audit-id, content-length and date evicts the report: more literals than samples.
    assert none.literals_per_s > 2 / base.interval
    assert results["once-per-interval"].marginal < none.marginal / 3
    assert results["bin"].uncompressed < none.uncompressed and results["bin"].marginal < none.marginal
    assert results["quantise"].decimals == 2 and results["quantise"].cpu_mae > none.cpu_mae
    assert results["combined"].marginal < results["once-per-interval"].marginal


def test_grid_shares_the_unmitigated_cells() -> None:
    base = Scenario(rate=1, interval=0.1, decimals=3)
    cells = grid([1, 10], [0.1, 1], [1, 3], [MITIGATIONS["none"], MITIGATIONS["bin"]], base)
    assert len(cells) == 2 * 2 * 2 + 2
    assert len(set(cells)) == len(cells)


def test_cli_json(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["hpack", "model", "--rates", "1,10", "--intervals", "1", "--decimals", "1", "--duration", "4"]
    assert main([*argv, "--mitigations", "none,bin", "--base-interval", "1", "--jobs", "1", "--json"]) == 0
    cells = json.loads(capsys.readouterr().out)["cells"]
    assert [(c["mitigation"], c["rate"], c["decimals"]) for c in cells] == [
        ("none", 1, 1),
        ("none", 10, 1),
        ("bin", 1, 3),
        ("bin", 10, 3),
    ]


def test_cli_tables(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["hpack", "model", "--rates", "10", "--intervals", "0.1", "--decimals", "3", "--duration", "3"]
    assert main([*argv, "--jobs", "1"]) == 0
    out = capsys.readouterr().out
    assert "marginal/resp" in out and "once-per-interval" in out and "KEP example" in out


@pytest.mark.parametrize(
    "extra",
    [["--rates", "0"], ["--rates", "x"], ["--decimals", "13"], ["--mitigations", "nope"], ["--duration", "0"]],
)
def test_cli_usage_errors(extra: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["hpack", "model", *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("secure-orca hpack: error: ") and err.count("\n") == 1
