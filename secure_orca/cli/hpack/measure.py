"""``secure-orca hpack measure``: real HTTP/2 TLS connections to a running server, with the load balancer's
credentials and without the opt-in, at each --rate per connection; every received header block attributed with
the walker, the model for the same rate beside it. The secret is never printed."""

from __future__ import annotations

import argparse
import json
import re
import ssl
import sys
from pathlib import Path
from typing import TextIO

from secure_orca.credentials import loader
from secure_orca.errors import CredentialError, FlagError, UsageError
from secure_orca.hpackcost.tables import model_vs_wire_table, totals_table, wire_table
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
from secure_orca.orca.report import DEFAULT_DECIMALS
from secure_orca.server.flags import parse_duration

HELP = "measure the cost on real HTTP/2 connections"
MAX_RATE = 5000.0  # per connection; a pure-Python client and server cap out around a few thousand req/s
MAX_CONNECTIONS = 32
MAX_DURATION = 600.0
REMOTE_USER = "hpack-measure"
HEADER_VALUE = re.compile(r"[!-~](?:[ -~]*[!-~])?")  # RFC 9110 field-value, visible ASCII only


def add_arguments(wire: argparse.ArgumentParser) -> None:
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


def run(args: argparse.Namespace) -> int:
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
