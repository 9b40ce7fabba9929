"""The recommendation of ``secure-orca evaluate``: a stated policy over properties the probe measures exactly, which
a measured figure can overturn only past a practical threshold with a proper test (pure: figures in, sentences out;
tests/lab/test_recommend.py moves each rule and each figure both ways, on the real option set).

The policy (``POLICY``), in order:

1. exposure: an option through which the bypass client read a report, or whose secret comparison timed
   differently (p < TIMING_ALPHA), is never recommended; one without a verdict is not recommended;
2. blast radius of a leaked or misissued credential: a credential that grants load only beats one that grants any
   identity (read back from selfsubjectreviews); at equal grants a certificate (bound to a key, from a dedicated
   CA) beats a secret (a bearer value in every request and in load balancer configuration);
3. operational burden: at equal blast radius, fewer new server flags (``options.NEW_FLAGS``) win, then the KEP's
   order;
4. phasing: KEP-6315's alpha specifies reports on responses and defers out of band to beta, so the alpha default
   is an in-band option and out of band (4) is the beta path, never the alpha default.

Figures overturn it only past ``THRESHOLDS`` (each states its practical size and the decision it feeds):

- cost feeds the alpha default: an option whose instructions per request add more than a quarter to a request, or
  whose certificate at least triples a new connection's instructions, over the whole range of memory layouts,
  gives way to the next option of the policy that stays below both;
- in band against out of band at a matched period feeds the beta path: out of band stays the beta path unless it
  is worse by the threshold factor on a figure (staleness after a load step, recovery after the load drops,
  reports delivered per second, bytes per delivered report, instructions per delivered report). A sampled figure
  crosses only when the ratio of medians is past the factor and a two-sided Mann-Whitney U test gives
  p < FIGURE_ALPHA; instruction counts (which vary only by memory layout) cross when every pair of values is
  past the factor."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from secure_orca.kep_options import option_named
from secure_orca.lab.options import NEW_FLAGS, OPTIONS, OUT_OF_BAND, TITLES
from secure_orca.lab.results import Evaluation, Grants, Instructions, MatchedCell, OutOfBand, Spread
from secure_orca.probe.stats import TIMING_ALPHA, mann_whitney_u, median

REMOTE = "remote zone at low traffic"
FIGURE_ALPHA = 0.01  # a sampled figure's rank test must give p below this to count (with its ratio past the factor)


@dataclass(frozen=True)
class Threshold:
    """A figure's practical size: past ``factor`` (and its test) it overturns ``feeds``."""

    figure: str
    factor: float
    unit: str
    feeds: str
    why: str


THRESHOLDS = {
    t.figure: t
    for t in (
        Threshold("instructions per request", 1.25, "÷ feature off", "the alpha default",
                  "the option adds more than a quarter to a request's instructions"),
        Threshold("instructions per new connection", 3.0, "÷ without a certificate", "the alpha default",
                  "the certificate at least triples a new connection's instructions (load balancers keep "
                  "connections open, so less is paid rarely)"),
        Threshold("staleness", 2.0, "out of band ÷ in band", "the beta path",
                  "the weight takes twice as long to halve after a load step"),
        Threshold("recovery", 2.0, "out of band ÷ in band", "the beta path",
                  "the weight takes twice as long to rise back after the load drops"),
        Threshold("reports delivered", 2.0, "in band ÷ out of band", "the beta path",
                  "half as many reports reach the load balancer per second"),
        Threshold("bytes per delivered report", 2.0, "out of band ÷ in band", "the beta path",
                  "a delivered report costs twice the bytes on the wire"),
        Threshold("instructions per delivered report", 2.0, "out of band ÷ in band", "the beta path",
                  "a delivered report costs twice the server's instructions"),
    )
}  # fmt: skip
POLICY = (
    "Not measured, chosen: the alpha default is the option that holds against the bypass client (rule 1) with the "
    "smallest blast radius of a leaked or misissued credential (load only before any identity; a certificate "
    "before a secret that grants the same), then the smallest operational burden (new server flags), then the "
    "KEP's order. KEP-6315's alpha specifies reports on responses and defers out of band to beta: out of band (4) "
    "is the beta path and never the alpha default. A measured figure overturns this only past its threshold "
    f"(below), with a two-sided Mann-Whitney U test at p < {FIGURE_ALPHA:g} for sampled figures; an option that "
    "grants any identity is offered only where the load balancer already authenticates certificate users (a "
    "deployment fact the measurements cannot see)."
)
RULES = ("exposure", "blast radius", "operational burden", "phasing (alpha in band, beta out of band)",
         "a figure past its threshold")  # fmt: skip


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
    stream: OutOfBand | None = None  # option 4: at matched periods against in band
    per_report: Spread | None = None  # option 4: instructions per streamed report
    connection_cost: Spread | None = None  # instructions per new connection with its certificate ÷ without
    in_band_extra: Spread | None = None  # option 4: in band's (2b's) added instructions per request, over layouts


# --- the policy ---------------------------------------------------------------------------------------------


def timing_leak(f: Figures) -> bool:
    return f.timing_p is not None and f.timing_p < TIMING_ALPHA


def exposed(f: Figures) -> bool:
    """Rule 1: a report reached the bypass client, or the secret's comparison timed differently."""
    return f.bypass_leaks > 0 or timing_leak(f)


def holds(f: Figures) -> bool:
    return not exposed(f) and f.bypass_verdict == "no-leak"


def grant_rank(f: Figures) -> int:
    """Rule 2, the blast radius of a leaked or misissued credential: lower is smaller."""
    return {"load only": 0, "any identity": 2, "unknown": 4, "nothing needed": 6}[f.grants] + f.lb_secret


def policy_key(f: Figures) -> tuple[int, int, int]:
    """Rules 2 and 3, then the KEP's order."""
    order = OPTIONS.index(f.option) if f.option in OPTIONS else len(OPTIONS)
    return grant_rank(f), NEW_FLAGS.get(f.option, 0), order


def blast_radius(f: Figures) -> str:
    """What a leaked or misissued credential of ``f`` does (from its measured grants and its kind)."""
    if f.grants == "any identity":
        return "acts as any user and group it names, system:masters included"
    if f.grants == "nothing needed":
        return "no credential: any client that reaches a replica reads its load"
    if f.grants != "load only":
        return f"not read back ({f.grants})"
    if f.lb_secret:
        return "reads load from anywhere it reaches a replica, until the secret is rotated (a bearer value)"
    return "reads load only, until the certificate expires or its CA is rotated (bound to its key)"


# --- the figures' tests -------------------------------------------------------------------------------------

Side = Literal["out of band worse", "out of band better"]


@dataclass(frozen=True)
class Comparison:
    """One figure at one period, out of band against in band: the ratio of medians (as its threshold states it),
    the rank test's p (None: counted, not sampled) and its effect size, and whether it crossed."""

    figure: str
    period: float
    ratio: float
    p: float | None
    effect: float | None  # Vargha-Delaney A: P(an out-of-band run > an in-band run), ties halved
    side: Side | None
    case: str = ""  # "" the load step on one of two replicas; REMOTE the low-traffic remote locality

    @property
    def where(self) -> str:
        return f"{self.period:g} s" + (f", {self.case}" if self.case else "")

    def clause(self) -> str:
        t = THRESHOLDS[self.figure]
        test = f", p = {self.p:.2g}, A = {self.effect:.2f}" if self.p is not None and self.effect is not None else ""
        return f"{self.figure} at {self.where}: x{self.ratio:.3g} {t.unit}{test}"


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else math.inf if a > 0 else 1.0


def sampled(figure: str, period: float, oob: Sequence[float], inb: Sequence[float], higher_is_worse: bool = True
            ) -> Comparison | None:  # fmt: skip
    """A sampled figure: crosses when the ratio of medians is past the factor and p < FIGURE_ALPHA."""
    if not oob or not inb:
        return None
    test = mann_whitney_u(oob, inb)
    effect = test.u / (len(oob) * len(inb))
    med_oob, med_inb = median(oob), median(inb)
    ratio = _ratio(med_oob, med_inb) if higher_is_worse else _ratio(med_inb, med_oob)
    factor = THRESHOLDS[figure].factor
    side: Side | None = None
    if test.p_value < FIGURE_ALPHA:
        side = "out of band worse" if ratio >= factor else "out of band better" if ratio <= 1 / factor else None
    return Comparison(figure, period, round(ratio, 3), test.p_value, round(effect, 3), side)


def counted(figure: str, period: float, oob: Spread, inb: Spread) -> Comparison:
    """A counted figure (instructions): crosses when every pair of values is past the factor."""
    factor = THRESHOLDS[figure].factor
    ratio = _ratio(oob.median, inb.median)
    side: Side | None = None
    if _ratio(oob.min, inb.max) >= factor:
        side = "out of band worse"
    elif _ratio(oob.max, inb.min) <= 1 / factor:
        side = "out of band better"
    return Comparison(figure, period, round(ratio, 3), None, None, side)


def in_band_per_report(extra: Spread, cell: MatchedCell, rps: float) -> Spread | None:
    """In band's instructions per delivered report at ``cell``'s period: the feature's whole added cost per
    request (2b against off, over memory layouts; an upper bound, every request pays the opt-in check) times the
    requests per delivered report measured on the wire at that period."""
    delivered = cell.delivered
    if delivered is None or delivered.median <= 0 or extra.max <= 0:  # no added cost measured: nothing to divide
        return None
    per = rps / delivered.median
    return Spread(round(extra.median * per), round(max(extra.min, 0) * per), round(extra.max * per))


def comparisons(f: Figures) -> list[Comparison]:
    """Every figure of option 4 against in band, period by period."""
    s = f.stream
    if s is None:
        return []
    out: list[Comparison | None] = []
    for period in s.periods:
        oob, inb = s.cell("out-of-band", period), s.cell("in-band", period)
        if oob is None or inb is None:
            continue
        out += [
            sampled("staleness", period, oob.staleness_runs, inb.staleness_runs),
            sampled("recovery", period, oob.recovery_runs, inb.recovery_runs),
            sampled("reports delivered", period, oob.delivered_runs, inb.delivered_runs, higher_is_worse=False),
            sampled("bytes per delivered report", period, oob.bytes_per_report_runs, inb.bytes_per_report_runs),
        ]
        per_inb = in_band_per_report(f.in_band_extra, inb, s.rps) if f.in_band_extra else None
        if f.per_report is not None and per_inb is not None:
            out.append(counted("instructions per delivered report", period, f.per_report, per_inb))
    far, near = s.remote_cell("out-of-band"), s.remote_cell("in-band")
    if far is not None and near is not None:
        found = sampled("staleness", far.period, far.staleness_runs, near.staleness_runs)
        out.append(replace(found, case=REMOTE) if found else None)
    return [c for c in out if c is not None]


# --- the decisions ------------------------------------------------------------------------------------------


def too_costly(f: Figures) -> list[str]:
    """The cost figures of ``f`` past their thresholds over the whole range (the alpha default's decision)."""
    out = []
    request = THRESHOLDS["instructions per request"]
    if f.cost is not None and f.layouts >= 1 and f.cost.min >= request.factor:
        out.append(f"instructions per request x{f.cost.median:g} {request.unit} (past x{request.factor:g})")
    connection = THRESHOLDS["instructions per new connection"]
    if f.connection_cost is not None and f.connection_cost.min >= connection.factor:
        out.append(f"instructions per new connection x{f.connection_cost.median:g} {connection.unit} "
                   f"(past x{connection.factor:g})")  # fmt: skip
    return out


@dataclass(frozen=True)
class Decision:
    alpha: Figures | None  # the alpha default
    beta: Figures | None  # out of band as the beta path (None: it does not hold, or a figure is against it)
    passed_over: list[tuple[Figures, list[str]]]  # options the policy ranked above the default, and why (cost)
    against: list[Comparison]  # figures past their threshold against out of band
    supporting: list[Comparison]  # figures past their threshold for out of band
    stream: Figures | None  # option 4's figures, whatever the decision


def decide(matrix: Sequence[Figures]) -> Decision:
    safe = sorted((f for f in matrix if holds(f)), key=policy_key)
    in_band = [f for f in safe if f.stream is None and f.option != OUT_OF_BAND]
    passed: list[tuple[Figures, list[str]]] = []
    alpha = None
    for f in in_band:
        costly = too_costly(f)
        if not costly:
            alpha = f
            break
        passed.append((f, costly))
    if alpha is None and in_band:  # every option is past a cost threshold: cost orders nothing, the policy decides
        alpha, passed = in_band[0], []
    stream = next((f for f in matrix if f.option == OUT_OF_BAND or f.stream is not None), None)
    found = comparisons(stream) if stream is not None else []
    against = [c for c in found if c.side == "out of band worse"]
    supporting = [c for c in found if c.side == "out of band better"]
    beta = stream if stream is not None and holds(stream) and not against else None
    return Decision(alpha, beta, passed, against, supporting, stream)


def choose(matrix: Sequence[Figures]) -> Figures | None:
    """The alpha default (None: no in-band option holds)."""
    return decide(matrix).alpha


def recommended(matrix: Sequence[Figures]) -> str | None:
    chosen = choose(matrix)
    return chosen.option if chosen else None


def reasons(matrix: Sequence[Figures]) -> list[str]:
    """Why, in words that hold no figure: two runs that agree give the same list. Only what decides counts: a
    figure for out of band never changes a decision (it is the beta path unless a figure is against it), so it
    is cited in the text, not here."""
    d = decide(matrix)
    out = [f"exposure: {f.title} leaks" for f in matrix if exposed(f)]
    out += [f"exposure: {f.title} has no verdict" for f in matrix if not exposed(f) and not holds(f)]
    if d.alpha is None:
        return [*out, "no in-band option holds: no alpha default"]
    out += [f"cost: {f.title} passed over ({'; '.join(c.split(' x')[0] for c in why)} past the threshold)"
            for f, why in d.passed_over]  # fmt: skip
    out.append(f"alpha default: {d.alpha.title}, blast radius: {blast_radius(d.alpha)}")
    out.append("phasing: out of band is the beta path, never the alpha default")
    if d.stream is not None and not holds(d.stream):
        out.append(f"beta: {d.stream.title} does not hold")
    out += [f"beta: against out of band, {c.figure} at {c.where} past x{THRESHOLDS[c.figure].factor:g}"
            for c in d.against]  # fmt: skip
    return out


# --- the sentences ------------------------------------------------------------------------------------------


def _ranked(safe: Sequence[Figures]) -> list[Figures]:
    return sorted(safe, key=policy_key)


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
    decision = decide(matrix)
    if decision.alpha is None:
        out.append("Recommendation for the KEP: none of the measured options held against the bypass client.")
        return out
    out.append(advice(decision, safe, unsafe))
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
        c = f.cost
        text += f" Per request it costs x{c.median} [{c.min}, {c.max}] instructions against the feature off"
        costly = too_costly(f)
        if costly:
            text += f": past the threshold ({'; '.join(costly)})."
        elif f.layouts < 2:
            text += " (one memory layout: no spread was measured), below the threshold."
        else:
            text += f" ({spread_clause(f)}), below the threshold."
    return text


def spread_clause(f: Figures) -> str:
    if f.layouts < 2:
        return "one memory layout: the spread of the counts was not measured"
    return f"range over {f.layouts} memory layouts"


def _cell(s: Spread | None, unit: str) -> str:
    return "not measured" if s is None else f"{s.median:g} {unit} ({s.min:g}–{s.max:g})"


def stream_sentence(f: Figures, text: str) -> str:
    """Option 4's sentence: exposure and grants (``text``), then each matched period against in band."""
    s = f.stream
    assert s is not None
    text = text.removesuffix(".") + "; no request carries an opt-in and no response a report"
    per_report = f"; {f.per_report.median:,.0f} instructions per streamed report" if f.per_report is not None else ""
    text += per_report + "."
    for period in s.periods:
        oob, inb = s.cell("out-of-band", period), s.cell("in-band", period)
        if oob is None or inb is None:
            continue
        text += (
            f" At a {period:g} s period (median, range over {oob.runs} runs, out of band against in band): the weight "
            f"halved in {_cell(oob.staleness, 's')} against {_cell(inb.staleness, 's')}; "
            f"{_cell(oob.delivered, 'reports/s')} delivered against {_cell(inb.delivered, 'reports/s')}; "
            f"{_cell(oob.bytes_per_report, 'B')} per delivered report against {_cell(inb.bytes_per_report, 'B')}."
        )
    far, near = s.remote_cell("out-of-band"), s.remote_cell("in-band")
    if far is not None and near is not None:
        text += (
            f" In a remote zone at {far.lb_rps:g} load-balanced requests/s (load_aware_locality): the weight halved in "
            f"{_cell(far.staleness, 's')} ({far.moved}/{far.runs} moved) against {_cell(near.staleness, 's')} "
            f"({near.moved}/{near.runs})."
        )
    found = comparisons(f)
    if found:
        text += " Tests: " + "; ".join(c.clause() + (f" ({c.side})" if c.side else "") for c in found) + "."
    return text


def advice(d: Decision, safe: Sequence[Figures], unsafe: Sequence[Figures]) -> str:
    best = d.alpha
    assert best is not None
    text = (
        f"Recommendation for the KEP: resolve the open question with {best.title} as the default (alpha; policy: "
        f"{blast_radius(best)}"
    )
    if d.passed_over:
        text += "; cost past its threshold passed over " + ", ".join(
            f"{f.title} ({'; '.join(why)})" for f, why in d.passed_over
        )
    text += ")"
    placed = [best]
    if d.stream is not None:
        if d.beta is not None:
            text += f"; {d.stream.title} as the beta path, where the load balancer reads reports out of band"
            if d.supporting:
                text += f" (figures for it: {'; '.join(c.clause() for c in d.supporting)})"
        elif holds(d.stream):
            text += (
                f"; {d.stream.title} is the KEP's beta path, but these figures are against it past their "
                f"thresholds ({'; '.join(c.clause() for c in d.against)})"
            )
        placed.append(d.stream)
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


def timing_sentence(p: float | None, detectable_us: float | None = None, controls: dict[str, float] | None = None
                    ) -> str:  # fmt: skip
    """What the secret comparison's timing check showed: the sentence depends on p, and names the smallest shift
    its positive controls were caught at (``controls``: shift in µs -> p; None: not run)."""
    if p is None:
        return "its comparison was not timed in this run"
    if p < TIMING_ALPHA:
        return f"the timing check of its comparison gave p = {p:.3g}: evidence of a timing leak (p < {TIMING_ALPHA:g})"
    text = f"the timing check of its comparison gave p = {p:.3g}: no evidence of a timing leak at p < {TIMING_ALPHA:g}"
    if detectable_us is not None:
        text += f"; the smallest leak its positive controls were caught at is {detectable_us:g} µs per comparison"
    elif controls:
        largest = max(float(k) for k in controls)
        text += f"; its positive controls caught no shift up to {largest:g} µs: it could not have detected a leak"
    return text


def recommend(results: Evaluation) -> list[str]:
    """The recommendation that follows from the measured figures (each sentence cites them): what a certificate
    costs per connection, what the secret costs on the wire, then ``derive``."""
    opts = results.options
    fp, secret = opts["front-proxy"], opts["shared-secret"]
    bypass = secret.bypass
    out = []
    counted_ = results.instructions
    if isinstance(counted_, Instructions):
        for certificate, c in counted_.connections.items():
            users = [TITLES[o].split(".")[0] for o in OPTIONS if presents(o) == certificate]
            out.append(
                f"A new TLS connection presenting the {certificate} certificate (options {', '.join(users)}) costs "
                f"x{c.ratio.median} [{c.ratio.min}, {c.ratio.max}] the instructions of one without "
                f"({c.with_cert:,} against {c.without:,}), once per connection: load balancers hold connections open."
            )
    else:
        out.append(
            f"Instruction counts were not taken ({counted_.missing}), so this run states no cost in instructions."
        )
    out.append(
        f"The shared secret travels in every request header: {secret.hpack_request_first_bytes} HPACK bytes once per "
        f"connection, then {secret.hpack_request_bytes} per request, against {fp.hpack_request_first_bytes} and "
        f"{fp.hpack_request_bytes} for the bare opt-in; it lives in load balancer configuration and logs, and grants "
        "to anyone who learns it until rotated; "
        f"{timing_sentence(bypass.timing_p_value, bypass.timing_detectable_us, bypass.timing_controls)}."
    )
    return out + derive(figures(results))


def presents(option: str) -> str | None:
    """The client certificate the load balancer presents under ``option`` (None: none)."""
    certificate = option_named(option).certificate
    return str(certificate) if certificate is not None else None


def figures(results: Evaluation) -> list[Figures]:
    """The measured matrix as the rules read it."""
    counted_ = results.instructions
    per_request = counted_.options if isinstance(counted_, Instructions) else {}
    connections = counted_.connections if isinstance(counted_, Instructions) else {}
    report = counted_.oob_report if isinstance(counted_, Instructions) else None
    reader = per_request.get("load-reader")
    extra = None
    if reader is not None:  # 2b's added instructions per request, over layouts
        off = reader.per_request_off
        r = reader.request_ratio
        extra = Spread(round((r.median - 1) * off), round((r.min - 1) * off), round((r.max - 1) * off))
    out = []
    for option in OPTIONS:
        cell = results.options[option]
        measured = per_request.get(option)
        certificate = presents(option)
        connection = connections.get(certificate) if certificate else None
        stream = option == OUT_OF_BAND
        out.append(
            Figures(
                option=option,
                title=cell.title,
                bypass_leaks=cell.bypass.leaks,
                bypass_vectors=cell.bypass.vectors,
                bypass_verdict=cell.bypass.verdict,
                grants=cell.bypass.grants,
                lb_secret=option_named(option).secret,
                lb_certificate=certificate is not None,
                cost=measured.request_ratio if measured else None,
                through_lb_verdict=cell.through_lb.verdict,
                layouts=counted_.repeats if isinstance(counted_, Instructions) else 0,
                timing_p=cell.bypass.timing_p_value,
                stream=cell.out_of_band if stream else None,
                per_report=report.per_report if report and stream else None,
                connection_cost=connection.ratio if connection else None,
                in_band_extra=extra if stream else None,
            )
        )
    return out


def recommended_option(results: Evaluation) -> str | None:
    """The alpha default as data (evaluation.json's ``recommended_option``)."""
    return recommended(figures(results))


def beta_path(results: Evaluation) -> str | None:
    """Out of band when the rules keep it as the beta path (evaluation.json's ``beta_path``)."""
    beta = decide(figures(results)).beta
    return beta.option if beta else None


def run_reasons(results: Evaluation) -> list[str]:
    return reasons(figures(results))


def stream_verdict_rows(results: Evaluation) -> list[Comparison]:
    """Option 4's comparisons, for the document's tables."""
    return comparisons(next(f for f in figures(results) if f.option == OUT_OF_BAND))
