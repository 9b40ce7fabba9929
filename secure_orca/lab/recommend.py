"""The recommendation of ``secure-orca evaluate``: all of its prose, derived from the measured results by rules
written here (pure: figures in, sentences out). Each rule is a function a test can move both ways
(tests/lab/test_recommend.py); the choices that are not measurements are ``POLICY``, stated in their own paragraph.

The rules, in order (``RULES`` names them in the document):

1. exposure: an option through which the bypass client read a report, or whose secret comparison timed
   differently (p < TIMING_ALPHA), is never recommended; one without a verdict is not recommended;
2. grants: among the rest, the credential that grants least wins (load only, then any identity); a secret that
   travels in every request ranks after a certificate that grants the same;
3. cost: among in-band options equal under 1 and 2, one whose instructions per request (range over memory
   layouts) lie wholly below another's is cheaper; overlapping ranges are within the spread and do not decide;
4. in band (2b) or out of band (4): at matched freshness, each period's staleness and bytes on the wire count
   for the path whose range lies wholly below the other's. Out of band is the default when it has an advantage
   and no disadvantage, in band when it has a disadvantage and no advantage; otherwise the figures do not
   decide, and POLICY does."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from secure_orca.lab.options import OPTIONS, OUT_OF_BAND, TITLES
from secure_orca.lab.results import Evaluation, Grants, Instructions, OutOfBand, Spread, compare
from secure_orca.probe.stats import TIMING_ALPHA

RULES = ("exposure", "grants", "cost", "in band or out of band")
POLICY = (
    "Not measured, chosen: where the figures do not decide between in band (2b) and out of band (4), in band is the "
    "default because KEP-6315's alpha specifies reports on responses and Envoy's in-band CSWRR needs no extra "
    "stream; an option that grants any identity is offered only where the load balancer already authenticates "
    "certificate users (a deployment fact the measurements cannot see); the operational burden table is a "
    "description, not a measurement, and no rule reads it; among options the figures leave tied, the KEP's order "
    "decides."
)


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
    cost: Spread | None = None  # instructions per request ÷ feature off, over memory layouts (None: not counted)
    through_lb_verdict: str = "unknown"  # the probe's verdict for a client of the load balancer
    layouts: int = 0  # memory layouts counted
    timing_p: float | None = None  # the secret comparison's timing check (None: not run)
    stream: OutOfBand | None = None  # option 4: at matched freshness against in band
    per_report: float | None = None  # option 4: instructions per streamed report


def timing_leak(f: Figures) -> bool:
    return f.timing_p is not None and f.timing_p < TIMING_ALPHA


def exposed(f: Figures) -> bool:
    """Rule 1: a report reached the bypass client, or the secret's comparison timed differently."""
    return f.bypass_leaks > 0 or timing_leak(f)


def holds(f: Figures) -> bool:
    return not exposed(f) and f.bypass_verdict == "no-leak"


def grant_rank(f: Figures) -> int:
    """Rule 2: lower is better."""
    return {"load only": 0, "any identity": 2, "unknown": 4, "nothing needed": 6}[f.grants] + f.lb_secret


def cheaper(a: Figures, b: Figures) -> bool:
    """Rule 3: ``a`` costs fewer instructions per request than ``b``, the ranges over layouts separating (one
    layout has no spread to separate: it orders nothing)."""
    if a.cost is None or b.cost is None or min(a.layouts, b.layouts) < 2:
        return False
    return compare(a.cost, b.cost) == "lower"


def stream_verdict(stream: OutOfBand) -> tuple[list[str], list[str]]:
    """Rule 4: out of band's advantages and disadvantages against in band, cell by cell, where ranges separate."""
    better, worse = [], []
    for period in stream.periods:
        oob, inb = stream.cell("out-of-band", period), stream.cell("in-band", period)
        if oob is None or inb is None:
            continue
        for a, b, good, bad in (
            (oob.staleness, inb.staleness, "fresher", "staler"),
            (oob.bytes_per_s, inb.bytes_per_s, "fewer bytes", "more bytes"),
        ):
            verdict = compare(a, b)
            if verdict == "lower":
                better.append(f"{good} at a {period:g} s period")
            elif verdict == "higher":
                worse.append(f"{bad} at a {period:g} s period")
    return better, worse


def out_of_band_leads(stream: OutOfBand) -> bool | None:
    """Rule 4's decision: True out of band, False in band, None the figures do not decide."""
    better, worse = stream_verdict(stream)
    if better and not worse:
        return True
    if worse and not better:
        return False
    return None


def choose(matrix: Sequence[Figures]) -> Figures | None:
    """The default the rules give (None: no option holds)."""
    safe = [f for f in matrix if holds(f)]
    if not safe:
        return None
    best_grant = min(grant_rank(f) for f in safe)
    top = [f for f in safe if grant_rank(f) == best_grant]
    in_band = [f for f in top if f.stream is None]
    undominated = [f for f in in_band if not any(cheaper(g, f) for g in in_band)]
    in_band_best = undominated[0] if undominated else None  # ties: the KEP's order (POLICY)
    stream = next((f for f in top if f.stream is not None), None)
    if in_band_best is None or stream is None:
        return in_band_best or stream
    assert stream.stream is not None
    return stream if out_of_band_leads(stream.stream) else in_band_best


def recommended(matrix: Sequence[Figures]) -> str | None:
    chosen = choose(matrix)
    return chosen.option if chosen else None


def _ranked(safe: Sequence[Figures]) -> list[Figures]:
    return sorted(safe, key=lambda f: (grant_rank(f), f.cost.median if f.cost else 0.0))


def derive(matrix: Sequence[Figures]) -> list[str]:
    """Sentences, each citing the figures it rests on: one per option, then the recommendation."""
    out: list[str] = []
    unsafe = [f for f in matrix if exposed(f)]
    safe = [f for f in matrix if holds(f)]
    unclear = [f for f in matrix if f not in unsafe and f not in safe]
    for f in unsafe:
        if f.bypass_leaks:
            text = (
                f"{f.title}: not safe where a client can reach a replica without the load balancer; the probe read "
                f"load reports through {f.bypass_leaks} of {f.bypass_vectors} bypass vectors."
            )
        else:
            text = f"{f.title}: not safe: its secret comparison timed differently (p = {f.timing_p:.3g})."
        if f.bypass_leaks and f.through_lb_verdict == "no-leak":
            text += " Through the load balancer it leaked nothing: the exposure is exactly the clients that bypass it."
        out.append(text)
    for f in unclear:
        out.append(f"{f.title}: no verdict ({f.bypass_verdict}); it cannot be recommended from this run.")
    for f in safe:
        out.append(option_sentence(f, safe))
    best = choose(matrix)
    if best is None:
        out.append("Recommendation for the KEP: none of the measured options held against the bypass client.")
        return out
    out.append(advice(best, safe, unsafe))
    return out


def option_sentence(f: Figures, safe: Sequence[Figures]) -> str:
    if f.grants == "any identity":
        text = (
            f"{f.title}: no leak to the bypass client, but the load balancer's credential also made the replica "
            "believe any user and group it named (system:masters included, measured)."
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
        return stream_sentence(f, text)
    if f.cost is not None:
        below = [g.title for g in safe if g.stream is None and cheaper(f, g)]
        above = [g.title for g in safe if g.stream is None and cheaper(g, f)]
        text += (
            f" Per request it costs x{f.cost.median} [{f.cost.min}, {f.cost.max}] instructions against the feature off"
        )
        if below or above:
            text += (f"; fewer than {', '.join(below)}" if below else "") + (
                f"; more than {', '.join(above)}" if above else ""
            )
            text += " (ranges separate)."
        elif f.layouts < 2:
            text += " (one memory layout: no spread was measured, so the counts order nothing)."
        else:
            text += f" ({spread_clause(f)}: within the spread of every other in-band option)."
    return text


def spread_clause(f: Figures) -> str:
    if f.layouts < 2:
        return "one memory layout: the spread of the counts was not measured"
    return f"range over {f.layouts} memory layouts"


def _cell(s: Spread, unit: str) -> str:
    return f"{s.median:g} {unit} ({s.min:g}–{s.max:g})"


def stream_sentence(f: Figures, text: str) -> str:
    """Option 4's sentence: exposure and grants (``text``), then each matched-freshness cell against in band."""
    s = f.stream
    assert s is not None
    text = text.removesuffix(".") + "; no request carries an opt-in and no response a report"
    per_report = f"; {f.per_report:,.0f} instructions per streamed report" if f.per_report is not None else ""
    text += per_report + "."
    for period in s.periods:
        oob, inb = s.cell("out-of-band", period), s.cell("in-band", period)
        if oob is None or inb is None:
            continue
        stale, wire = compare(oob.staleness, inb.staleness), compare(oob.bytes_per_s, inb.bytes_per_s)
        text += (
            f" At a {period:g} s period (median, range over {oob.runs} runs): the weight halved in "
            f"{_cell(oob.staleness, 's')} out of band against {_cell(inb.staleness, 's')} in band, "
            + {"lower": "fresher", "higher": "staler", None: "which does not resolve"}[stale]
            + f"; {_cell(oob.bytes_per_s, 'B/s')} on the wire against {_cell(inb.bytes_per_s, 'B/s')}, "
            + {"lower": "fewer bytes", "higher": "more bytes", None: "which does not resolve"}[wire]
            + "."
        )
    return text


def advice(best: Figures, safe: Sequence[Figures], unsafe: Sequence[Figures]) -> str:
    text = f"Recommendation for the KEP: resolve the open question with {best.title} as the default"
    stream = next((f for f in safe if f.stream is not None), None)
    in_band = next((f for f in safe if f.stream is None and grant_rank(f) == grant_rank(best)), None)
    placed = [best]
    if stream is not None and best is not stream and grant_rank(stream) == grant_rank(best):
        assert stream.stream is not None
        better, worse = stream_verdict(stream.stream)
        leads = out_of_band_leads(stream.stream)
        why = ", ".join([*better, *(f"but {w}" for w in worse)]) or "the matched figures do not resolve"
        decided = "the figures favour in band" if leads is False else "not measured: policy, see below"
        text += f" ({decided}); {stream.title} instead where the load balancer reads reports out of band ({why})"
        placed.append(stream)
    elif stream is best and in_band is not None:
        better, _ = stream_verdict(stream.stream) if stream.stream else ([], [])
        text += f" ({', '.join(better)}); {in_band.title} where the load balancer reads reports in band"
        placed.append(in_band)
    identity = [f for f in safe if f.grants == "any identity" and f not in placed]
    if identity:
        text += (
            f"; {identity[0].title} where the load balancer already authenticates certificate users (the "
            "credential is needed for that anyway, so reading load adds no power)"
        )
        placed.append(identity[0])
    others = [f for f in _ranked(safe) if f not in placed]
    if others:
        text += f"; {', '.join(f.title for f in others)} only where the above cannot be deployed"
    if unsafe:
        text += f"; never {', '.join(f.title for f in unsafe)} except behind an explicit flag documented as unsafe"
    return text + "."


def timing_sentence(p: float | None) -> str:
    """What the secret comparison's timing check showed: the sentence depends on p."""
    if p is None:
        return "its comparison was not timed in this run"
    if p < TIMING_ALPHA:
        return f"the timing check of its comparison gave p = {p:.3g}: evidence of a timing leak (p < {TIMING_ALPHA:g})"
    return f"the timing check of its comparison gave p = {p:.3g}: no evidence of a timing leak at p < {TIMING_ALPHA:g}"


def recommend(results: Evaluation) -> list[str]:
    """The recommendation that follows from the measured figures (each sentence cites them): what a certificate
    costs per connection, what the secret costs on the wire, then ``derive``."""
    opts = results.options
    fp, secret = opts["front-proxy"], opts["shared-secret"]
    out = []
    counted = results.instructions
    if isinstance(counted, Instructions):
        for certificate, c in counted.connections.items():
            users = [TITLES[o].split(".")[0] for o in OPTIONS if presents(o) == certificate]
            out.append(
                f"A new TLS connection presenting the {certificate} certificate (options {', '.join(users)}) costs "
                f"x{c.ratio.median} [{c.ratio.min}, {c.ratio.max}] the instructions of one without "
                f"({c.with_cert:,} against {c.without:,}), once per connection: load balancers hold connections open."
            )
    else:
        out.append(
            f"Instruction counts were not taken ({counted.missing}), so this run states no cost in instructions."
        )
    out.append(
        f"The shared secret travels in every request header: {secret.hpack_request_first_bytes} HPACK bytes once per "
        f"connection, then {secret.hpack_request_bytes} per request, against {fp.hpack_request_first_bytes} and "
        f"{fp.hpack_request_bytes} for the bare opt-in; it lives in load balancer configuration and logs, and grants "
        f"to anyone who learns it until rotated; {timing_sentence(secret.bypass.timing_p_value)}."
    )
    return out + derive(figures(results))


def presents(option: str) -> str | None:
    """The client certificate the load balancer presents under ``option`` (None: none)."""
    if "front-proxy" in option:
        return "front-proxy"
    if option in ("load-reader", OUT_OF_BAND):
        return "load-reader"
    return None


def figures(results: Evaluation) -> list[Figures]:
    """The measured matrix as the rules read it."""
    counted = results.instructions
    per_request = counted.options if isinstance(counted, Instructions) else {}
    report = counted.oob_report if isinstance(counted, Instructions) else None
    out = []
    for option in OPTIONS:
        cell = results.options[option]
        measured = per_request.get(option)
        out.append(
            Figures(
                option=option,
                title=cell.title,
                bypass_leaks=cell.bypass.leaks,
                bypass_vectors=cell.bypass.vectors,
                bypass_verdict=cell.bypass.verdict,
                grants=cell.bypass.grants,
                lb_secret="shared-secret" in option,
                lb_certificate=presents(option) is not None,
                cost=measured.request_ratio if measured else None,
                through_lb_verdict=cell.through_lb.verdict,
                layouts=counted.repeats if isinstance(counted, Instructions) else 0,
                timing_p=cell.bypass.timing_p_value,
                stream=cell.out_of_band if option == OUT_OF_BAND else None,
                per_report=report.per_report.median if report and option == OUT_OF_BAND else None,
            )
        )
    return out


def recommended_option(results: Evaluation) -> str | None:
    """The default as data (evaluation.json's ``recommended_option``)."""
    return recommended(figures(results))
