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
# h2 and indexed by server/h2_headers.py); read that page before raising a limit.
LIMITS = {"front-proxy": 1.05, "secret": 1.05, "refused": 1.02, "no-opt-in": 1.002}


@pytest.fixture(scope="module")
def counted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    workdir: Path = tmp_path_factory.mktemp("instr")
    bench = BenchPKI.create(workdir / "pki")
    return instructions.run_inprocess(bench, workdir, requests=600, baseline=200, repeats=2, keys=list(LIMITS))


@pytest.mark.parametrize("variant", list(LIMITS))
def test_feature_cost_per_request_stays_within_its_limit(counted: dict[str, Any], variant: str) -> None:
    on, off = counted["per_request"][f"on/{variant}"], counted["per_request"][f"off/{variant}"]
    ratio, _, _ = instructions.ratio_range(on, off)
    assert ratio <= LIMITS[variant], f"{variant}: on/off = {ratio:.4f} instructions per request"


def test_counts_are_deterministic(counted: dict[str, Any]) -> None:
    for label, values in counted["per_request"].items():
        assert values.spread < 0.002, f"{label}: repeats differ by {values.spread:.3%}"
