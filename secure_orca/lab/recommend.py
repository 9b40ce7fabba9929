"""The recommendation of ``secure-orca evaluate``: all of its prose, derived from the measured results by rules
written here (pure: figures in, sentences out). A changed figure changes the text; tests hold the rules on
synthetic matrices (tests/test_recommend.py) and on a recorded run (tests/test_evaluate.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from secure_orca.lab.options import OPTIONS, OUT_OF_BAND, TITLES
from secure_orca.lab.results import COST_KEYS, Evaluation, Grants, Instructions, OutOfBand


@dataclass(frozen=True)
class Stream:
    """What option 4's stream measured: its cost per report and on the wire, and staleness against in band."""

    period: float  # seconds between reports
    tls_bytes_per_report: float
    bytes_per_s: float  # per load-balancer connection, whatever the request rate
    in_band_bytes_per_s: dict[float, float]  # the in-band report's HPACK bytes/s, by the connection's requests/s
    per_report: float | None  # instructions per streamed report (None: not counted)
    stale_in_band: dict[float, float | None]  # seconds until the weight halved, by LB requests/s (None: not
    stale_out_of_band: dict[float, float | None]  # within the bound)
    bound: float


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
    cost_spread: float | None = None  # relative spread of the instruction counts over the memory layouts
    layouts: int = 0  # memory layouts counted
    stream: Stream | None = None  # option 4: the reports travel out of band


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
        if f.stream is not None:
            text = stream_sentence(f, text)
        elif f.cost is not None and f.cost > f.cost_bound:
            text += f" It costs x{f.cost} per request against the feature off ({spread_clause(f)})."
        out.append(text)
    if not safe:
        out.append("Recommendation for the KEP: none of the measured options held against the bypass client.")
        return out
    in_band = [f for f in safe if f.stream is None]
    best = min(in_band or safe, key=_rank)  # the KEP asks about the header: out of band leads only if none holds
    stream = next((f for f in safe if f.stream is not None and f is not best), None)
    fallback = [f for f in sorted(safe, key=_rank) if f is not best and f is not stream]
    advice = f"Recommendation for the KEP: resolve the open question with {best.title} as the default"
    if stream is not None and _rank(stream) <= _rank(best):
        advice += f"; {stream.title} instead where the load balancer reads reports out of band ({why_stream(stream)})"
    elif stream is not None:
        fallback.append(stream)
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


def spread_clause(f: Figures) -> str:
    """The measurement's bound in words: the spread of the instruction counts over memory layouts."""
    if f.cost_spread is None or f.layouts < 2:
        return "one memory layout: the spread of the counts was not measured"
    return f"the counts spread {f.cost_spread:.2%} over {f.layouts} memory layouts"


def _seconds(value: float | None, bound: float) -> str:
    return f"{value} s" if value is not None else f"not within {bound:g} s"


def stream_sentence(f: Figures, text: str) -> str:
    """Option 4's sentence: exposure and grants (``text``), then what the data path, the stream and the wire
    cost, and how fast a load step moved Envoy's weight, in band against out of band."""
    s = f.stream
    assert s is not None
    text = text.removesuffix(".") + "; no request carries an opt-in and no response a report"
    if f.cost is not None:
        text += f" (x{f.cost} instructions per request against the feature off; {spread_clause(f)})"
    text += "."
    per_report = f"{s.per_report:,.0f} instructions and " if s.per_report is not None else ""
    rates = sorted(s.in_band_bytes_per_s)
    text += (
        f" The stream costs {per_report}{s.tls_bytes_per_report} bytes on the wire per report: {s.bytes_per_s} B/s "
        f"per load-balancer connection at a {s.period:g} s period whatever the request rate, against "
        + ", ".join(f"{s.in_band_bytes_per_s[r]:,} B/s" for r in rates)
        + f" in band at {', '.join(f'{r:,g}' for r in rates)} requests/s."
    )
    stale = sorted(set(s.stale_in_band) & set(s.stale_out_of_band))
    if stale:
        text += " After a load step, Envoy's weight for the loaded replica halved in " + "; ".join(
            f"{_seconds(s.stale_out_of_band[r], s.bound)} out of band against {_seconds(s.stale_in_band[r], s.bound)} "
            f"in band at {r:g} load-balanced requests/s"
            for r in stale
        )
        text += "."
    return text


def why_stream(f: Figures) -> str:
    """Why option 4 stands beside the in-band default, from its figures."""
    s = f.stream
    assert s is not None
    reasons = ["no opt-in for a bypass client to try, nothing on the data path"]
    cheaper = [r for r, b in sorted(s.in_band_bytes_per_s.items()) if b > s.bytes_per_s]
    if cheaper:
        reasons.append(f"fewer bytes than in band from {cheaper[0]:,g} requests/s per connection up")
    bound = s.bound + 1  # a weight that never moved counts as later than any that did
    faster = [r for r in sorted(s.stale_in_band) if r in s.stale_out_of_band
              and (s.stale_out_of_band[r] or bound) < (s.stale_in_band[r] or bound)]  # fmt: skip
    slower = [r for r in sorted(s.stale_in_band) if r in s.stale_out_of_band
              and (s.stale_out_of_band[r] or bound) > (s.stale_in_band[r] or bound)]  # fmt: skip
    if faster:
        reasons.append(f"fresher weights than in band at {', '.join(f'{r:g}' for r in faster)} requests/s")
    if slower:
        reasons.append(f"but staler weights than in band at {', '.join(f'{r:g}' for r in slower)} requests/s")
    return ", ".join(reasons)


def stream_of(results: Evaluation, option: str) -> Stream | None:
    oob = results.options[option].out_of_band
    if not isinstance(oob, OutOfBand):
        return None
    counted = results.instructions
    report = counted.oob_report if isinstance(counted, Instructions) else None

    def stale(path: str) -> dict[float, float | None]:
        return {m.lb_rps: m.seconds if m.moved else None for m in oob.staleness if m.path == path}

    return Stream(
        period=oob.period,
        tls_bytes_per_report=oob.tls_bytes_per_report,
        bytes_per_s=round(oob.tls_bytes_per_report / oob.period, 1),
        in_band_bytes_per_s={w.rps: w.in_band_bytes_per_s for w in oob.wire},
        per_report=report.per_report.median if report else None,
        stale_in_band=stale("in-band"),
        stale_out_of_band=stale("out-of-band"),
        bound=oob.bound,
    )


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
                cost_spread=measured.spread if measured else None,
                layouts=results.instructions.repeats if isinstance(results.instructions, Instructions) else 0,
                stream=stream_of(results, option) if option == OUT_OF_BAND else None,
            )
        )
    return out
