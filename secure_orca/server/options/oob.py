"""Out-of-band load reports: StreamCoreMetrics on the serving port (docs/out-of-band.md), its interval floor, its
stream capacity (authz.streams.Limits) and its write deadline."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

from secure_orca.authz.streams import Limits
from secure_orca.kep_options import CERTIFICATE_MODES
from secure_orca.server.flags import parse_bool, parse_duration
from secure_orca.server.options.common import problem, value, within
from secure_orca.server.options.load_metrics import LoadMetricsConfig


@dataclass(frozen=True)
class OobConfig:
    """--endpoint-load-metrics-oob-*: the out-of-band stream's interval floor, its capacity and write deadline."""

    min_interval: float = 1.0
    limits: Limits = field(default_factory=Limits)
    write_deadline: float = 10.0


def add_flags(parser: argparse.ArgumentParser) -> None:
    a = parser.add_argument
    a(
        "--endpoint-load-metrics-oob",
        default="true",
        help="serve out-of-band load reports (gRPC xds.service.orca.v3.OpenRcaService/StreamCoreMetrics) on this "
        "port to the front-proxy and load-reader certificates, whenever load metrics and one of those modes are "
        "on (default true; --endpoint-load-metrics-oob=false turns it off)",
    )
    a(
        "--endpoint-load-metrics-oob-min-interval",
        default="1s",
        help="the shortest report interval a stream is served at; a shorter asked interval is raised to it, and "
        "never below --endpoint-load-metrics-interval (default 1s)",
    )
    a(
        "--endpoint-load-metrics-oob-max-streams",
        type=int,
        default=64,
        help="open out-of-band streams in total; more are refused with RESOURCE_EXHAUSTED (default 64)",
    )
    a(
        "--endpoint-load-metrics-oob-max-streams-per-connection",
        type=int,
        default=4,
        help="open out-of-band streams per connection (default 4)",
    )
    a(
        "--endpoint-load-metrics-oob-max-streams-per-identity",
        type=int,
        default=16,
        help="open out-of-band streams one client certificate may hold across all its connections; more are "
        "refused with RESOURCE_EXHAUSTED (default 16). A fleet of load balancers sharing one certificate needs one "
        "stream per load balancer (Envoy opens one per upstream host)",
    )
    a(
        "--endpoint-load-metrics-oob-front-proxy-streams",
        type=int,
        default=None,
        help="out-of-band streams only the front proxy's certificate may use: load readers together hold at most "
        "max-streams minus this, so the load balancer always finds them free (default a quarter of "
        "--endpoint-load-metrics-oob-max-streams: 16 of 64)",
    )
    a(
        "--endpoint-load-metrics-oob-write-deadline",
        default="10s",
        help="a stream whose report has not left the server this long after it was sent (a reader with no "
        "flow-control window, or that stopped reading) is reset with RST_STREAM and its slot freed; no report "
        "queues behind an unsent one (default 10s)",
    )


def _limits(args: argparse.Namespace) -> Limits:
    total = args.endpoint_load_metrics_oob_max_streams
    share = args.endpoint_load_metrics_oob_front_proxy_streams
    return Limits(
        total=total,
        per_connection=args.endpoint_load_metrics_oob_max_streams_per_connection,
        per_identity=args.endpoint_load_metrics_oob_max_streams_per_identity,
        front_proxy_share=total // 4 if share is None else share,  # default: a quarter, 16 of 64
    )


def validate(args: argparse.Namespace) -> list[str]:
    out = problem("--endpoint-load-metrics-oob", lambda: parse_bool(args.endpoint_load_metrics_oob))
    floor = args.endpoint_load_metrics_oob_min_interval
    out += within("--endpoint-load-metrics-oob-min-interval", lambda: parse_duration(floor), 0.01, 3600, "10ms and 1h")
    out += [f"--endpoint-load-metrics-oob-{p}" for p in _limits(args).problems()]
    deadline = args.endpoint_load_metrics_oob_write_deadline
    out += within(
        "--endpoint-load-metrics-oob-write-deadline", lambda: parse_duration(deadline), 0.1, 3600, "100ms and 1h"
    )
    return out


def to_config(args: argparse.Namespace, load_metrics: LoadMetricsConfig) -> OobConfig | None:
    """On with the feature and a certificate mode, unless turned off; never faster than the sampler."""
    switch = value("--endpoint-load-metrics-oob", lambda: parse_bool(args.endpoint_load_metrics_oob))
    if not (switch and load_metrics.enabled and load_metrics.modes & CERTIFICATE_MODES):
        return None
    floor = args.endpoint_load_metrics_oob_min_interval
    deadline = args.endpoint_load_metrics_oob_write_deadline
    return OobConfig(
        max(value("--endpoint-load-metrics-oob-min-interval", lambda: parse_duration(floor)), load_metrics.interval),
        _limits(args),
        value("--endpoint-load-metrics-oob-write-deadline", lambda: parse_duration(deadline)),
    )
