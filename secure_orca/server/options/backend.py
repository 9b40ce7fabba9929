"""What is served behind the gateway: the demo backend and the --proxy routes (their timeouts, pools, in-flight
limits, error dialect, credentials and report source), with the client certificate presented to proxied
upstreams."""

from __future__ import annotations

import argparse
import functools
from dataclasses import dataclass, field
from pathlib import Path

from secure_orca import credential_flags as flags
from secure_orca.server.flags import ProxyRoute, parse_duration, parse_off_duration, parse_proxy
from secure_orca.server.options.common import problem, value, within

READINESS = ("ignore", "require")  # whether an unreachable backend makes /readyz fail


@dataclass(frozen=True)
class RouteSettings:
    """One route with every setting resolved: its own ``;key=value`` options over the --proxy-* defaults.
    A timeout of None is off."""

    prefix: str
    upstream: str
    first_byte_timeout: float | None = 300.0
    idle_timeout: float | None = 30.0
    total_timeout: float | None = None
    errors: str = "kube"
    authorization: str = "strip"
    report: str = "local"
    backend_format: str = "text"
    utilization_metric: str = ""  # a backend named metric carried as application_utilization ("": none)
    load_poll: str = ""  # the backend's load endpoint polled for the out-of-band stream (orca.polled; "": none)


@dataclass(frozen=True)
class ProxyLimits:
    """The pool to each backend and the in-flight bounds (per identity; anonymous clients per address)."""

    max_connections: int = 1000
    max_idle_connections: int = 100
    max_in_flight_per_user: int = 1000
    max_in_flight_anonymous: int = 16
    connect_timeout: float = 10.0


@dataclass(frozen=True)
class BackendConfig:
    routes: list[RouteSettings] = field(default_factory=list)
    limits: ProxyLimits = field(default_factory=ProxyLimits)
    readiness: str = "ignore"
    report_max_age: float = 10.0
    proxy_cert: Path | None = None
    proxy_key: Path | None = None
    demo_work: bool = False


def add_flags(parser: argparse.ArgumentParser) -> None:
    a = parser.add_argument
    a(
        "--proxy",
        action="append",
        default=[],
        metavar="PREFIX=URL[;key=value...]",
        help="proxy PREFIX to URL (repeatable); options: first-byte-timeout, idle-timeout, total-timeout "
        "(duration or off), errors=kube|openai, authorization=strip|pass, report=local|backend|merged, "
        "backend-format=text|json, utilization-metric=NAME, load-poll=vllm-metrics|sglang-loads (docs/operations.md)",
    )
    a("--proxy-timeout", default="30s", help="default idle-timeout: the longest silence between reads (or off)")
    a("--proxy-first-byte-timeout", default="5m", help="default first-byte-timeout of a route (or off)")
    a("--proxy-total-timeout", default="off", help="default total-timeout of a route (or off)")
    a("--proxy-connect-timeout", default="10s", help="how long connecting to a backend may take")
    a("--proxy-max-connections", type=int, default=1000, help="connections to each route's backend, at most")
    a("--proxy-max-idle-connections", type=int, default=100, help="idle connections kept to each route's backend")
    a(
        "--proxy-max-in-flight-per-user",
        type=int,
        default=1000,
        help="proxied requests in flight per authenticated user or client certificate (429 beyond)",
    )
    a(
        "--proxy-max-in-flight-anonymous",
        type=int,
        default=16,
        help="proxied requests in flight per address for anonymous clients without a certificate (429 beyond)",
    )
    a(
        "--proxy-report-max-age",
        default="10s",
        help="how long the last backend report seen in band may ride on the out-of-band stream (default 10s)",
    )
    a("--proxy-readiness", choices=READINESS, default="ignore", help="require: /readyz fails while a backend is down")
    a(flags.PROXY_CERT, type=Path, help="client certificate presented to --proxy upstreams")
    a(flags.PROXY_KEY, type=Path, help="private key of --proxy-client-cert-file")
    a(
        "--demo-work",
        action="store_true",
        help="serve /work?cpu_ms=N (0-1000) on the demo backend: any client can then add CPU load, which moves "
        "the load report; for experiments only",
    )


_TIMEOUT_FLAGS = (
    ("--proxy-timeout", "proxy_timeout"),
    ("--proxy-first-byte-timeout", "proxy_first_byte_timeout"),
    ("--proxy-total-timeout", "proxy_total_timeout"),
)
_COUNT_FLAGS = (
    ("--proxy-max-connections", "proxy_max_connections"),
    ("--proxy-max-idle-connections", "proxy_max_idle_connections"),
    ("--proxy-max-in-flight-per-user", "proxy_max_in_flight_per_user"),
    ("--proxy-max-in-flight-anonymous", "proxy_max_in_flight_anonymous"),
)


def _timeout(text: str) -> float:
    """A timeout flag's value for bounds checking: off counts as within."""
    parsed = parse_off_duration(text)
    return 1.0 if parsed is None else parsed


def validate(args: argparse.Namespace) -> list[str]:
    out = [e for spec in args.proxy for e in problem("--proxy", functools.partial(parse_proxy, spec))]
    for flag, name in _TIMEOUT_FLAGS:
        text = getattr(args, name)
        out += within(flag, functools.partial(_timeout, text), 0.01, 86400, "10ms and 24h, or off")
    out += within(
        "--proxy-report-max-age", lambda: parse_duration(args.proxy_report_max_age), 0.1, 3600, "100ms and 1h"
    )
    out += within(
        "--proxy-connect-timeout", lambda: parse_duration(args.proxy_connect_timeout), 0.01, 3600, "10ms and 1h"
    )
    out += [
        f"{flag}: must be between 1 and 100000" for flag, name in _COUNT_FLAGS if not 1 <= getattr(args, name) <= 100000
    ]
    out += _poll_problems(args.proxy)
    prefixes = [spec.split("=", 1)[0] for spec in args.proxy]
    out += [f"--proxy: prefix {p} given twice" for p in sorted({p for p in prefixes if prefixes.count(p) > 1})]
    if (args.proxy_client_cert_file is None) != (args.proxy_client_key_file is None):
        out.append(f"{flags.PROXY_CERT} and {flags.PROXY_KEY} must be given together")
    return out


def _poll_problems(specs: list[str]) -> list[str]:
    """A polled route must carry the backend's load (report=backend or merged), and one route at most is polled:
    the out-of-band stream carries one backend's load."""
    routes = [
        route
        for spec in specs
        if not problem("--proxy", functools.partial(parse_proxy, spec))
        for route in [parse_proxy(spec)]
    ]
    polled = [route for route in routes if route.option("load-poll", "")]
    out = [
        f"--proxy {route.prefix}: load-poll needs report=backend or report=merged"
        for route in polled
        if route.option("report", "local") == "local"
    ]
    if len(polled) > 1:
        out.append("--proxy: load-poll on more than one route (the out-of-band stream carries one backend's load)")
    return out


def resolve(route: ProxyRoute, args: argparse.Namespace) -> RouteSettings:
    """The route's settings: its own options, else the --proxy-* defaults."""

    def timeout(key: str, flag_value: str) -> float | None:
        return parse_off_duration(route.option(key, flag_value))

    return RouteSettings(
        prefix=route.prefix,
        upstream=route.upstream,
        first_byte_timeout=timeout("first-byte-timeout", args.proxy_first_byte_timeout),
        idle_timeout=timeout("idle-timeout", args.proxy_timeout),
        total_timeout=timeout("total-timeout", args.proxy_total_timeout),
        errors=route.option("errors", "kube"),
        authorization=route.option("authorization", "strip"),
        report=route.option("report", "local"),
        backend_format=route.option("backend-format", "text"),
        utilization_metric=route.option("utilization-metric", ""),
        load_poll=route.option("load-poll", ""),
    )


def to_config(args: argparse.Namespace) -> BackendConfig:
    routes = [value("--proxy", functools.partial(parse_proxy, spec)) for spec in args.proxy]
    return BackendConfig(
        routes=[resolve(route, args) for route in routes],
        limits=ProxyLimits(
            max_connections=args.proxy_max_connections,
            max_idle_connections=args.proxy_max_idle_connections,
            max_in_flight_per_user=args.proxy_max_in_flight_per_user,
            max_in_flight_anonymous=args.proxy_max_in_flight_anonymous,
            connect_timeout=value("--proxy-connect-timeout", lambda: parse_duration(args.proxy_connect_timeout)),
        ),
        readiness=args.proxy_readiness,
        report_max_age=value("--proxy-report-max-age", lambda: parse_duration(args.proxy_report_max_age)),
        proxy_cert=args.proxy_client_cert_file,
        proxy_key=args.proxy_client_key_file,
        demo_work=bool(getattr(args, "demo_work", False)),
    )
