"""evaluation.md and the matrix ``secure-orca evaluate`` prints, rendered from the typed results (pure)."""

from __future__ import annotations

from typing import Any

from secure_orca.lab.options import BURDEN, OPTIONS
from secure_orca.lab.results import COST_KEYS, Evaluation, Exposure, Instructions, NotMeasured

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


def _exposure(via: Exposure | NotMeasured) -> str:
    return f"{via.verdict} ({via.leaks}/{via.vectors})" if isinstance(via, Exposure) else via.verdict


def matrix_rows(results: Evaluation) -> list[list[str]]:
    control = results.control
    rows = [["0. feature off, A/A control", "-", "-", "-", "-",
             *(fmt(getattr(control, k).median) for k in COST_KEYS), *["-"] * 3]]  # fmt: skip
    for option in OPTIONS:
        cell = results.options[option]
        bypass = cell.bypass
        rows.append([
            cell.title,
            f"{bypass.verdict} ({bypass.leaks}/{bypass.vectors} vectors leak)",
            _exposure(cell.through_lb),
            *instruction_cells(results, option),
            *(fmt(getattr(cell.request_cost, k).median) for k in COST_KEYS),
            fmt(cell.hpack_response.marginal_bytes_per_response),
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
        "# KEP-6315: the three options, measured\n",
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
        "ratios that differ from 1 by no more than row 0 does are noise, not cost. Exposure verdicts are "
        "`secure-orca probe`'s: `leak`, `no-leak` (with a positive control that did get a report), "
        "`inconclusive`.\n",
        "## Operational burden\n",
        table(["option", *BURDEN["header-only"].keys()], burden_rows),
        "\n## Recommendation\n",
        *[f"- {line}" for line in results.recommendation],
        "",
    ]
    return "\n".join(parts)
