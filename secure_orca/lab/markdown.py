"""evaluation.md and the matrix ``secure-orca evaluate`` prints, rendered from the typed results (pure)."""

from __future__ import annotations

from typing import Any

from secure_orca.lab.options import BURDEN, OPTIONS, OUT_OF_BAND, TITLES
from secure_orca.lab.recommend import FIGURE_ALPHA, POLICY, RULES, THRESHOLDS, presents, stream_verdict_rows
from secure_orca.lab.results import (
    COST_KEYS,
    Evaluation,
    Exposure,
    Instructions,
    Interval,
    NotMeasured,
    OutOfBand,
    RequestCost,
    Spread,
    compare,
)

WALL_CLOCK = {"throughput_ratio": "wall clock: req/s ÷ off", "p99_ratio": "wall clock: p99 ÷ off"}
HEAD = ["option", "bypass client", "through the LB", "instructions/request ÷ off",
        "instructions/new connection ÷ no certificate"]  # fmt: skip
TAIL = ["HPACK B/response (20 req/s on a connection)", "HPACK B/request: once per connection, then per request",
        "secret timing p", "what else the credential grants"]  # fmt: skip
HEADER = [*HEAD, *WALL_CLOCK.values(), *TAIL]  # every column; ``columns`` drops a wall-clock one nothing resolves in

# Where each column is defined: the code that measures it and the doc that explains it (paths from docs/).
SOURCES = {
    "bypass client": ("secure_orca/probe/audit.py", "docs/probe.md"),
    "through the LB": ("secure_orca/lab/evaluate.py (through_lb)", "docs/deploy-envoy.md"),
    "instructions/request ÷ off": ("secure_orca/lab/instrcost.py, secure_orca/lab/instrcount.py",
                                   "docs/performance.md"),
    "instructions/new connection ÷ no certificate": ("secure_orca/lab/instrcost.py", "docs/performance.md"),
    "wall clock": ("secure_orca/lab/evaluate.py (request_cost), secure_orca/lab/results.py (Interval)",
                   "docs/performance.md"),
    "HPACK B/response": ("secure_orca/hpackcost/wire.py", "docs/hpack.md"),
    "HPACK B/request": ("secure_orca/lab/evaluate.py (request_hpack)", "docs/hpack.md"),
    "secret timing p": ("secure_orca/probe/audit.py (timing_check), secure_orca/probe/stats.py", "docs/probe.md"),
    "what else the credential grants": ("secure_orca/lab/evaluate.py (grants)", "docs/threat-model.md"),
    "matched freshness": ("secure_orca/lab/matched.py, secure_orca/lab/staleness.py, secure_orca/lab/oobcost.py",
                          "docs/out-of-band.md"),
    "recommendation": ("secure_orca/lab/recommend.py", "tests/lab/test_recommend.py"),
}  # fmt: skip


def fmt(value: Any) -> str:
    return "n/a" if value is None else f"{value}"


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def instruction_cells(results: Evaluation, option: str) -> list[str]:
    """Instructions per request ÷ feature off, and per new connection ÷ without a certificate (median [min, max]
    over memory layouts); a range that holds 1 is within the spread of the feature off."""
    counted = results.instructions
    if not isinstance(counted, Instructions):
        return ["not measured", "not measured"]
    ratio = counted.options[option].request_ratio
    request = f"{ratio}" + (", within the spread of off" if ratio.min <= 1 <= ratio.max else "")
    certificate = presents(option)
    measured = counted.connections.get(certificate) if certificate else None
    conn = f"{measured.ratio} ({certificate})" if measured else "n/a (no certificate)"
    return [request, conn]


def interval(results: Evaluation, key: str) -> Interval:
    return Interval.of(results.control.runs.get(key, []))


def wall_clock(cost: RequestCost, key: str, control: Interval) -> str:
    """The median ratio where it lies outside the A/A control's interval, else says that it does not resolve."""
    median = getattr(cost, key).median
    return fmt(median) if not control.holds(median) else "does not resolve"


def aa_dropped(results: Evaluation, dropped: list[str]) -> str:
    """The dropped wall-clock columns with the A/A interval that nothing resolved against."""
    keys = [k for k in COST_KEYS if WALL_CLOCK[k] in dropped]
    return ", ".join(f"{WALL_CLOCK[k]}, A/A interval {interval(results, k)}" for k in keys)


def columns(results: Evaluation) -> list[str]:
    """The wall-clock columns in which at least one option resolves; the others are dropped."""
    medians = {k: [getattr(results.options[o].request_cost, k).median for o in OPTIONS] for k in COST_KEYS}
    return [k for k in COST_KEYS if any(not interval(results, k).holds(m) for m in medians[k])]


def header(results: Evaluation) -> list[str]:
    return [*HEAD, *(WALL_CLOCK[k] for k in columns(results)), *TAIL]


def _exposure(via: Exposure | NotMeasured) -> str:
    if not isinstance(via, Exposure):
        return via.verdict
    weights = ""
    if via.weights_moved is not None:
        seen = sorted(set(via.envoy_weights or []))
        shown = f"{seen[0]:g}–{seen[-1]:g}" if seen else "none"
        weights = f"; Envoy weights {'moved' if via.weights_moved else 'did not move'} ({shown})"
    return f"{via.verdict} ({via.leaks}/{via.vectors}){weights}"


def matrix_rows(results: Evaluation) -> list[list[str]]:
    keys = columns(results)
    intervals = {k: interval(results, k) for k in keys}
    rows = [["0. feature off, A/A control (two replicas)", "-", "-", "-", "-",
             *(f"95% interval {intervals[k]}" for k in keys), *["-"] * 4]]  # fmt: skip
    for option in OPTIONS:
        cell = results.options[option]
        bypass = cell.bypass
        rows.append([
            cell.title,
            f"{bypass.verdict} ({bypass.leaks}/{bypass.vectors} vectors leak)",
            _exposure(cell.through_lb),
            *instruction_cells(results, option),
            *(wall_clock(cell.request_cost, k, intervals[k]) for k in keys),
            fmt(cell.hpack_response.marginal_bytes_per_response) if cell.hpack_response else "0 (no report)",
            f"{cell.hpack_request_first_bytes:g} once, then {cell.hpack_request_bytes:g}",
            fmt(bypass.timing_p_value),
            bypass.grants,
        ])  # fmt: skip
    return rows


def spread_note(results: Evaluation) -> str:
    """Which instruction ranges overlap: those options are within each other's spread (the counts do not order
    them)."""
    counted = results.instructions
    if not isinstance(counted, Instructions):
        return ""
    if counted.repeats < 2:
        return "One memory layout: the instruction counts have no measured spread, so they order no options.\n"
    ranges = {o: counted.options[o].request_ratio for o in OPTIONS}
    pairs = [f"{TITLES[a].split('.')[0]} and {TITLES[b].split('.')[0]}" for i, a in enumerate(OPTIONS)
             for b in OPTIONS[i + 1:] if compare(ranges[a], ranges[b]) is None]  # fmt: skip
    if not pairs:
        return "Every pair of instruction ranges separates.\n"
    return (
        "Instruction ranges that overlap, so within the spread of each other (the counts do not order them): "
        f"{'; '.join(pairs)}.\n"
    )


def provenance(results: Evaluation) -> list[str]:
    m, p, s = results.machine, results.provenance, results.settings
    return [
        "## How this was made\n",
        f"- commit: `{p.get('commit', 'not recorded')}` at start, `{p.get('commit_end', 'not recorded')}` at the end",
        *([f"- rendered: {p['rendered']}"] if "rendered" in p else []),
        f"- command: `{p.get('command', 'not recorded')}` (the document: `./scripts/evaluate.sh --publish "
        "docs/security-options.md`)",
        f"- started: {p.get('started', 'not recorded')}; total {results.seconds} s",
        f"- machine: {m.cpus} CPUs ({m.cpu}), Python {m.python}; Envoy in front: {'yes' if results.envoy else 'no'}",
        f"- wall clock: {s.rounds} interleaved rounds of {s.duration} s, h2load c={s.connections} m={s.streams}",
        "",
        "Where each column and figure is defined (code, then doc):\n",
        *[f"- {name}: {code}; {doc}" for name, (code, doc) in SOURCES.items()],
        "",
    ]


def render_markdown(results: Evaluation) -> str:
    s = results.settings
    burden_rows = [[results.options[o].title, *BURDEN[o].values()] for o in OPTIONS]
    keys = columns(results)
    dropped = [WALL_CLOCK[k] for k in COST_KEYS if k not in keys]
    rounds = len(results.control.runs.get(COST_KEYS[0], []))
    parts = [
        "# KEP-6315: the three options and the out-of-band stream, measured\n",
        "## Matrix\n",
        table(header(results), matrix_rows(results)),
        "",
        spread_note(results),
        "Cost is counted in instructions (callgrind): per request, the option's replica against the feature-off one "
        f"with the load balancer's identity on /healthz, a run of {s.instr_requests} requests minus a run of "
        f"{s.instr_baseline}; per new TLS connection, with the certificate the option's load balancer presents "
        "(front-proxy for 2, load-reader for 2b and 4) against none, paid once per connection. Median [min, max] "
        "over memory layouts (one per repeat); the counts differ only by layout, and a range that holds 1, or "
        "overlaps another's, is within the spread. Wall clock is secondary: feature-on ÷ feature-off, interleaved "
        f"rounds; row 0 runs the same between two separate feature-off replicas over {rounds} rounds and gives a "
        "95% prediction interval for one round's ratio on the log scale (exp(mean ± t·s·√(1+1/n)) of the "
        "log-ratios, so its bounds are ratios); an option's median prints only outside it, else `does not resolve`"
        + (f"; a column in which no option resolves is dropped ({aa_dropped(results, dropped)})" if dropped else "")
        + ". The opt-in's HPACK bytes are per connection (its first send) and per request after it: the bare "
        "opt-in is indexed after its first send, a value that holds a secret is sent never-indexed (RFC 7541 "
        "§7.1.3), a literal on every request. Through the LB: the probe's verdict, then the positive control of the "
        "path (Envoy's weight for the replica, admin `/clusters`, blackout 1 s, under traffic and a load step). "
        "Exposure verdicts are `secure-orca probe`'s: `leak`, `no-leak` (with a positive control that did get a "
        "report), `inconclusive`. Row 4's load balancer (Envoy, `--out-of-band`) sends no opt-in, so its requests "
        "and responses carry nothing; its bypass exposure includes the in-band vectors.\n",
        *out_of_band_section(results),
        "## Operational burden (a description, not a measurement)\n",
        table(["option", *BURDEN["header-only"].keys()], burden_rows),
        "\n## Recommendation\n",
        "The rules, in order (`secure_orca/lab/recommend.py`; each is moved both ways by "
        "`tests/lab/test_recommend.py`): " + "; ".join(f"{i}. {r}" for i, r in enumerate(RULES, 1)) + ".\n",
        *[f"- {line}" for line in results.recommendation],
        "",
        "### Policy, not measurement\n",
        POLICY + "\n",
        *decision(results),
        *REVIEWER,
        *provenance(results),
    ]
    return "\n".join(parts)


def _range(s: Spread, unit: str = "") -> str:
    return f"{s.median:g}{unit} ({s.min:g}–{s.max:g})"


MATCHED_HEADER = ["period", "reports", "B/s on the wire", "model B/s (error)", "reports delivered/s",
                  "B per delivered report", "seconds to halve the weight", "halved", "seconds to recover",
                  "recovered"]  # fmt: skip


def remote_section(oob: OutOfBand) -> list[str]:
    """The low-traffic remote-locality case (empty when it was not measured)."""
    if not oob.remote:
        return []
    rows = [
        [c.path, f"{c.period:g} s", f"{c.lb_rps:g}", _range(c.staleness), f"{c.moved}/{c.runs}"] for c in oob.remote
    ]
    return [
        "Low traffic to a remote locality (Envoy's `load_aware_locality`, the replicas in two zones, Envoy in the "
        "first; the step on the remote zone's replica, which serves its own zone's clients directly; Envoy probes "
        "the remote zone with 3% of its traffic, `remote_probe_fraction`, which its documentation calls safe to "
        "set to 0 only when reports arrive out of band):\n",
        table(["reports", "period", "load-balanced requests/s", "seconds to halve the weight", "halved"], rows),
        "",
    ]


def _maybe(s: Spread | None) -> str:
    return "not measured" if s is None else _range(s)


def fmt_p(p: float | None) -> str:
    return "counted" if p is None else f"{p:.2g}"


def decision(results: Evaluation) -> list[str]:
    """The thresholds a figure must pass, the decision and its reasons (figure-free, equal across runs)."""
    rows = [[t.figure, f"x{t.factor:g} ({t.unit})", t.feeds, t.why] for t in THRESHOLDS.values()]
    return [
        "### Thresholds: where a figure overturns the policy\n",
        table(["figure", "threshold", "feeds", "practical size"], rows),
        "",
        f"Alpha default (evaluation.json `recommended_option`): `{results.recommended_option}`; beta path "
        f"(`beta_path`): `{results.beta_path}`. Reasons (`reasons`, without figures: runs that agree give the same):\n",
        *[f"- {reason}" for reason in results.reasons],
        "",
    ]


def out_of_band_section(results: Evaluation) -> list[str]:
    """In band against out of band at matched freshness (medians and ranges), the model's error, per report."""
    oob = results.options[OUT_OF_BAND].out_of_band if OUT_OF_BAND in results.options else None
    if not isinstance(oob, OutOfBand):
        return []
    rows = []
    for period in oob.periods:
        inb, out = oob.cell("in-band", period), oob.cell("out-of-band", period)
        if inb is None or out is None:
            continue
        for cell in (inb, out):
            error = cell.model_error
            model = f"{cell.model_bytes_per_s:g} ({error:+.0%})" if error is not None else "-"
            rows.append([f"{period:g} s", cell.path, _range(cell.bytes_per_s), model, _maybe(cell.delivered),
                         _maybe(cell.bytes_per_report), _range(cell.staleness), f"{cell.moved}/{cell.runs}",
                         _maybe(cell.recovery), f"{cell.recovered}/{cell.runs}"])  # fmt: skip
    counted = results.instructions
    per_report = counted.oob_report if isinstance(counted, Instructions) else None
    tests = [[c.figure, f"{c.period:g} s", f"x{c.ratio:g} ({THRESHOLDS[c.figure].unit})", fmt_p(c.p),
              "-" if c.effect is None else f"{c.effect:.2f}", f"x{THRESHOLDS[c.figure].factor:g}", c.side or "-"]
             for c in stream_verdict_rows(results)]  # fmt: skip
    parts = [
        "## In band against out of band at matched freshness\n",
        f"One report every period on both paths: in band the replica samples every period and attaches each new "
        "sample once per connection (`--endpoint-load-metrics-attach once-per-sample`), out of band the stream "
        f"reports at that period. Bytes: one loaded replica per period ({oob.step}) serves both paths; in band "
        f"the header block of responses with the opt-in minus without, parsed from the bytes received, at "
        f"{oob.rps:g} requests/s on one connection; out of band the ciphertext read per report on a stream to the "
        "same replica, TLS records included, over the period. No model in these columns; the HPACK model "
        "(once per interval, same rate and period) is beside them with its error against the median on the wire. "
        f"Staleness: two such replicas behind Envoy (CSWRR, weight update every 0.1 s, blackout 1 s), {oob.lb_rps:g} "
        f"load-balanced requests/s, then the step at a random time; the seconds until Envoy's weight for the "
        f"loaded replica halved (admin `/clusters`, read every 50 ms, at most {oob.bound:g} s, a run that never "
        f"halved counts as {oob.bound:g}); then the step ends and the recovery is the seconds until the weight is "
        "back at three quarters of its value before the step. Reports delivered are those that arrived (responses "
        "that carried one, messages on the stream), per second of the same run; bytes per delivered report divide "
        f"the bytes by them. {oob.repeats} interleaved repetitions per cell: median (min–max).\n",
        table(MATCHED_HEADER, rows),
        "",
        "Out of band against in band, figure by figure (two-sided Mann-Whitney U over the runs, A = P(an "
        "out-of-band run > an in-band run); instructions are counted, not sampled, and compare their whole ranges; "
        f"a figure counts only past its threshold with p < {FIGURE_ALPHA:g}):\n",
        table(["figure", "period", "ratio of medians", "p", "A", "threshold", "past it"], tests),
        "",
        *remote_section(oob),
    ]
    if per_report is not None:
        r = per_report.per_report
        parts.append(
            f"Instructions per streamed report (callgrind, {per_report.long} reports minus {per_report.short} on "
            f"one stream, one memory layout per repeat): {r.median:,.0f} [{r.min:,.0f}, {r.max:,.0f}].\n"
        )
    return parts


REVIEWER = [
    "## What a reviewer will ask\n",
    "**How severe is a leak?** A report gives five values, sampled every interval and rounded: the process's CPU "
    "utilization against its limit, memory utilization, requests finished per second, 429/5xx per second and "
    "requests in flight (docs/threat-model.md, 'The load report's inputs'). A client can already measure its own "
    "latency, and only that: a report adds the server's load from every other client, at the sampler's resolution "
    "(by default 0.1 s, two decimals), so a bypass client can watch other tenants' activity as it happens (when a "
    "controller starts a list, how busy the server is before it sends a costly request) and time its own load "
    "against it. `/metrics` does not show these values (tests/server/test_metrics_authentication.py) and is itself "
    "gated by RBAC in kube-apiserver; what it shows (request counts and latencies by verb and resource) is "
    "cumulative and scraped, not a live per-replica utilization. No value in a report is writable by a client: "
    "a leak exposes, it does not steer.\n",
    "**What transfers from this Python server to kube-apiserver in Go?** Bytes carry over: the report's HPACK "
    "bytes and the stream's bytes on the wire depend on the encoding and the protocol (HTTP/2, gRPC, TLS 1.3), "
    "not the language: Go's encoder (golang.org/x/net/http2/hpack) also indexes the bare opt-in in its dynamic "
    "table, and sends a field marked Sensitive never-indexed, as the secret is counted here. Exposure carries "
    "over: the probe's vectors are protocol-level (who can opt in over which path), "
    "and so do the grants (what a credential lets a request "
    "assert is kube-apiserver's requestheader semantics, mirrored here). Staleness carries over in shape (it is "
    "set by the report period and Envoy's weight timing, not by the server's speed). Instructions do not: the "
    "counts are CPython's, whose per-request cost and handshake cost differ from Go's by large and unequal "
    "factors; read them only as an order between options measured on the same server, and the per-connection "
    "certificate cost as a relative figure, not a Go figure.\n",
    "**What would option 2b add to kube-apiserver?** New, proposed by this project (kube-apiserver has neither): "
    "`--endpoint-load-metrics-client-ca-file` (the CA of load-reader certificates, reloaded live) and "
    "`--endpoint-load-metrics-allowed-names` (their Common Names). From KEP-6315 itself: the feature gate and "
    "`--enable-endpoint-load-metrics`. Also proposed here, for option 4 only: `--endpoint-load-metrics-oob` and "
    "`--endpoint-load-metrics-oob-min-interval` (and its stream limits), serving "
    "`xds.service.orca.v3.OpenRcaService/StreamCoreMetrics` on the serving port to the load-reader certificate. "
    "Option 2 reuses `--requestheader-client-ca-file` and `--requestheader-allowed-names`, which kube-apiserver "
    "already has. No API object is added: the grant is the certificate, not RBAC, so no new verb or resource.\n",
]
