"""The recommendation of ``secure-orca evaluate``: all of its prose, derived from the measured results by rules
written here (pure: figures in, sentences out). A changed figure changes the text; tests hold the rules on
synthetic matrices (tests/test_recommend.py) and on a recorded run (tests/test_evaluate.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from secure_orca.lab.options import OPTIONS, TITLES
from secure_orca.lab.results import COST_KEYS, Evaluation, Grants, Instructions


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


def recommend(results: Evaluation) -> list[str]:
    """The recommendation that follows from the measured figures (each sentence cites them): what the safe
    options cost, what a certificate costs per connection, what the secret costs on the wire, then ``derive``."""
    opts = results.options
    fp, secret = opts["front-proxy"], opts["shared-secret"]
    out = []
    safe = [o for o in ("front-proxy", "shared-secret") if opts[o].bypass.verdict == "no-leak"]
    counted = results.instructions
    if safe:
        names = " and ".join(TITLES[o].split(".")[0] for o in safe)
        if isinstance(counted, Instructions):
            costs = "; ".join(
                f"{TITLES[o]}: x{r.median} [{r.min}, {r.max}] "
                f"({counted.options[o].per_request_on - counted.options[o].per_request_off:+,} instructions)"
                for o in safe
                for r in [counted.options[o].request_ratio]
            )
            cost = (
                f"Per request, counted in instructions under callgrind on {counted.path} (deterministic; the "
                f"range is over {counted.repeats} memory layouts) against the feature off: {costs}."
            )
        else:
            cost = f"Instruction counts were not taken ({counted.missing}), so this run states no cost."
        spread = [getattr(getattr(results.control, k), edge) for k in COST_KEYS for edge in ("min", "max")]
        out.append(
            f"Options {names} leaked nothing to the bypass client. {cost} The wall-clock ratios (secondary) "
            f"cannot resolve this: the A/A control, the feature-off replica against itself, spans {min(spread)} to "
            f"{max(spread)}."
        )
    if isinstance(counted, Instructions):
        c, connection = counted.connection.ratio, counted.connection
        out.append(
            f"A new TLS connection presenting the front-proxy certificate costs x{c.median} [{c.min}, "
            f"{c.max}] the instructions of one without ({connection.with_cert:,} against "
            f"{connection.without:,}); the chain is verified once per chain, not per request, and load balancers "
            "hold connections open, so this is paid rarely."
        )
    extra = secret.hpack_request_bytes - fp.hpack_request_bytes
    out.append(
        f"The shared secret travels in every request header ({secret.hpack_request_bytes} HPACK bytes per "
        f"request against {fp.hpack_request_bytes} for the bare opt-in, +{round(extra, 2)}), lives in load "
        f"balancer configuration and logs, and grants to anyone who learns it until rotated; the timing check of "
        f"its comparison gave p = {secret.bypass.timing_p_value} (no evidence of a timing leak at p < 0.001)."
    )
    return out + derive(figures(results))


def figures(results: Evaluation) -> list[Figures]:
    """The measured matrix as the rules read it."""
    counted = results.instructions.options if isinstance(results.instructions, Instructions) else {}
    out = []
    for option in OPTIONS:
        cell = results.options[option]
        measured = counted.get(option)
        out.append(
            Figures(
                option=option,
                title=cell.title,
                bypass_leaks=cell.bypass.leaks,
                bypass_vectors=cell.bypass.vectors,
                bypass_verdict=cell.bypass.verdict,
                grants=cell.bypass.grants,
                lb_secret="shared-secret" in option,
                lb_certificate=option in ("front-proxy", "load-reader", "front-proxy,shared-secret"),
                cost=measured.request_ratio.median if measured else None,
                cost_bound=round(1 + 2 * measured.spread, 4) if measured else 1.0,
                through_lb_verdict=cell.through_lb.verdict,
            )
        )
    return out
