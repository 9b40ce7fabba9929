"""HPACK cost of ORCA load reports on HTTP/2 responses.

model    replay kube-apiserver-like response headers plus the report through hpack.Encoder in virtual
         time, for a grid of per-connection rates, sampling intervals and precisions, and for each
         mitigation; attribute every byte with the HPACK walker (no network, deterministic per --seed).
measure  open real HTTP/2 TLS connections to a running server, with the load balancer's credentials and
         without the opt-in, at each --rate per connection; attribute every received header block with
         the walker and show the model for the same rate beside it. The secret is never printed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import ssl
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import TextIO

from secure_orca.credentials import loader
from secure_orca.errors import CredentialError, FlagError, UsageError
from secure_orca.hpackcost.model import KEP_EXAMPLE, MITIGATIONS, CellResult, Scenario, as_dict, grid, simulate
from secure_orca.hpackcost.wire import (
    Counters,
    Credentials,
    MeasureConfig,
    WireError,
    WireResult,
    measure,
    parse_target,
)
from secure_orca.hpackcost.wire import as_dict as wire_dict
from secure_orca.orca.headers import REPORT as HEADER
from secure_orca.orca.report import DEFAULT_DECIMALS, encode_text
from secure_orca.server.flags import parse_duration

HELP = "measure (on the wire) and model the HPACK cost of ORCA headers"
MAX_RATE = 5000.0  # per connection; a pure-Python client and server cap out around a few thousand req/s
MAX_CONNECTIONS = 32
MAX_DURATION = 600.0
KEP_BYTES_PER_S = 100_000  # "At 10k QPS this is on the order of 0.1 MB/s"
KEP_QPS = 10_000
REMOTE_USER = "hpack-measure"
HEADER_VALUE = re.compile(r"[!-~](?:[ -~]*[!-~])?")  # RFC 9110 field-value, visible ASCII only


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Subcommands of ``secure-orca hpack``."""
    sub = parser.add_subparsers(dest="hpack_command", metavar="SUBCOMMAND", required=True)
    model = sub.add_parser("model", help="model the cost without a network", description=__doc__)
    model.add_argument("--rates", default="1,10,100,1000,10000", help="responses/s per connection (list)")
    model.add_argument("--intervals", default="0.01,0.1,1", help="sampling intervals in seconds (list)")
    model.add_argument("--decimals", default="1,2,3", help="value precisions (list)")
    model.add_argument("--mitigations", default=",".join(MITIGATIONS), help=f"from: {', '.join(MITIGATIONS)}")
    model.add_argument("--base-interval", type=float, default=0.1, help="interval of the mitigation table")
    model.add_argument("--base-decimals", type=int, default=3, help="precision of the mitigation table")
    model.add_argument("--duration", type=float, default=60.0, help="virtual seconds per cell")
    model.add_argument("--max-responses", type=int, default=10000, help="cap on responses per cell")
    model.add_argument("--seed", type=int, default=1)
    model.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes")
    model.add_argument("--json", action="store_true", help="print JSON instead of tables")
    model.add_argument("--plot", metavar="FILE", help="write a PNG (needs matplotlib)")
    wire = sub.add_parser("measure", help="measure the cost on real HTTP/2 connections", description=__doc__)
    a = wire.add_argument
    a("url", metavar="URL", help="https://host:port of a running server")
    a("--cacert", type=Path, metavar="FILE", help="CA bundle that signs the server's certificate (PEM)")
    a("--lb-cert", type=Path, metavar="FILE", help="the load balancer's front-proxy client certificate")
    a("--lb-key", type=Path, metavar="FILE", help="its private key")
    a("--lb-secret-file", type=Path, metavar="FILE", help="the load balancer's shared secret (first line used)")
    a("--rate", type=float, action="append", metavar="QPS", help="requests/s per connection, repeatable (1, 10, 100)")
    a(
        "--remote-user",
        default=REMOTE_USER,
        metavar="NAME",
        help="the user the load balancer names in X-Remote-User with its --lb-cert, as a front proxy does: "
        "kube-apiserver answers a front proxy that names no user with 401 (default %(default)s; '' for none)",
    )
    a("--connections", type=int, default=1, help="connections with the opt-in, and as many without (default 1)")
    a("--duration", type=float, default=10.0, metavar="SECONDS", help="seconds per rate (default 10)")
    a("--path", default="/version", help="path to request (default /version)")
    a(
        "--interval",
        default="100ms",
        help="the server's --endpoint-load-metrics-interval: the model samples at this interval, or at the longer "
        "one between new report values seen on the wire (100ms)",
    )
    a(
        "--decimals",
        type=int,
        default=DEFAULT_DECIMALS,
        help=f"the server's --endpoint-load-metrics-decimals, for the model ({DEFAULT_DECIMALS})",
    )
    a("--timeout", type=float, default=10.0, metavar="SECONDS", help="socket timeout (default 10)")
    a("--json", action="store_true", help="print JSON instead of tables (progress still on stderr)")


def _numbers(text: str, option: str, kind: Callable[[str], float], low: float, high: float) -> list:
    """A comma-separated list of numbers within [low, high] (exclusive of 0 when low is 0 and kind is float)."""
    try:
        values = [kind(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise UsageError(f"{option}: expected a comma-separated list of numbers, got {text!r}") from None
    if not values or any(not low <= v <= high or (kind is float and v == 0) for v in values):
        raise UsageError(f"{option}: values must be in {'(' if kind is float else '['}{low:g}, {high:g}]")
    return values


def scenarios_from(args: argparse.Namespace) -> tuple[Scenario, list[Scenario]]:
    """The base scenario (of the mitigation table) and the grid the options ask for; UsageError on bad input."""
    names = [n.strip() for n in args.mitigations.split(",") if n.strip()]
    unknown = [n for n in names if n not in MITIGATIONS]
    if unknown:
        raise UsageError(f"--mitigations: unknown {', '.join(unknown)} (known: {', '.join(MITIGATIONS)})")
    rates = _numbers(args.rates, "--rates", float, 0, 1e6)
    intervals = _numbers(args.intervals, "--intervals", float, 0, 3600)
    decimals = _numbers(args.decimals, "--decimals", int, 0, 12)
    _numbers(str(args.base_decimals), "--base-decimals", int, 0, 12)
    _numbers(str(args.base_interval), "--base-interval", float, 0, 3600)
    if args.duration <= 0 or args.max_responses < 1 or args.jobs < 1:
        raise UsageError("--duration, --max-responses and --jobs must be positive")
    base = Scenario(
        rate=1.0,
        interval=args.base_interval,
        decimals=args.base_decimals,
        duration=args.duration,
        max_responses=args.max_responses,
        seed=args.seed,
    )
    return base, grid(rates, intervals, decimals, [MITIGATIONS[n] for n in names], base)


def run_cells(cells: Sequence[Scenario], jobs: int) -> list[CellResult]:
    """Simulate the cells, in worker processes when ``jobs > 1`` (results in input order)."""
    if jobs <= 1 or len(cells) < 2:
        return [simulate(c) for c in cells]
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(simulate, cells, chunksize=1))


def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _table(headings: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headings)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(headings, widths, strict=True))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(lines)


def _cost_cells(r: CellResult | WireResult) -> list[str]:
    """The steady-state cost columns the model and wire tables share."""
    return [
        _num(r.orca_bytes, 2),
        _num(r.eviction_cost, 2),
        _num(r.literals_per_s),
        _num(r.evictions_per_s),
        _num(r.orca_evictions_per_s),
        _num(r.bytes_per_s, 0),
    ]


def baseline_table(results: Sequence[CellResult]) -> str:
    """No mitigation: one row per interval, precision and rate."""
    rows = [
        [
            f"{r.interval:g}",
            str(r.decimals),
            f"{r.rate:g}",
            _num(r.uncompressed),
            _num(r.entry_size),
            str(r.first_send),
            _num(r.marginal, 2),
            *_cost_cells(r),
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
    return _table(headings, rows)


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
                _num(r.uncompressed),
                _num(r.marginal, 2),
                "-" if none is None else _num(none.marginal - r.marginal, 2),
                _num(r.bytes_per_s, 0),
                _num(r.literals_per_s),
                _num(r.reports_per_s),
                f"{r.cpu_mae:.4f}",
                _num(r.mean_age, 3),
                _num(r.max_age, 3),
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
    return _table(headings, rows)


def claims_table(results: Sequence[CellResult], base: Scenario) -> str:
    """The KEP's 10k QPS figure: the same server-wide rate spread over connections of each per-connection rate."""
    rows = [
        [
            r.mitigation,
            f"{r.rate:g}",
            f"{KEP_QPS / r.rate:g}",
            _num(r.marginal, 2),
            _num(r.marginal * KEP_QPS / 1e6, 3),
            "yes" if r.marginal * KEP_QPS <= KEP_BYTES_PER_S else "no",
        ]
        for r in results
        if r.interval == base.interval
        and r.decimals == min(base.decimals, MITIGATIONS[r.mitigation].decimals or base.decimals)
        and r.mitigation in ("none", "combined")
        and r.rate <= KEP_QPS
    ]
    return _table(("mitigation", "qps/conn", "connections", "marginal/resp", "MB/s", "<=0.1MB/s"), rows)


def report_sizes() -> str:
    """Uncompressed sizes of the KEP's example header."""
    value = encode_text(KEP_EXAMPLE, 1)
    return (
        f"KEP example: {HEADER}: {value}\n"
        f"  name+value {len(HEADER) + len(value)} bytes, RFC 7541 entry {len(HEADER) + len(value) + 32} bytes, "
        f"HTTP/1.1 line {len(HEADER) + len(value) + 4} bytes"
    )


def plot(results: Sequence[CellResult], base: Scenario, path: str) -> None:
    """PNG of marginal bytes per response against per-connection rate, one line per mitigation."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UsageError("--plot needs matplotlib (pip install matplotlib)") from None
    fig, ax = plt.subplots(figsize=(8, 5))
    for name, mitigation in MITIGATIONS.items():
        decimals = min(base.decimals, mitigation.decimals or base.decimals)
        points = sorted(
            (r.rate, r.marginal)
            for r in results
            if r.mitigation == name and r.interval == base.interval and r.decimals == decimals
        )
        if points:
            ax.plot(*zip(*points, strict=True), marker="o", label=name)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_ylim(bottom=0.01)
    ax.set_xlabel("responses per second on the connection")
    ax.set_ylabel("marginal header bytes per response")
    ax.set_title(f"ORCA report over HPACK (4096-byte table), sampling every {base.interval:g} s")
    ax.axhline(KEP_BYTES_PER_S / KEP_QPS, color="grey", linestyle=":", label="KEP: 0.1 MB/s at 10k QPS")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --- measure ---------------------------------------------------------------------------------------------


def _lb_credentials(args: argparse.Namespace) -> Credentials:
    """Read and check the credential files (UsageError naming the flag; the secret is never shown)."""
    if (args.lb_cert is None) != (args.lb_key is None):
        raise UsageError("--lb-cert and --lb-key must be given together")
    if args.lb_cert is None and args.lb_secret_file is None:
        raise UsageError("give the load balancer's credentials: --lb-cert/--lb-key and/or --lb-secret-file")
    user = args.remote_user or None
    if user is not None and not HEADER_VALUE.fullmatch(user):
        raise UsageError("--remote-user: must be visible ASCII and inner spaces (an HTTP field value)")
    try:
        if args.cacert is not None:
            loader.read_ca_bundle(args.cacert, "--cacert")
        if args.lb_cert is not None:
            loader.read_key_pair(args.lb_cert, args.lb_key, "--lb-cert", "--lb-key")
        secret = None
        if args.lb_secret_file is not None:
            secret = loader.read_secrets(args.lb_secret_file, "--lb-secret-file", private=False)[0]
    except CredentialError as error:
        raise UsageError(str(error)) from None
    credentials = Credentials(args.cacert, args.lb_cert, args.lb_key, secret, user)
    try:
        credentials.context(with_cert=True)
    except ssl.SSLError:
        raise UsageError(f"--lb-key: {args.lb_key}: does not match --lb-cert or cannot be loaded") from None
    return credentials


def measure_config_from(args: argparse.Namespace) -> MeasureConfig:
    """Validate the measure flags and read the files they name; UsageError on bad input."""
    rates = args.rate or [1.0, 10.0, 100.0]
    if any(not 0 < r <= MAX_RATE for r in rates):
        raise UsageError(f"--rate: must be above 0 and at most {MAX_RATE:g} per connection")
    if not 1 <= args.connections <= MAX_CONNECTIONS:
        raise UsageError(f"--connections: must be between 1 and {MAX_CONNECTIONS}")
    if not 0 < args.duration <= MAX_DURATION:
        raise UsageError(f"--duration: must be above 0 and at most {MAX_DURATION:g} seconds")
    if not 0 < args.timeout <= 600:
        raise UsageError("--timeout: must be above 0 and at most 600 seconds")
    if not 0 <= args.decimals <= 12:
        raise UsageError("--decimals: must be between 0 and 12")
    try:
        interval = parse_duration(args.interval)
    except FlagError as error:
        raise UsageError(f"--interval: {error}") from None
    if interval <= 0:
        raise UsageError("--interval: must be above 0")
    try:
        target = parse_target(args.url, args.path)
    except WireError as error:
        raise UsageError(str(error)) from None
    return MeasureConfig(
        target=target,
        credentials=_lb_credentials(args),
        rates=tuple(rates),
        connections=args.connections,
        duration=args.duration,
        interval=interval,
        decimals=args.decimals,
        timeout=args.timeout,
    )


class WireProgress:
    """Progress of each rate on stderr: rewritten in place on a terminal, a line per quarter otherwise."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.shown: tuple[float, int] = (-1.0, -1)

    def __call__(self, rate: float, fraction: float, counters: Counters, expected: int) -> None:
        quarter = int(fraction * 4)
        if not self.tty and self.shown == (rate, quarter):
            return
        self.shown = (rate, quarter)
        line = (
            f"hpack measure: {rate:g}/s per connection  {fraction:4.0%}  sent {counters.sent}/{expected}  "
            f"answered {counters.done}  connections {counters.connections}"
        )
        if self.tty:
            print(f"\r\x1b[K{line}", end="", file=self.stream, flush=True)
        else:
            print(line, file=self.stream, flush=True)

    def finish(self) -> None:
        if self.tty:
            print(file=self.stream, flush=True)


def wire_table(results: Sequence[WireResult]) -> str:
    """The wire figures, one row per rate (per connection; steady state)."""
    rows = [
        [
            f"{r.rate:g}",
            _num(r.achieved_rate),
            str(r.responses),
            _num(r.uncompressed),
            _num(r.entry_size),
            _num(r.first_send),
            _num(r.marginal, 2),
            _num(r.ab_marginal, 2),
            *_cost_cells(r),
            _num(r.bin_marginal, 2),
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
    return _table(headings, rows)


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
                f"{_num(m.uncompressed)} | {_num(r.uncompressed)}",
                f"{_num(m.marginal, 2)} | {_num(r.marginal, 2)}",
                f"{m.marginal / m.uncompressed:.3f} | {r.marginal_ratio:.3f}",
                f"{_num(m.values_per_s)} | {_num(r.values_per_s)}",
                f"{_num(m.literals_per_s)} | {_num(r.literals_per_s)}",
                f"{_num(m.eviction_cost, 2)} | {_num(r.eviction_cost, 2)}",
                f"{_num(m.orca_evictions_per_s)} | {_num(r.orca_evictions_per_s)}",
                f"{_num(m.bytes_per_s, 0)} | {_num(r.bytes_per_s, 0)}",
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
    return _table(headings, rows)


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
    return _table(headings, rows)


def status_warning(result: WireResult) -> str | None:
    """Why the with/without comparison of one rate does not compare like with like, if it does not."""

    def shown(statuses: dict[int, int]) -> str:
        return ", ".join(f"{status} x{count}" for status, count in statuses.items()) or "none"

    if set(result.statuses) == set(result.statuses_without) and all(200 <= s < 300 for s in result.statuses):
        return None
    hint = " (does the server authenticate --remote-user from this front proxy?)" if 401 in result.statuses else ""
    return (
        f"rate {result.rate:g}: responses with the opt-in were {shown(result.statuses)}, without it "
        f"{shown(result.statuses_without)}: the figures are those of these responses{hint}"
    )


def run_measure(args: argparse.Namespace) -> int:
    """``secure-orca hpack measure``."""
    config = measure_config_from(args)
    progress = WireProgress(sys.stderr)
    try:
        results = measure(config, progress)
    except WireError as error:
        raise UsageError(str(error)) from None
    finally:
        progress.finish()
    for warning in filter(None, map(status_warning, results)):
        print(f"hpack measure: warning: {warning}", file=sys.stderr)
    if args.json:
        json.dump({"results": [wire_dict(r) for r in results]}, sys.stdout, indent=1)
        print()
        return 0
    print(
        f"{config.connections} connection(s) with the opt-in and {config.connections} without, "
        f"{config.duration:g} s per rate, GET {config.target.path} (steady state, per connection):"
    )
    print(wire_table(results))
    print(
        f"\nModel | wire ({config.decimals} decimals; per connection; the model samples every `interval` s: "
        f"{config.interval:g} s or, if longer, the mean interval between new report values on the wire):"
    )
    print(model_vs_wire_table(results))
    print("\nHeader bytes on the wire (HEADERS payloads, as h2load counts them; frames incl. 9-byte headers):")
    print(totals_table(results))
    return 0


def run(args: argparse.Namespace) -> int:
    """Dispatch ``secure-orca hpack SUBCOMMAND``."""
    if args.hpack_command == "measure":
        return run_measure(args)
    if args.hpack_command != "model":
        raise UsageError(f"unknown subcommand {args.hpack_command!r}")
    base, cells = scenarios_from(args)
    results = run_cells(cells, args.jobs)
    if args.plot:
        plot(results, base, args.plot)
    if args.json:
        json.dump({"cells": [as_dict(r) for r in results]}, sys.stdout, indent=1)
        print()
        return 0
    print(report_sizes())
    print("\nNo mitigation (steady state; per-response figures averaged after warm-up):")
    print(baseline_table(results))
    print(f"\nMitigations at interval {base.interval:g} s, {base.decimals} decimals (saved: vs none):")
    print(mitigation_table(results, base))
    print(f"\n{KEP_QPS} QPS server-wide over connections of each rate (KEP: ~0.1 MB/s):")
    print(claims_table(results, base))
    if not all(r.replay_exact for r in results):
        print("\nwarning: the walker's replay did not reproduce some blocks", file=sys.stderr)
    return 0
