"""Serve HTTP/2 and HTTP/1.1 over TLS, attaching ORCA load reports (endpoint-load-metrics) only to requests
that opt in with endpoint-load-metrics-request AND are authorized: a client certificate trusted for
front-proxy authentication (--requestheader-client-ca-file, --requestheader-allowed-names), or a shared
secret in the opt-in value (TEXT; secret=...). Flags are named as kube-apiserver names them.

With no TLS flags it uses the development PKI in certs/ (creating it on first use) with the feature on.
Everything not under a --proxy prefix is served by a small kube-apiserver look-alike demo backend.
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import logging
import signal
from pathlib import Path

from secure_orca.addresses import is_loopback
from secure_orca.authz.policy import DEFAULT_MODES, MODES
from secure_orca.credentials import flags
from secure_orca.errors import UsageError
from secure_orca.orca.report import DEFAULT_DECIMALS
from secure_orca.server.adapter import bind_address
from secure_orca.server.assembly import Server
from secure_orca.server.config import GATE, build_config
from secure_orca.server.metrics import parse_address
from secure_orca.server.middleware import ATTACH_MODES

log = logging.getLogger("secure_orca.serve")

HELP = "serve HTTP/2 TLS with load reports for the front proxy or a shared secret only"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    a = parser.add_argument
    a("--bind-address", default="127.0.0.1", help="IP address to listen on (default 127.0.0.1)")
    a("--secure-port", type=int, default=6443, help="HTTPS port; 0 picks a free one (default 6443)")
    a(flags.TLS_CERT, type=Path, help="serving certificate (PEM, may include intermediates)")
    a(flags.TLS_KEY, type=Path, help="private key of the serving certificate (PEM)")
    a(flags.CLIENT_CA, type=Path, help="CA bundle for ordinary client certificates (never grants reports)")
    a(
        flags.REQUESTHEADER_CA,
        type=Path,
        help="CA bundle that signs front-proxy client certificates",
    )
    a(
        flags.ALLOWED_NAMES,
        default="",
        help="comma list of Common Names allowed as front proxy; empty: any certificate from that CA",
    )
    a(
        flags.ALLOWED_NAMES_FILE,
        type=Path,
        help="allowed Common Names, one per line, reloaded live (instead of --requestheader-allowed-names)",
    )
    a(
        "--requestheader-username-headers",
        default="X-Remote-User",
        help="comma list of headers holding the user name, believed only from the front proxy (default X-Remote-User)",
    )
    a(
        "--requestheader-uid-headers",
        default="X-Remote-Uid",
        help="comma list of headers holding the user's uid; must include X-Remote-Uid (default X-Remote-Uid)",
    )
    a(
        "--requestheader-group-headers",
        default="X-Remote-Group",
        help="comma list of headers holding the user's groups (default X-Remote-Group)",
    )
    a(
        "--requestheader-extra-headers-prefix",
        default="X-Remote-Extra-",
        help="comma list of header prefixes holding the user's extra attributes (default X-Remote-Extra-)",
    )
    a(
        "--requestheader-missing-user",
        choices=("unauthorized", "anonymous"),
        default="unauthorized",
        help="a verified front proxy that names no user: unauthorized (401, as kube-apiserver; default) or "
        "anonymous (not kube: for load balancers that do not authenticate users yet)",
    )
    a(flags.TOKENS, type=Path, help='static bearer tokens, CSV: token,user,uid,"group1,group2" (mode 0600)')
    a(
        "--anonymous-auth",
        default="true",
        help="requests no authenticator rejected are system:anonymous (default true; --anonymous-auth=false: 401)",
    )
    a(flags.PROXY_CERT, type=Path, help="client certificate presented to --proxy upstreams")
    a(flags.PROXY_KEY, type=Path, help="private key of --proxy-client-cert-file")
    a("--feature-gates", default="", help=f"e.g. {GATE}=true (default false)")
    a(
        "--enable-endpoint-load-metrics",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="attach ORCA load reports to authorized opted-in requests (needs the feature gate)",
    )
    a(
        "--endpoint-load-metrics-auth",
        default=",".join(DEFAULT_MODES),
        help=f"comma list of modes, any one granting: {', '.join(MODES)} (default {','.join(DEFAULT_MODES)})",
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
    a("--proxy", action="append", default=[], metavar="PREFIX=URL", help="proxy PREFIX to URL (repeatable)")
    a("--proxy-timeout", default="30s", help="how long a proxied upstream may take to answer (default 30s)")
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
    a(
        "--audit-log-path",
        default="",
        help="write one audit event (audit.k8s.io/v1 JSON) per request to this file; '-' means standard out",
    )
    a("--audit-log-maxsize", type=int, default=100, help="MB before the audit log is rotated; 0: never (default 100)")
    a("--audit-log-maxbackup", type=int, default=100, help="rotated audit logs to keep; 0 keeps all (default 100)")
    a("--credential-reload-interval", default="1s", help="how often credential files are re-read (default 1s)")
    a(
        "--demo-work",
        action="store_true",
        help="serve /work?cpu_ms=N (0-1000) on the demo backend: any client can then add CPU load, which moves "
        "the load report; for experiments only",
    )
    a(
        "--certs-dir",
        type=Path,
        default=Path("certs"),
        help="development PKI used when no TLS flags are given",
    )
    a("-v", "--verbose", action="store_true", help="log every request")


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="secure-orca: %(levelname)s: %(message)s")
    config = build_config(args)
    for note in config.notes:
        (log.warning if note.startswith("WARNING") else log.info)(note.removeprefix("WARNING: "))
    server = Server.assemble(config, verbose=args.verbose)
    log.info(
        "load metrics %s; modes: %s",
        "on" if config.enabled else "off",
        ",".join(sorted(config.modes)) or "none",
    )
    if config.oob is not None:
        log.info(
            "out-of-band load reports on (StreamCoreMetrics, certificate modes only), interval floor %gs, "
            "streams: %d in total, %d per connection, %d per certificate, %d for the front proxy only; "
            "write deadline %gs",
            config.oob.min_interval,
            config.oob.limits.total,
            config.oob.limits.per_connection,
            config.oob.limits.per_identity,
            config.oob.limits.front_proxy_share,
            config.oob.write_deadline,
        )
    if server.metrics is not None:
        try:
            port = server.metrics.serve(config.metrics_address)
        except OSError as error:
            raise UsageError(
                f"--metrics-bind-address: cannot listen on {config.metrics_address}: {error.strerror}"
            ) from None
        host = parse_address(config.metrics_address)[0]
        log.info("metrics on http://%s/metrics", bind_address(host, port))
        if not is_loopback(host):
            log.warning(
                "--metrics-bind-address %s is not a loopback address: /metrics has no authentication (it carries "
                "no load value, but counts of requests, reports and authentications)",
                host,
            )

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await server.run(stop.wait)

    try:
        asyncio.run(main())
    except OSError as error:
        if error.errno == errno.EADDRINUSE:
            raise UsageError(f"--secure-port: {config.host}:{config.port} is already in use") from None
        if error.errno == errno.EADDRNOTAVAIL:
            raise UsageError(f"--bind-address: {config.host} is not an address of this machine") from None
        raise UsageError(f"cannot serve on {config.host}:{config.port}: {error.strerror}") from None
    log.info("stopped")
    return 0
