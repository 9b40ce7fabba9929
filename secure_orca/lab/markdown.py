"""evaluation.md and the matrix ``secure-orca evaluate`` prints, rendered from the typed results (pure)."""

from __future__ import annotations

from typing import Any

from secure_orca.lab.options import BURDEN, OPTIONS, OUT_OF_BAND
from secure_orca.lab.results import COST_KEYS, Evaluation, Exposure, Instructions, NotMeasured, OutOfBand, Spread

HEADER = ["option", "bypass client", "through the LB", "instructions/request ÷ off",
          "instructions/new connection ÷ no certificate", "wall clock: req/s ÷ off", "wall clock: p99 ÷ off",
          "HPACK B/resp", "HPACK B/req", "secret timing p", "what else the credential grants"]  # fmt: skip


def fmt(value: Any) -> str:
    return "n/a" if value is None else f"{value}"


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def instruction_cells(results: Evaluation, option: str) -> list[str]:
    """Instructions per request ÷ feature off, and per new connection ÷ without a certificate (median [min, max]
    over memory layouts)."""
    counted = results.instructions
    if not isinstance(counted, Instructions):
        return ["not measured", "not measured"]
    conn = str(counted.connection.ratio) if "front-proxy" in option else "n/a"
    return [str(counted.options[option].request_ratio), conn]


def noise(control: Spread) -> float:
    """How far from 1 the A/A control's ratio went (the feature-off replica against itself): a wall-clock ratio
    no farther from 1 than this is noise."""
    return round(max(abs(control.min - 1), abs(control.max - 1)), 3)


def wall_clock(ratio: Spread, control: Spread) -> str:
    """The median ratio where it resolves beyond the A/A control's spread, else says that it does not."""
    if abs(ratio.median - 1) > noise(control):
        return fmt(ratio.median)
    return "does not resolve"


def _exposure(via: Exposure | NotMeasured) -> str:
    return f"{via.verdict} ({via.leaks}/{via.vectors})" if isinstance(via, Exposure) else via.verdict


def matrix_rows(results: Evaluation) -> list[list[str]]:
    control = results.control
    rows = [["0. feature off, A/A control", "-", "-", "-", "-",
             *(f"1 ± {noise(getattr(control, k))}" for k in COST_KEYS), *["-"] * 4]]  # fmt: skip
    for option in OPTIONS:
        cell = results.options[option]
        bypass = cell.bypass
        rows.append([
            cell.title,
            f"{bypass.verdict} ({bypass.leaks}/{bypass.vectors} vectors leak)",
            _exposure(cell.through_lb),
            *instruction_cells(results, option),
            *(wall_clock(getattr(cell.request_cost, k), getattr(control, k)) for k in COST_KEYS),
            fmt(cell.hpack_response.marginal_bytes_per_response) if cell.hpack_response else "0 (no report)",
            fmt(cell.hpack_request_bytes),
            fmt(bypass.timing_p_value),
            bypass.grants,
        ])  # fmt: skip
    return rows


def render_markdown(results: Evaluation) -> str:
    m = results.machine
    s = results.settings
    burden_rows = [[results.options[o].title, *BURDEN[o].values()] for o in OPTIONS]
    parts = [
        "# KEP-6315: the three options and the out-of-band stream, measured\n",
        f"Machine: {m.cpus} CPUs ({m.cpu}), Python {m.python}; Envoy in front: "
        f"{'yes' if results.envoy else 'no'}; {s.rounds} interleaved rounds of {s.duration} s, "
        f"h2load c={s.connections} m={s.streams}; total {results.seconds} s.\n",
        "## Matrix\n",
        table(HEADER, matrix_rows(results)),
        "\nCost is counted in instructions (callgrind, `secure_orca/lab/instrcount.py`): per request, the "
        "option's replica against the feature-off one with the load balancer's identity on /healthz, a run of "
        f"{s.instr_requests} requests minus a run of {s.instr_baseline}; per new TLS connection, with the "
        "front-proxy certificate against none. Median [min, max] over memory layouts (one per repeat); counts are "
        "otherwise deterministic. The wall-clock columns are secondary: feature-on / feature-off from the same "
        "run (median of rounds), with row 0 measuring the feature-off replica against itself in the same way; "
        "ratios that differ from 1 by no more than row 0 does (its `1 ± x`: the largest distance from 1 over its "
        "rounds) are noise, not cost, and the cell says `does not resolve` instead of printing them. Exposure "
        "verdicts are `secure-orca probe`'s: `leak`, `no-leak` (with a positive control that did get a report), "
        "`inconclusive`. Row 4's replica is in load-reader mode with the stream on; its load balancer (Envoy, "
        "`--out-of-band`) sends no opt-in, so its requests and responses carry nothing, and its bypass exposure "
        "includes the in-band vectors.\n",
        *out_of_band_section(results),
        "## Operational burden\n",
        table(["option", *BURDEN["header-only"].keys()], burden_rows),
        "\n## Recommendation\n",
        *[f"- {line}" for line in results.recommendation],
        "",
    ]
    return "\n".join(parts)


def out_of_band_section(results: Evaluation) -> list[str]:
    """Option 4's own tables: bytes on the wire against in-band HPACK, instructions per report, staleness."""
    oob = results.options[OUT_OF_BAND].out_of_band if OUT_OF_BAND in results.options else None
    if not isinstance(oob, OutOfBand):
        return []
    counted = results.instructions
    per_report = counted.oob_report if isinstance(counted, Instructions) else None
    wire = [[f"{w.rps:g}", f"{w.in_band_bytes_per_s:,}", f"{w.out_of_band_bytes_per_s:,}"] for w in oob.wire]
    stale = [[s.path, f"{s.lb_rps:g}", f"{s.report_period:g} s" if s.report_period else "on responses",
              f"{s.seconds}" if s.moved else f"not within {s.seconds}", f"{s.weight_before} → {s.weight_after}"]
             for s in oob.staleness]  # fmt: skip
    parts = [
        "## 4. Out of band: the stream's own figures\n",
        f"Bytes on the wire per load-balancer connection (`secure_orca/lab/oobcost.py`): the stream measured on a "
        f"real TLS 1.3 connection, {oob.tls_bytes_per_report} ciphertext bytes per report ({oob.grpc_bytes_per_report}"
        f" of gRPC message), sent every {oob.period:g} s whatever the request rate; in band, the report's HPACK "
        "bytes on the responses, modelled (`secure-orca hpack model --intervals 0.1 --decimals 2 --mitigations "
        "none`).\n",
        table(["LB connection's requests/s", "in band: B/s (HPACK)", f"out of band at {oob.period:g} s: B/s"], wire),
        "",
    ]
    if per_report is not None:
        r = per_report.per_report
        parts.append(
            f"Instructions per streamed report (callgrind, {per_report.long} reports minus {per_report.short} on "
            f"one stream, one memory layout per repeat): {r.median:,.0f} [{r.min:,.0f}, {r.max:,.0f}], median "
            "[min, max].\n"
        )
    if stale:
        parts += [
            f"Staleness (`secure_orca/lab/staleness.py`): two load-reader replicas behind Envoy (CSWRR, weight "
            f"update every 0.1 s, blackout 1 s), load-balanced traffic at the rate shown, then a step ({oob.step}); "
            f"the seconds until Envoy's weight for the loaded replica halved (admin `/clusters`, read every 50 ms, "
            f"waited at most {oob.bound:g} s). One run's figures.\n",
            table(["reports", "LB requests/s", "report period", "seconds to halve the weight", "weight"], stale),
            "",
        ]
    return parts
