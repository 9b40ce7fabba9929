"""The recommendation of ``secure-orca evaluate``, derived from the measured matrix by rules written here
(pure: figures in, sentences out). A changed figure changes the text; tests hold the rules on synthetic
matrices (tests/test_recommend.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

Grants = Literal["nothing needed", "any identity", "load only", "unknown"]


@dataclass(frozen=True)
class Figures:
    """What the evaluation measured for one option."""

    option: str
    title: str
    bypass_leaks: int  # vectors through which a client that bypasses the LB read a report
    bypass_vectors: int
    bypass_verdict: str  # the probe's verdict for the bypass client
    grants: Grants  # what else the LB's credential grants, read back from selfsubjectreviews
    lb_secret: bool  # the credential is a secret that travels in every request (and lives in LB config)
    lb_certificate: bool  # the LB must present a client certificate upstream
    cost: float | None  # per-request cost ratio against the feature off (instructions where counted)
    cost_bound: float  # a ratio at or below this is within the measurement's noise (the A/A spread)
    through_lb_verdict: str = "unknown"  # the probe's verdict for a client of the load balancer


def _rank(f: Figures) -> tuple[int, int, int]:
    """Lower is better: exposure first, then what else the credential grants, then cost."""
    grants = {"load only": 0, "any identity": 1, "unknown": 2, "nothing needed": 3}[f.grants]
    costly = int(f.cost is not None and f.cost > f.cost_bound)
    return (0 if f.bypass_leaks == 0 and f.bypass_verdict == "no-leak" else 1, grants + f.lb_secret, costly)


def derive(matrix: Sequence[Figures]) -> list[str]:
    """Sentences, each citing the figures it rests on: one per option, then the recommendation."""
    out: list[str] = []
    unsafe = [f for f in matrix if f.bypass_leaks > 0]
    safe = [f for f in matrix if f.bypass_leaks == 0 and f.bypass_verdict == "no-leak"]
    unclear = [f for f in matrix if f not in unsafe and f not in safe]
    for f in unsafe:
        text = (
            f"{f.title}: not safe where a client can reach a replica without the load balancer; the probe read "
            f"load reports through {f.bypass_leaks} of {f.bypass_vectors} bypass vectors."
        )
        if f.through_lb_verdict == "no-leak":
            text += " Through the load balancer it leaked nothing: the exposure is exactly the clients that bypass it."
        out.append(text)
    for f in unclear:
        out.append(f"{f.title}: no verdict ({f.bypass_verdict}); it cannot be recommended from this run.")
    for f in safe:
        if f.grants == "any identity":
            text = (
                f"{f.title}: no leak to the bypass client, but the load balancer's credential also made the replica "
                "believe any user and group it named (system:masters included, measured): it fits a load "
                "balancer that must authenticate certificate users anyway, and over-grants one that only reads load."
            )
        elif f.grants == "load only" and f.lb_secret:
            text = (
                f"{f.title}: no leak to the bypass client and no identity granted, but the secret travels in every "
                "request, lives in load balancer configuration, and grants load to anyone who learns it."
            )
        elif f.grants == "load only":
            text = f"{f.title}: no leak to the bypass client, and the credential grants load reports only."
        else:
            text = f"{f.title}: no leak to the bypass client; what else its credential grants: {f.grants}."
        if f.cost is not None and f.cost > f.cost_bound:
            text += f" It costs x{f.cost} per request against the feature off (noise bound x{f.cost_bound})."
        out.append(text)
    if not safe:
        out.append("Recommendation for the KEP: none of the measured options held against the bypass client.")
        return out
    best = min(safe, key=_rank)
    fallback = [f for f in sorted(safe, key=_rank) if f is not best]
    advice = f"Recommendation for the KEP: resolve the open question with {best.title} as the default"
    identity = [f for f in safe if f.grants == "any identity" and f is not best]
    if identity:
        advice += (
            f"; {identity[0].title} where the load balancer already authenticates certificate users (the "
            "credential is needed for that anyway, so reading load adds no power)"
        )
    others = [f for f in fallback if f not in identity]
    if others:
        advice += f"; {', '.join(f.title for f in others)} only where the above cannot be deployed"
    if unsafe:
        advice += f"; never {', '.join(f.title for f in unsafe)} except behind an explicit flag documented as unsafe"
    out.append(advice + ".")
    return out
