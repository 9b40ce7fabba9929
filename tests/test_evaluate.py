"""`secure-orca evaluate --quick` end to end: real replicas, real Envoy (CI installs it), h2load, the probe."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from secure_orca.lab import instrcount
from secure_orca.lab import launcher as lb
from secure_orca.lab.evaluate import OPTIONS, request_hpack

# What else each load balancer credential grants, read back from selfsubjectreviews by the probe.
GRANTS = {
    "header-only": "nothing needed",
    "front-proxy": "any identity",
    "load-reader": "load only",
    "shared-secret": "load only",
    "front-proxy,shared-secret": "any identity",
}


def leaves(value: Any, path: str = "") -> list[tuple[str, Any]]:
    if isinstance(value, dict):
        return [leaf for key, item in value.items() for leaf in leaves(item, f"{path}.{key}")]
    return [(path, value)]


@pytest.mark.timeout(600)  # five replicas under callgrind add about two minutes to the quick run
def test_quick_evaluation_fills_every_cell(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "secure_orca", "evaluate", "--quick", "--output", str(tmp_path)],
        capture_output=True, text=True, timeout=900, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    results = json.loads((tmp_path / "evaluation.json").read_text())
    markdown = (tmp_path / "evaluation.md").read_text()
    envoy = lb.envoy_available()
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
        if instrcount.valgrind_available() is None:
            counted = results["instructions"]["options"][option]
            assert counted["per_request_on"] > counted["per_request_off"] > 0
            assert counted["request_ratio"]["median"] > 1
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
    if instrcount.valgrind_available() is None:
        assert results["instructions"]["connection"]["ratio"]["median"] > 1  # the certificate costs instructions
        assert any("instructions under callgrind" in line for line in results["recommendation"])
    else:
        assert "missing" in results["instructions"]
    secret_line = next(line for line in results["recommendation"] if "secret travels" in line)
    assert str(results["options"]["shared-secret"]["hpack_request_bytes"]) in secret_line
    # no secret of the run leaked into the outputs
    assert "secret=" not in markdown and "secret=" not in (tmp_path / "evaluation.json").read_text()


def test_request_hpack_counts_the_opt_in_once_indexed() -> None:
    assert request_hpack(None) == 0
    bare = request_hpack("TEXT")
    with_secret = request_hpack("TEXT; secret=" + "x" * 43)
    assert 1.0 <= bare < with_secret < 2.0  # first send amortized over 100 requests, then one indexed byte
