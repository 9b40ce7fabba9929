"""What is served behind the gateway: the demo backend and the --proxy routes, with the client certificate
presented to proxied upstreams."""

from __future__ import annotations

import argparse
import functools
from dataclasses import dataclass, field
from pathlib import Path

from secure_orca import credential_flags as flags
from secure_orca.server.flags import ProxyRoute, parse_duration, parse_proxy
from secure_orca.server.options.common import problem, value, within


@dataclass(frozen=True)
class BackendConfig:
    routes: list[ProxyRoute] = field(default_factory=list)
    proxy_timeout: float = 30.0
    proxy_cert: Path | None = None
    proxy_key: Path | None = None
    demo_work: bool = False


def add_flags(parser: argparse.ArgumentParser) -> None:
    a = parser.add_argument
    a("--proxy", action="append", default=[], metavar="PREFIX=URL", help="proxy PREFIX to URL (repeatable)")
    a("--proxy-timeout", default="30s", help="how long a proxied upstream may take to answer (default 30s)")
    a(flags.PROXY_CERT, type=Path, help="client certificate presented to --proxy upstreams")
    a(flags.PROXY_KEY, type=Path, help="private key of --proxy-client-cert-file")
    a(
        "--demo-work",
        action="store_true",
        help="serve /work?cpu_ms=N (0-1000) on the demo backend: any client can then add CPU load, which moves "
        "the load report; for experiments only",
    )


def validate(args: argparse.Namespace) -> list[str]:
    out = [e for spec in args.proxy for e in problem("--proxy", functools.partial(parse_proxy, spec))]
    out += within("--proxy-timeout", lambda: parse_duration(args.proxy_timeout), 0.01, 3600, "10ms and 1h")
    if (args.proxy_client_cert_file is None) != (args.proxy_client_key_file is None):
        out.append(f"{flags.PROXY_CERT} and {flags.PROXY_KEY} must be given together")
    return out


def to_config(args: argparse.Namespace) -> BackendConfig:
    return BackendConfig(
        routes=[value("--proxy", functools.partial(parse_proxy, spec)) for spec in args.proxy],
        proxy_timeout=value("--proxy-timeout", lambda: parse_duration(args.proxy_timeout)),
        proxy_cert=args.proxy_client_cert_file,
        proxy_key=args.proxy_client_key_file,
        demo_work=bool(getattr(args, "demo_work", False)),
    )
