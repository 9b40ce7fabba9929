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

from secure_orca.authz.policy import DEFAULT_MODES, MODES
from secure_orca.errors import UsageError
from secure_orca.orca.report import DEFAULT_DECIMALS
from secure_orca.server.adapter import bind_address
from secure_orca.server.assembly import Server
from secure_orca.server.config import GATE, build_config
from secure_orca.server.flags import is_loopback
from secure_orca.server.metrics import parse_address
from secure_orca.server.middleware import ATTACH_MODES

log = logging.getLogger("secure_orca.serve")

HELP = "serve HTTP/2 TLS with load reports for the front proxy or a shared secret only"

def add_arguments(parser: argparse.ArgumentParser) -> None:
    a = parser.add_argument
    a("--bind-address", default="127.0.0.1", help="IP address to listen on (default 127.0.0.1)")
    a("--secure-port", type=int, default=6443, help="HTTPS port; 0 picks a free one (default 6443)")
    a("--tls-cert-file", type=Path, help="serving certificate (PEM, may include intermediates)")
    a("--tls-private-key-file", type=Path, help="private key of the serving certificate (PEM)")
    a("--client-ca-file", type=Path, help="CA bundle for ordinary client certificates (never grants reports)")
    a(
        "--requestheader-client-ca-file",
        type=Path,
        help="CA bundle that signs front-proxy client certificates",
    )
    a(
        "--requestheader-allowed-names",
        default="",
        help="comma list of Common Names allowed as front proxy; empty: any certificate from that CA",
    )
    a(
        "--requestheader-allowed-names-file",
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
    a("--token-auth-file", type=Path, help="static bearer tokens, CSV: token,user,uid,\"group1,group2\" (mode 0600)")
    a(
        "--anonymous-auth",
        default="true",
        help="requests no authenticator rejected are system:anonymous (default true; --anonymous-auth=false: 401)",
    )
    a("--proxy-client-cert-file", type=Path, help="client certificate presented to --proxy upstreams")
    a("--proxy-client-key-file", type=Path, help="private key of --proxy-client-cert-file")
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
    a("--endpoint-load-metrics-secret-file", type=Path, help="shared secrets, one per line (mode 0600)")
    a(
        "--endpoint-load-metrics-client-ca-file",
        type=Path,
        help="mode load-reader (option 2b): CA of load-reader client certificates; they may read load reports "
        "and nothing else (their identity headers are never believed); reloaded live",
    )
    a(
        "--endpoint-load-metrics-allowed-names",
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
    a("--proxy", action="append", default=[], metavar="PREFIX=URL", help="proxy PREFIX to URL (repeatable)")
    a("--proxy-timeout", default="30s", help="how long a proxied upstream may take to answer (default 30s)")
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
        ",".join(sorted(config.policy.modes)) or "none",
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
                "--metrics-bind-address %s is not a loopback address: /metrics has no authentication, and anyone "
                "who reaches it reads every load value at full precision",
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
