"""The benchmarks run (smoke counts). Never asserts on time: only on counts the feature promises."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from benchmarks import run

needs_h2load = pytest.mark.skipif(
    shutil.which("h2load") is None or (shutil.which("cc") or shutil.which("gcc")) is None,
    reason="needs h2load (nghttp2-client) and a C compiler for its client-certificate shim",
)


def test_middleware_never_encodes_or_verifies_per_request(tmp_path: Path) -> None:
    results = run.run_all(run.SMOKE, tmp_path, ["middleware"])["middleware"]
    assert results["requests"] >= 2 * run.SMOKE.mw_rounds * len(results["paths"])
    assert results["sampler_encodes_during_requests"] == 0
    assert results["encoder_calls_during_requests"] == {"format_number": 0, "encode_proto": 0}
    assert results["front_proxy_verifications"] == 0


def test_sampler_section_runs(tmp_path: Path) -> None:
    results = run.run_all(run.SMOKE, tmp_path, ["sampler"])["sampler"]
    assert set(results["in_process"]["cpu_per_second"]) == {"10ms", "100ms", "1s"}
    assert results["in_process"]["ticks"]["10ms"] > 0
    assert set(results["replicas"]["cpu_per_second"]) == {"off", "10ms", "100ms", "1s"}


@needs_h2load
def test_verification_once_per_chain_not_per_request(tmp_path: Path) -> None:
    results = run.run_all(run.SMOKE, tmp_path, ["connections"])["connections"]
    proof = results["proof"]
    assert proof["requests"] == run.SMOKE.proof_requests
    assert proof["verifications"] == 1 <= proof["connections"]
    later = results["rate_runs_with_cert"]
    assert later["connections"] == later["requests"] == run.SMOKE.conn_count * run.SMOKE.conn_rounds
    assert later["verifications"] == 0  # same chain: the cache answers on every new connection


@needs_h2load
def test_cli_smoke_end_to_end_writes_results(tmp_path: Path) -> None:
    out = tmp_path / "results"
    assert (
        run.main(
            [
                "--smoke",
                "--output",
                str(out),
                "--json",
                str(tmp_path / "r.json"),
                "--only",
                "endtoend",
                "--only",
                "profile",
            ]
        )
        == 0
    )
    payload = json.loads((tmp_path / "r.json").read_text())
    summaries = payload["results"]["endtoend"]["summaries"]
    assert [s["load"] for s in summaries] == [load.label for load in run.SMOKE.e2e_loads]
    assert all(set(s["rps_ratio"]) == {"a2", "b", "c", "d"} for s in summaries)
    assert "### 1. End to end" in (out / "results.md").read_text()
    assert payload["results"]["profile"]["requests"] == run.SMOKE.profile_load.requests


def test_authentication_verifies_each_chain_once(tmp_path: Path) -> None:
    import asyncio

    from benchmarks.authn_cost import measure
    from benchmarks.common import BenchPKI

    added, verifications = asyncio.run(measure(BenchPKI.create(tmp_path), rounds=2, count=200))
    assert set(added) == {"anonymous (no certificate)", "x509 user (client CA)", "front proxy naming a user"}
    # Two certificates (user, front proxy), each checked against both bundles once, over 1,200 requests.
    assert verifications == {"front-proxy": 2, "client-ca": 2}


def test_every_benchmark_script_is_a_section() -> None:
    scripts = {p.stem for p in Path(run.__file__).parent.glob("*.py") if '__name__ == "__main__"' in p.read_text()}
    assert scripts - {"run"} == {script.module for script in run.SCRIPTS.values()}


def test_a_script_section_keeps_what_the_script_printed(tmp_path: Path) -> None:
    result = run.run_all(run.SMOKE, tmp_path, ["authn-cost"])["authn-cost"]
    assert result["command"] == "python -m benchmarks.authn_cost --rounds 1 --count 200"
    assert "certificate chain verifications over all requests" in result["output"]
    info = dict.fromkeys(
        ("nproc", "usable_cpus", "cpu", "kernel", "python", "hypercorn", "h2", "h2load", "git", "date")
    )
    text = run.markdown({"authn-cost": result | {"seconds": 0}}, info, "python -m benchmarks.run --only authn-cost")
    assert f"### {run.TITLES['authn-cost']}" in text and result["output"].strip() in text


def test_a_section_that_cannot_run_small_is_skipped_with_its_reason(tmp_path: Path) -> None:
    assert run.run_all(run.SMOKE, tmp_path, ["audit-cost"])["audit-cost"]["skipped"] == run.CALLGRIND
