"""Section 1: end to end with h2load against two ``secure-orca serve`` replicas (feature off, feature on) over
TLS and HTTP/2. Variants run interleaved in rounds and are reported as ratios to (a) within each round."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from secure_orca.lab import replicas as launch
from secure_orca.lab.procfs import process_cpu

from .common import (
    BenchError,
    BenchPKI,
    Identity,
    Load,
    LoadResult,
    Spread,
    markdown_table,
    ratios,
    report_attached,
    rotated,
    run_h2load,
)


@dataclass(frozen=True)
class Variant:
    key: str
    title: str
    replica: str  # which replica serves it: "off", "off-2" or "on"
    identity: Identity
    attached: bool  # the load report the variant must (not) get


def variants(bench: BenchPKI) -> list[Variant]:
    """(a) is the same load balancer as (b) (front-proxy certificate, opt-in) against the feature turned off."""
    return [
        Variant("a", "feature off (front-proxy client, opt-in)", "off", bench.front_proxy(), False),
        Variant(
            "a2",
            "A/A control: (a) again on a second feature-off replica (the noise floor)",
            "off-2",
            bench.front_proxy(),
            False,
        ),
        Variant("b", "on, front proxy authorised (report attached)", "on", bench.front_proxy(), True),
        Variant("c", "on, bypass client refused (client-CA user, opt-in)", "on", bench.user(), False),
        Variant("d", "on, shared secret (no certificate, report attached)", "on", bench.shared_secret(), True),
    ]


@dataclass
class LoadSummary:
    """Ratios to (a) for one workload, and the medians of the raw figures."""

    load: str
    rps_ratio: dict[str, Spread]
    p50_ratio: dict[str, Spread]
    p99_ratio: dict[str, Spread]
    cpu_ratio: dict[str, Spread]
    median_rps: dict[str, float]
    median_p50_ms: dict[str, float]
    median_p99_ms: dict[str, float]
    median_cpu_us: dict[str, float]


def check_outcomes(urls: dict[str, str], chosen: Sequence[Variant], ca: Path) -> None:
    """Before measuring: every variant gets (or does not get) its load report."""
    for v in chosen:
        got = report_attached(urls[v.replica], v.identity, ca)
        if got != v.attached:
            raise BenchError(f"variant ({v.key}) {v.title}: report attached={got}, expected {v.attached}")


def measured(url: str, pid: int, load: Load, identity: Identity, shim: Path, workdir: Path) -> LoadResult:
    """One h2load run, with the server process's CPU (utime + stime) per request over the whole run."""
    before = process_cpu(pid)
    result = run_h2load(url, load, identity, shim, workdir)
    served = result.rps * result.elapsed  # the warm-up is at about the same rate
    return replace(result, server_cpu_us=(process_cpu(pid) - before) / served * 1e6 if served else float("nan"))


def run(bench: BenchPKI, loads: Sequence[Load], rounds: int, shim: Path, workdir: Path) -> dict[str, Any]:
    """Measure every load for every variant, ``rounds`` times, rotating the order of variants each round."""
    chosen = variants(bench)
    raw: dict[str, list[dict[str, LoadResult]]] = {load.label: [] for load in loads}
    argvs = {"off": bench.serve_argv(enabled=False), "off-2": bench.serve_argv(enabled=False)}
    argvs["on"] = bench.serve_argv(enabled=True)
    with launch.replicas(list(argvs.values())) as started:
        urls = {name: replica.url for name, replica in zip(argvs, started, strict=True)}
        pids = {name: replica.process.popen.pid for name, replica in zip(argvs, started, strict=True)}
        check_outcomes(urls, chosen, bench.dev.cert("ca"))
        for index in range(rounds):
            for load in loads:
                results = {
                    v.key: measured(urls[v.replica], pids[v.replica], load, v.identity, shim, workdir)
                    for v in rotated(chosen, index)
                }
                raw[load.label].append(results)
    summaries = [summarize(label, per_round) for label, per_round in raw.items()]
    return {
        "variants": {v.key: v.title for v in chosen},
        "loads": [load.__dict__ for load in loads],
        "rounds": rounds,
        "summaries": summaries,
        "raw": raw,
    }


def summarize(label: str, per_round: list[dict[str, LoadResult]]) -> LoadSummary:
    def figures(field: str) -> list[dict[str, float]]:
        return [{key: getattr(result, field) for key, result in results.items()} for results in per_round]

    def medians(field: str) -> dict[str, float]:
        rows = figures(field)
        return {key: Spread.of([row[key] for row in rows]).median for key in rows[0]}

    keys = [key for key in per_round[0] if key != "a"]
    return LoadSummary(
        load=label,
        rps_ratio={k: ratios(figures("rps"), k, "a") for k in keys},
        p50_ratio={k: ratios(figures("p50_ms"), k, "a") for k in keys},
        p99_ratio={k: ratios(figures("p99_ms"), k, "a") for k in keys},
        cpu_ratio={k: ratios(figures("server_cpu_us"), k, "a") for k in keys},
        median_rps=medians("rps"),
        median_p50_ms=medians("p50_ms"),
        median_p99_ms=medians("p99_ms"),
        median_cpu_us=medians("server_cpu_us"),
    )


RPS_TARGET, P99_TARGET = 0.98, 1.05


def meets_target(summary: LoadSummary, key: str) -> bool:
    return summary.rps_ratio[key].median >= RPS_TARGET and summary.p99_ratio[key].median <= P99_TARGET


def render(result: dict[str, Any]) -> str:
    """Markdown: one row per workload and variant; ratios are median [min, max] over the rounds."""
    rows: list[list[object]] = []
    for s in result["summaries"]:
        for key in ["a", *s.rps_ratio]:
            ratio_cells = (
                ["1", "1", "1", "1"]
                if key == "a"
                else [
                    s.rps_ratio[key].text(),
                    s.p50_ratio[key].text(),
                    s.p99_ratio[key].text(),
                    s.cpu_ratio[key].text(),
                ]
            )
            verdict = "" if key == "a" else "(control)" if key == "a2" else "yes" if meets_target(s, key) else "**no**"
            raw = [f"{s.median_rps[key]:.0f}", f"{s.median_p99_ms[key]:.1f}", f"{s.median_cpu_us[key]:.0f}"]
            rows.append([s.load, f"({key})", *ratio_cells, *raw, verdict])
    header = [
        "load",
        "variant",
        "req/s ÷ (a)",
        "p50 ÷ (a)",
        "p99 ÷ (a)",
        "server CPU/req ÷ (a)",
        "req/s",
        "p99 ms",
        "server CPU µs/req",
        "target met",
    ]
    legend = "\n".join(f"- ({k}) {title}" for k, title in result["variants"].items())
    return (
        f"{legend}\n\n{markdown_table(header, rows)}\n\n"
        f"Ratios: median [min, max] of {result['rounds']} interleaved rounds; raw figures are medians. Target: "
        f"req/s ratio ≥ {RPS_TARGET} and p99 ratio ≤ {P99_TARGET} (medians). Server CPU per request is the "
        "replica's utime + stime over the run divided by the requests it served."
    )
