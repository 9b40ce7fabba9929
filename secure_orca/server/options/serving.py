"""Secure serving (kube's SecureServingOptions with the generic server's run options): the listener, its serving
certificate, request deadlines, connection rotation, /metrics and how often credential files are re-read."""

from __future__ import annotations

import argparse
import importlib.util
import os
from dataclasses import dataclass, field
from pathlib import Path

from secure_orca import credential_flags as flags
from secure_orca.pki import DevPKI
from secure_orca.server.flags import parse_address, parse_duration
from secure_orca.server.http import pending
from secure_orca.server.http.pending import HandshakeLimits
from secure_orca.server.options.common import problem, value, within

MAX_WORKERS = 64
EVENT_LOOPS = ("asyncio", "uvloop")
H2_DEFAULT_STREAMS = 100  # hypercorn's h2_max_concurrent_streams
MAX_H2_STREAMS = 10_000


@dataclass
class ServingConfig:
    host: str
    port: int
    cert: Path
    key: Path
    request_timeout: float = 60.0  # --request-timeout: every request body's deadline (kube's default 60s)
    max_requests: int = 0  # 0: never rotate (kube-apiserver has no such limit)
    goaway_chance: float = 0.0
    metrics_address: str = ""
    reload_interval: float = 1.0
    workers: int = 0  # --workers; 0: one per CPU of the cgroup's quota, resolved when serving starts
    event_loop: str = "asyncio"  # --event-loop: asyncio (the standard library's) or uvloop (the uvloop extra)
    handshake: HandshakeLimits = field(default_factory=HandshakeLimits)  # the --tls-* and --max-pending-* flags
    h2_max_streams: int = 0  # --http2-max-streams-per-connection; 0: hypercorn's default (H2_DEFAULT_STREAMS)


def add_flags(parser: argparse.ArgumentParser) -> None:
    a = parser.add_argument
    a("--bind-address", default="127.0.0.1", help="IP address to listen on (default 127.0.0.1)")
    a("--secure-port", type=int, default=6443, help="HTTPS port; 0 picks a free one (default 6443)")
    a(flags.TLS_CERT, type=Path, help="serving certificate (PEM, may include intermediates)")
    a(flags.TLS_KEY, type=Path, help="private key of the serving certificate (PEM)")
    a(
        "--request-timeout",
        default="60s",
        help="kube-apiserver's flag: every request body must have arrived within this time of its first read, "
        "on every route, else 408 (default 60s, as kube)",
    )
    a(
        "--max-requests-per-connection",
        type=int,
        default=0,
        help="rotate a connection gracefully after this many requests (HTTP/2 GOAWAY; HTTP/1.1 Connection: close); "
        "0, the default, never rotates, as kube-apiserver",
    )
    a(
        "--goaway-chance",
        type=float,
        default=0.0,
        help="per HTTP/2 request, the chance (0 to 0.02) of a graceful GOAWAY so a load balancer can rebalance",
    )
    a("--metrics-bind-address", default="", help="serve Prometheus /metrics on HOST:PORT (off by default)")
    a("--credential-reload-interval", default="1s", help="how often credential files are re-read (default 1s)")
    a(
        "--workers",
        type=int,
        default=0,
        metavar="N",
        help="processes that serve the one port, each running the whole gate, with one load report, one /metrics "
        "and one audit log (written by one process) for the server (docs/architecture.md); 0, the default: one per "
        "CPU of the cgroup's quota (else of the CPUs this process may use), rounded up, as Go's GOMAXPROCS; 1: this "
        "process alone",
    )
    a(
        "--event-loop",
        choices=EVENT_LOOPS,
        default=os.environ.get("SECURE_ORCA_EVENT_LOOP", "asyncio"),
        help="the event loop each worker runs: asyncio (the standard library's) or uvloop (pip install "
        "'secure-orca[uvloop]'; docs/performance.md measures both); default: $SECURE_ORCA_EVENT_LOOP, else asyncio",
    )
    a(
        "--tls-client-hello-timeout",
        default=f"{pending.HELLO_TIMEOUT:g}s",
        help="a new connection's TLS ClientHello must have come within this time of its accept, else it is closed "
        f"(default {pending.HELLO_TIMEOUT:g}s)",
    )
    a(
        "--tls-handshake-timeout",
        default=f"{pending.HANDSHAKE_TIMEOUT:g}s",
        help="a new connection's TLS handshake must complete within this time of its accept, else it is closed "
        f"(default {pending.HANDSHAKE_TIMEOUT:g}s: the TLSHandshakeTimeout of Go's http.Transport and client-go; "
        "kube-apiserver allows 32s)",
    )
    a(
        "--max-pending-tls-handshakes",
        type=int,
        default=pending.MAX_PENDING,
        metavar="N",
        help="per worker, connections whose TLS handshake has not completed; a new one past it closes the oldest "
        f"(default {pending.MAX_PENDING}; at most half of RLIMIT_NOFILE's soft limit is used)",
    )
    a(
        "--max-pending-tls-handshakes-per-address",
        type=int,
        default=pending.MAX_PENDING_PER_ADDRESS,
        metavar="N",
        help="per worker, the same from one client address (IPv6: one /64); a new one past it closes that "
        f"address's oldest (default {pending.MAX_PENDING_PER_ADDRESS})",
    )
    a(
        "--tls-handshake-threads",
        type=int,
        default=pending.HANDSHAKE_THREADS,
        metavar="N",
        help="per worker, threads that run TLS handshake steps off the event loop; 0 runs them on the loop "
        f"(default {pending.HANDSHAKE_THREADS}; asyncio's loop only: under --event-loop uvloop, uvloop's own TLS "
        "runs every handshake on its loop, with the deadline of --tls-handshake-timeout and no caps)",
    )
    a(
        "--http2-max-streams-per-connection",
        type=int,
        default=0,
        metavar="N",
        help="SETTINGS_MAX_CONCURRENT_STREAMS announced to HTTP/2 clients (kube's flag; 0: the server's default, "
        f"{H2_DEFAULT_STREAMS}; an aggregated kube API server uses 1000, for a proxy multiplexing many long "
        f"requests on one connection; at most {MAX_H2_STREAMS})",
    )
    a(
        "--certs-dir",
        type=Path,
        default=Path("certs"),
        help="development PKI used when no TLS flags are given (created, or completed, on first use)",
    )


def uses_dev_pki(args: argparse.Namespace) -> bool:
    """No serving certificate is named: serve with the development PKI in --certs-dir."""
    return args.tls_cert_file is None and args.tls_private_key_file is None


def validate(args: argparse.Namespace) -> list[str]:
    out = []
    if (args.tls_cert_file is None) != (args.tls_private_key_file is None):
        out.append(f"{flags.TLS_CERT} and {flags.TLS_KEY} must be given together")
    if not 0 <= args.secure_port <= 65535:
        out.append(f"--secure-port: {args.secure_port} is not a port number (0-65535)")
    if args.max_requests_per_connection < 0:
        out.append("--max-requests-per-connection: must be 0 (never rotate) or more")
    if not 0 <= args.workers <= MAX_WORKERS:
        out.append(f"--workers: {args.workers} is not between 0 and {MAX_WORKERS}")
    if args.event_loop not in EVENT_LOOPS:  # argparse checks a given flag, not a default from the environment
        out.append(f"SECURE_ORCA_EVENT_LOOP: {args.event_loop!r} is not one of {', '.join(EVENT_LOOPS)}")
    elif args.event_loop == "uvloop" and importlib.util.find_spec("uvloop") is None:
        out.append("--event-loop uvloop: uvloop is not installed (pip install 'secure-orca[uvloop]')")
    if not 0.0 <= args.goaway_chance <= 0.02:
        out.append(f"--goaway-chance: {args.goaway_chance} is not between 0 and 0.02")
    out += within("--request-timeout", lambda: parse_duration(args.request_timeout), 0.01, 3600, "10ms and 1h")
    reload = args.credential_reload_interval
    out += within("--credential-reload-interval", lambda: parse_duration(reload), 0.05, 3600, "50ms and 1h")
    out += within(
        "--tls-client-hello-timeout", lambda: parse_duration(args.tls_client_hello_timeout), 0.1, 60, "100ms and 1m"
    )
    out += within(
        "--tls-handshake-timeout", lambda: parse_duration(args.tls_handshake_timeout), 0.1, 300, "100ms and 5m"
    )
    if not 1 <= args.max_pending_tls_handshakes <= 1_000_000:
        out.append("--max-pending-tls-handshakes: must be between 1 and 1000000")
    if not 1 <= args.max_pending_tls_handshakes_per_address <= args.max_pending_tls_handshakes:
        out.append("--max-pending-tls-handshakes-per-address: must be between 1 and --max-pending-tls-handshakes")
    if not 0 <= args.http2_max_streams_per_connection <= MAX_H2_STREAMS:
        out.append(f"--http2-max-streams-per-connection: must be between 0 (the default) and {MAX_H2_STREAMS}")
    if not 0 <= args.tls_handshake_threads <= 64:
        out.append("--tls-handshake-threads: must be between 0 and 64")
    if args.metrics_bind_address:
        out += problem("--metrics-bind-address", lambda: parse_address(args.metrics_bind_address))
    return out


def to_config(args: argparse.Namespace, dev: DevPKI | None) -> ServingConfig:
    cert, key = (dev.cert("server"), dev.key("server")) if dev else (args.tls_cert_file, args.tls_private_key_file)
    return ServingConfig(
        host=args.bind_address,
        port=args.secure_port,
        cert=cert,
        key=key,
        request_timeout=value("--request-timeout", lambda: parse_duration(args.request_timeout)),
        max_requests=args.max_requests_per_connection,
        goaway_chance=args.goaway_chance,
        metrics_address=args.metrics_bind_address,
        reload_interval=value("--credential-reload-interval", lambda: parse_duration(args.credential_reload_interval)),
        workers=args.workers,
        event_loop=args.event_loop,
        h2_max_streams=args.http2_max_streams_per_connection,
        handshake=HandshakeLimits(
            hello_timeout=value("--tls-client-hello-timeout", lambda: parse_duration(args.tls_client_hello_timeout)),
            handshake_timeout=value("--tls-handshake-timeout", lambda: parse_duration(args.tls_handshake_timeout)),
            max_pending=args.max_pending_tls_handshakes,
            max_pending_per_address=args.max_pending_tls_handshakes_per_address,
            threads=args.tls_handshake_threads,
        ),
    )
