"""evaluation.md and the matrix ``secure-orca evaluate`` prints, rendered from the typed results (pure)."""

from __future__ import annotations

from typing import Any

from secure_orca.lab.options import BURDEN, OPTIONS, OUT_OF_BAND, TITLES
from secure_orca.lab.recommend import POLICY, RULES, presents
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


def columns(results: Evaluation) -> list[str]:
    """The wall-clock columns in which at least one option resolves; the others are dropped."""
    medians = {k: [getattr(results.options[o].request_cost, k).median for o in OPTIONS] for k in COST_KEYS}
    return [k for k in COST_KEYS if any(not interval(results, k).holds(m) for m in medians[k])]


def header(results: Evaluation) -> list[str]:
    return [*HEAD, *(WALL_CLOCK[k] for k in columns(results)), *TAIL]


def _exposure(via: Exposure | NotMeasured) -> str:
    return f"{via.verdict} ({via.leaks}/{via.vectors})" if isinstance(via, Exposure) else via.verdict


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
        f"- commit: `{p.get('commit', 'not recorded')}`",
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
        "95% prediction interval for one round's ratio (mean ± t·s·√(1+1/n)); an option's median prints only "
        "outside it, else `does not resolve`"
        + (f"; a column in which no option resolves is dropped ({', '.join(dropped)})" if dropped else "")
        + ". The opt-in's HPACK bytes are per connection (its first send, then indexed) and per request after it. "
        "Exposure verdicts are `secure-orca probe`'s: `leak`, `no-leak` (with a positive control that did get a "
        "report), `inconclusive`. Row 4's load balancer (Envoy, `--out-of-band`) sends no opt-in, so its requests "
        "and responses carry nothing; its bypass exposure includes the in-band vectors.\n",
        *out_of_band_section(results),
        "## Operational burden (a description, not a measurement)\n",
        table(["option", *BURDEN["header-only"].keys()], burden_rows),
        "\n## Recommendation\n",
        "The rules, in order (`secure_orca/lab/recommend.py`; each is moved both ways by "
        "`tests/lab/test_recommend.py`): "
        + "; ".join(f"{i}. {r}" for i, r in enumerate(RULES, 1))
        + ". A comparison counts only where the ranges separate.\n",
        *[f"- {line}" for line in results.recommendation],
        "",
        f"Recommended default (evaluation.json `recommended_option`): `{results.recommended_option}`.\n",
        "### Policy, not measurement\n",
        POLICY + "\n",
        *REVIEWER,
        *provenance(results),
    ]
    return "\n".join(parts)


def _range(s: Spread, unit: str = "") -> str:
    return f"{s.median:g}{unit} ({s.min:g}–{s.max:g})"


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
        stale = {"lower": "out of band fresher", "higher": "out of band staler", None: "does not resolve"}[
            compare(out.staleness, inb.staleness)]  # fmt: skip
        wire = {"lower": "out of band fewer bytes", "higher": "out of band more bytes", None: "does not resolve"}[
            compare(out.bytes_per_s, inb.bytes_per_s)]  # fmt: skip
        for cell in (inb, out):
            error = cell.model_error
            model = f"{cell.model_bytes_per_s:g} ({error:+.0%})" if error is not None else "-"
            rows.append([f"{period:g} s", cell.path, _range(cell.bytes_per_s), model, _range(cell.staleness),
                         f"{cell.moved}/{cell.runs}", wire, stale])  # fmt: skip
    counted = results.instructions
    per_report = counted.oob_report if isinstance(counted, Instructions) else None
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
        f"halved counts as {oob.bound:g}). {oob.repeats} interleaved repetitions per cell: median (min–max). A "
        "comparison is written only where the two ranges separate.\n",
        table(
            [
                "period",
                "reports",
                "B/s on the wire",
                "model B/s (error)",
                "seconds to halve the weight",
                "halved",
                "bytes",
                "freshness",
            ],
            rows,
        ),
        "",
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
    "not the language, and Go's encoder (golang.org/x/net/http2/hpack) also indexes such a field in its dynamic "
    "table. Exposure carries over: the probe's vectors are protocol-level (who can opt in over which path), "
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
