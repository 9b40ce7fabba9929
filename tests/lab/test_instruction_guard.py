"""CI guard on the feature's per-request cost, in instructions (callgrind), not time.

The ASGI app as ``serve`` builds it runs in process under valgrind; each figure is a window of N requests
minus a window of M on the same warm process, with the drift sources pinned (``benchmarks.pinned``), so a
repeat gives the same count to about 0.02%. The guard fails when a request costs more instructions, relative
to the same request with the feature turned off, than its limit allows. Takes seconds; skipped (with the
reason) where valgrind, its callgrind.h header or a C compiler is missing: CI installs valgrind
(scripts/setup.sh).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from benchmarks import instructions
from benchmarks.common import BenchPKI
from secure_orca.lab import instrcount

MISSING = instrcount.valgrind_available(marks=True)
pytestmark = pytest.mark.skipif(MISSING is not None, reason=f"instruction-count guard needs valgrind: {MISSING}")

# on ÷ off, ASGI app in process (the demo /healthz handler behind authentication, about 110-160 k instructions
# with the feature off). Measured on 529c62d: front proxy 1.037, secret 1.039, refused 1.013, no opt-in 1.000.
# The whole-server figures in docs/performance.md add what the report costs hypercorn, h2 and hpack (carried past
# h2 and indexed by server/hpack/headers.py); read that page before raising a limit.
LIMITS = {"front-proxy": 1.05, "secret": 1.05, "refused": 1.02, "no-opt-in": 1.002}


@pytest.mark.timeout(300)  # a hang guard only (it once went past 120 s on 2 CPUs under extra load)
@pytest.mark.starts_first  # callgrind, about 40 s
def test_feature_cost_per_request_stays_within_its_limit(tmp_path: Path) -> None:
    """Every variant against its limit, and every count repeatable, from one callgrind run: one test, so that
    pytest-xdist's workers do not each run callgrind again for a share of the variants (a module fixture is made
    once per worker)."""
    bench = BenchPKI.create(tmp_path / "pki")
    # A window of 200 requests (400 minus 200): the ratios agree with 400-request windows' to 0.01% (1.03934 against
    # 1.03926 for the front proxy, 1.04794 both for the secret), repeats within 0.05%, for 15% less of the run's CPU.
    counted: dict[str, Any] = instructions.run_inprocess(
        bench, tmp_path, requests=400, baseline=200, repeats=2, keys=list(LIMITS)
    )
    per_request = counted["per_request"]
    ratios = {v: instructions.ratio_range(per_request[f"on/{v}"], per_request[f"off/{v}"])[0] for v in LIMITS}
    over = {v: f"{ratio:.4f} > {LIMITS[v]}" for v, ratio in ratios.items() if ratio > LIMITS[v]}
    assert not over, f"on/off instructions per request over the limit: {over}"
    unsteady = {label: f"{values.spread:.3%}" for label, values in per_request.items() if values.spread >= 0.002}
    assert not unsteady, f"repeats differ by 0.2% or more: {unsteady}"
