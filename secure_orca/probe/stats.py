"""Statistics for the probe's timing check (pure): a two-sided Mann-Whitney U test and the median."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

TIMING_ALPHA = 0.001  # the timing check's significance level: p below it is evidence of a timing leak


@dataclass(frozen=True)
class UTest:
    """Two-sided Mann-Whitney U test (normal approximation with tie and continuity correction)."""

    u: float
    z: float
    p_value: float


def mann_whitney_u(a: Sequence[float], b: Sequence[float]) -> UTest:
    """Do ``a`` and ``b`` come from the same distribution? ``u`` is the U statistic of ``a``."""
    n1, n2 = len(a), len(b)
    if n1 == 0 or n2 == 0:
        raise ValueError("both samples need at least one value")
    pooled = sorted([(x, 0) for x in a] + [(x, 1) for x in b])
    n = n1 + n2
    rank_sum_a = 0.0
    tie_term = 0.0
    i = 0
    while i < n:
        j = i
        while j + 1 < n and pooled[j + 1][0] == pooled[i][0]:
            j += 1
        rank = (i + j) / 2 + 1  # average rank of the tied run i..j (1-based)
        rank_sum_a += rank * sum(1 for k in range(i, j + 1) if pooled[k][1] == 0)
        t = j - i + 1
        tie_term += t**3 - t
        i = j + 1
    u = rank_sum_a - n1 * (n1 + 1) / 2
    mean = n1 * n2 / 2
    variance = n1 * n2 / 12 * ((n + 1) - tie_term / (n * (n - 1))) if n > 1 else 0.0
    if variance <= 0:
        return UTest(u, 0.0, 1.0)
    delta = u - mean
    z = (abs(delta) - 0.5) / math.sqrt(variance) if abs(delta) >= 0.5 else 0.0
    z = math.copysign(z, delta)
    return UTest(u, z, min(1.0, math.erfc(abs(z) / math.sqrt(2))))


def median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
