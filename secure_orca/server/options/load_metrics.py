"""Load metrics (the feature itself): the feature gate, who may read reports (--endpoint-load-metrics-auth and
each mode's credential), and how reports are sampled and attached."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from secure_orca import credential_flags as flags
from secure_orca import recommended
from secure_orca.authz.policy import MODES, Mode
from secure_orca.orca.report import DEFAULT_DECIMALS
from secure_orca.pki import LOAD_READER_CN, DevPKI
from secure_orca.server.flags import parse_duration, parse_feature_gates, parse_list
from secure_orca.server.middleware import ATTACH_MODES
from secure_orca.server.options.common import problem, value, within

GATE = "RequestCostAggregation"
# The flag that gives each mode its credential (header-only needs none).
NEEDS = {
    Mode.FRONT_PROXY: flags.REQUESTHEADER_CA,
    Mode.SHARED_SECRET: flags.SECRET,
    Mode.LOAD_READER: flags.LOAD_READER_CA,
}


@dataclass(frozen=True)
class LoadMetricsConfig:
    enabled: bool
    modes: frozenset[Mode]  # --endpoint-load-metrics-auth: the listed modes whose credential flags are given
    interval: float
    decimals: int
    attach: str = "every-response"
    secret_file: Path | None = None  # only with shared-secret among the modes
    load_reader_ca: Path | None = None  # only with load-reader among the modes
    load_reader_names: tuple[str, ...] = ()  # --endpoint-load-metrics-allowed-names


def add_flags(parser: argparse.ArgumentParser) -> None:
    a = parser.add_argument
    a("--feature-gates", default="", help=f"e.g. {GATE}=true (default false)")
    a(
        "--enable-endpoint-load-metrics",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="attach ORCA load reports to authorized opted-in requests (needs the feature gate)",
    )
    default = ",".join(recommended.SERVE_MODES)
    a(
        "--endpoint-load-metrics-auth",
        default=default,
        help=f"comma list of modes, any one granting: {', '.join(MODES)} (default {default}, the recommended "
        "option 2b)",
    )
    a(flags.SECRET, type=Path, help="shared secrets, one per line (mode 0600)")
    a(
        flags.LOAD_READER_CA,
        type=Path,
        help="mode load-reader (option 2b): CA of load-reader client certificates; they may read load reports "
        "and nothing else (their identity headers are never believed); reloaded live",
    )
    a(
        flags.LOAD_READER_NAMES,
        default="",
        help="comma list of load-reader Common Names (empty: any certificate from that CA)",
    )
    a("--endpoint-load-metrics-interval", default="100ms", help="sampling interval (default 100ms)")
    a(
        "--endpoint-load-metrics-decimals",
        type=int,
        default=DEFAULT_DECIMALS,
        help=f"decimals of each reported value (default {DEFAULT_DECIMALS})",
    )
    a(
        "--endpoint-load-metrics-attach",
        choices=ATTACH_MODES,
        default="every-response",
        help="every-response (KEP semantics, default) or once-per-sample: a connection gets each new sample once "
        "(saves HPACK bytes on busy connections at no loss of freshness; see docs/hpack.md)",
    )


def _modes(args: argparse.Namespace) -> tuple[Mode, ...]:
    return tuple(Mode(m) for m in parse_list(args.endpoint_load_metrics_auth))


def _enabled(args: argparse.Namespace, dev: DevPKI | None) -> bool:
    """--enable-endpoint-load-metrics; with the development PKI and no such flag: on."""
    return bool(args.enable_endpoint_load_metrics if args.enable_endpoint_load_metrics is not None else dev)


def _gates(args: argparse.Namespace, dev: DevPKI | None) -> str:
    return args.feature_gates or (f"{GATE}=true" if dev else "")


def _credentials(args: argparse.Namespace, dev: DevPKI | None) -> dict[Mode, Path | None]:
    """Each mode's credential file as given, the development PKI's where none is."""
    given: dict[Mode, Path | None] = {
        Mode.FRONT_PROXY: args.requestheader_client_ca_file,
        Mode.SHARED_SECRET: args.endpoint_load_metrics_secret_file,
        Mode.LOAD_READER: args.endpoint_load_metrics_client_ca_file,
    }
    if dev is not None:
        dev_files = {
            Mode.FRONT_PROXY: dev.cert("front_proxy_ca"),
            Mode.SHARED_SECRET: dev.secret,
            Mode.LOAD_READER: dev.cert("load_reader_ca"),
        }
        given = {mode: path or dev_files[mode] for mode, path in given.items()}
    return given


def validate(args: argparse.Namespace, dev: DevPKI | None = None) -> list[str]:
    out = problem("--feature-gates", lambda: parse_feature_gates(_gates(args, dev)))
    interval = args.endpoint_load_metrics_interval
    out += within("--endpoint-load-metrics-interval", lambda: parse_duration(interval), 0.001, 60, "1ms and 60s")
    if not 0 <= args.endpoint_load_metrics_decimals <= 12:
        out.append("--endpoint-load-metrics-decimals: must be between 0 and 12")
    listed = parse_list(args.endpoint_load_metrics_auth)
    unknown = [m for m in listed if m not in MODES]
    if unknown or not listed:
        out.append(
            f"--endpoint-load-metrics-auth: unknown mode {unknown[0] if unknown else '(empty)'}; "
            f"choose from {', '.join(MODES)}"
        )
        return out
    if _enabled(args, dev) and not out and not parse_feature_gates(_gates(args, dev)).get(GATE, False):
        out.append(f"--enable-endpoint-load-metrics: requires --feature-gates {GATE}=true")
    credentials = _credentials(args, dev)
    modes = _modes(args)
    if _enabled(args, dev) and not any(m == Mode.HEADER_ONLY or credentials[m] for m in modes):
        needs = ", ".join(f"{m} needs {NEEDS[m]}" for m in modes)  # only the modes asked for
        out.append(f"--endpoint-load-metrics-auth: no listed mode is usable: {needs}")
    return out


def to_config(args: argparse.Namespace, dev: DevPKI | None) -> tuple[LoadMetricsConfig, list[str]]:
    """The feature's settings and the notes for the log (a listed mode with no credential, header-only)."""
    enabled = _enabled(args, dev)
    credentials = _credentials(args, dev)
    modes = _modes(args)
    usable = [m for m in modes if m == Mode.HEADER_ONLY or credentials[m]]
    notes = []
    if enabled:
        notes += [f"auth mode {m} is listed but has no material; it grants nothing" for m in modes if m not in usable]
        if Mode.HEADER_ONLY in modes:
            notes.append(
                "WARNING: --endpoint-load-metrics-auth includes header-only: any client that reaches this "
                "server can read its load (KEP-6315 option 1)"
            )
    names = tuple(parse_list(args.endpoint_load_metrics_allowed_names))
    if dev is not None and not names and not args.endpoint_load_metrics_client_ca_file:
        names = (LOAD_READER_CN,)  # the development PKI's one load reader, as its one front proxy
    config = LoadMetricsConfig(
        enabled=enabled,
        modes=frozenset(usable),
        interval=value("--endpoint-load-metrics-interval", lambda: parse_duration(args.endpoint_load_metrics_interval)),
        decimals=args.endpoint_load_metrics_decimals,
        attach=args.endpoint_load_metrics_attach,
        secret_file=credentials[Mode.SHARED_SECRET] if Mode.SHARED_SECRET in modes else None,
        load_reader_ca=credentials[Mode.LOAD_READER] if Mode.LOAD_READER in modes else None,
        load_reader_names=names,
    )
    return config, notes
