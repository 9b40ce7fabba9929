"""The tables of ``secure-orca hpack``: the model's grid, its mitigations and the KEP's 10k QPS claim; the wire's
figures, the model beside them, and header byte totals (pure: results in, text out)."""

from __future__ import annotations

from collections.abc import Sequence

from secure_orca.hpackcost.model import KEP_EXAMPLE, MITIGATIONS, CellResult, Scenario
from secure_orca.hpackcost.results import WireResult
from secure_orca.orca.headers import REPORT as HEADER
from secure_orca.orca.report import encode_text

KEP_BYTES_PER_S = 100_000  # "At 10k QPS this is on the order of 0.1 MB/s"
KEP_QPS = 10_000


def num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def table(headings: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headings)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(headings, widths, strict=True))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(lines)


def cost_cells(r: CellResult | WireResult) -> list[str]:
    """The steady-state cost columns the model and wire tables share."""
    return [
        num(r.orca_bytes, 2),
        num(r.eviction_cost, 2),
        num(r.literals_per_s),
        num(r.evictions_per_s),
        num(r.orca_evictions_per_s),
        num(r.bytes_per_s, 0),
    ]


def baseline_table(results: Sequence[CellResult]) -> str:
    """No mitigation: one row per interval, precision and rate."""
    rows = [
        [
            f"{r.interval:g}",
            str(r.decimals),
            f"{r.rate:g}",
            num(r.uncompressed),
            num(r.entry_size),
            str(r.first_send),
            num(r.marginal, 2),
            *cost_cells(r),
        ]
        for r in results
        if r.mitigation == "none"
    ]
    headings = (
        "interval_s",
        "dec",
        "qps",
        "name+value",
        "entry",
        "first",
        "marginal/resp",
        "orca/resp",
        "evict_cost/resp",
        "literals/s",
        "evictions/s",
        "by_orca/s",
        "bytes/s",
    )
    return table(headings, rows)


def mitigation_table(results: Sequence[CellResult], base: Scenario) -> str:
    """Each mitigation against no mitigation at the base interval and precision."""
    reference = {
        r.rate: r
        for r in results
        if r.mitigation == "none" and r.interval == base.interval and r.decimals == base.decimals
    }
    rows = []
    for r in results:
        if r.interval != base.interval or (r.mitigation == "none" and r.decimals != base.decimals):
            continue
        none = reference.get(r.rate)
        rows.append(
            [
                r.mitigation,
                f"{r.rate:g}",
                str(r.decimals),
                num(r.uncompressed),
                num(r.marginal, 2),
                "-" if none is None else num(none.marginal - r.marginal, 2),
                num(r.bytes_per_s, 0),
                num(r.literals_per_s),
                num(r.reports_per_s),
                f"{r.cpu_mae:.4f}",
                num(r.mean_age, 3),
                num(r.max_age, 3),
            ]
        )
    rows.sort(key=lambda row: (list(MITIGATIONS).index(row[0]), float(row[1])))
    headings = (
        "mitigation",
        "qps",
        "dec",
        "name+value",
        "marginal/resp",
        "saved/resp",
        "bytes/s",
        "literals/s",
        "reports/s",
        "cpu_mae",
        "mean_age_s",
        "max_age_s",
    )
    return table(headings, rows)


def claims_table(results: Sequence[CellResult], base: Scenario) -> str:
    """The KEP's 10k QPS figure: the same server-wide rate spread over connections of each per-connection rate."""
    rows = [
        [
            r.mitigation,
            f"{r.rate:g}",
            f"{KEP_QPS / r.rate:g}",
            num(r.marginal, 2),
            num(r.marginal * KEP_QPS / 1e6, 3),
            "yes" if r.marginal * KEP_QPS <= KEP_BYTES_PER_S else "no",
        ]
        for r in results
        if r.interval == base.interval
        and r.decimals == min(base.decimals, MITIGATIONS[r.mitigation].decimals or base.decimals)
        and r.mitigation in ("none", "combined")
        and r.rate <= KEP_QPS
    ]
    return table(("mitigation", "qps/conn", "connections", "marginal/resp", "MB/s", "<=0.1MB/s"), rows)


def report_sizes() -> str:
    """Uncompressed sizes of the KEP's example header."""
    value = encode_text(KEP_EXAMPLE, 1)
    return (
        f"KEP example: {HEADER}: {value}\n"
        f"  name+value {len(HEADER) + len(value)} bytes, RFC 7541 entry {len(HEADER) + len(value) + 32} bytes, "
        f"HTTP/1.1 line {len(HEADER) + len(value) + 4} bytes"
    )


def wire_table(results: Sequence[WireResult]) -> str:
    """The wire figures, one row per rate (per connection; steady state)."""
    rows = [
        [
            f"{r.rate:g}",
            num(r.achieved_rate),
            str(r.responses),
            num(r.uncompressed),
            num(r.entry_size),
            num(r.first_send),
            num(r.marginal, 2),
            num(r.ab_marginal, 2),
            *cost_cells(r),
            num(r.bin_marginal, 2),
        ]
        for r in results
    ]
    headings = (
        "qps",
        "achieved",
        "responses",
        "name+value",
        "entry",
        "first",
        "marginal/resp",
        "a/b/resp",
        "orca/resp",
        "evict_cost/resp",
        "literals/s",
        "evictions/s",
        "by_orca/s",
        "bytes/s",
        "bin/resp",
    )
    return table(headings, rows)


def model_vs_wire_table(results: Sequence[WireResult]) -> str:
    """The model for the same rate and precision beside the wire, sampling at the interval between new report
    values the wire saw (ratio: marginal per report octet)."""
    rows = []
    for r in results:
        m = r.model
        if m is None:
            continue
        rows.append(
            [
                f"{r.rate:g}",
                f"{m.interval:.3f}",
                f"{num(m.uncompressed)} | {num(r.uncompressed)}",
                f"{num(m.marginal, 2)} | {num(r.marginal, 2)}",
                f"{m.marginal / m.uncompressed:.3f} | {r.marginal_ratio:.3f}",
                f"{num(m.values_per_s)} | {num(r.values_per_s)}",
                f"{num(m.literals_per_s)} | {num(r.literals_per_s)}",
                f"{num(m.eviction_cost, 2)} | {num(r.eviction_cost, 2)}",
                f"{num(m.orca_evictions_per_s)} | {num(r.orca_evictions_per_s)}",
                f"{num(m.bytes_per_s, 0)} | {num(r.bytes_per_s, 0)}",
            ]
        )
    headings = (
        "qps",
        "interval",
        "name+value",
        "marginal/resp",
        "marginal/octet",
        "values/s",
        "literals/s",
        "evict_cost",
        "by_orca/s",
        "bytes/s",
    )
    return table(headings, rows)


def totals_table(results: Sequence[WireResult]) -> str:
    """Header bytes as h2load counts them (HEADERS payloads), and the frames with their 9-byte headers."""
    rows = [
        [
            f"{r.rate:g}",
            str(r.opened),
            str(r.refused),
            f"{r.header_bytes:,}",
            f"{r.header_bytes_without:,}",
            f"{r.header_frame_bytes:,}",
            "yes" if r.replay_exact else "no",
        ]
        for r in results
    ]
    headings = ("qps", "connections", "refused", "headers_with", "headers_without", "frames_with", "replay_exact")
    return table(headings, rows)
