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
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from . import demo, pki
from .authz import DEFAULT_MODES, MODES, FrontProxyVerifier, Policy, SecretSet, shares_ca
from .cli import UsageError
from .credentials import CredentialError, check_key_pair, load_cert_bundle, load_secrets
from .flags import FlagError, ProxyRoute, parse_duration, parse_feature_gates, parse_list, parse_proxy
from .metrics import Metrics, parse_address
from .middleware import ATTACH_MODES, ASGIApp, Authority, LoadReportMiddleware
from .proxy import ProxyApp
from .reload import Reloader, TrustFiles, read_allowed_names
from .report import DEFAULT_DECIMALS
from .sampler import Sampler
from .server import ServerOptions, bind_address, make_server_context, serve

HELP = "serve HTTP/2 TLS with load reports for the front proxy or a shared secret only"
log = logging.getLogger("secure_orca.serve")
GATE = "RequestCostAggregation"
T = TypeVar("T")


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
        default=1000,
        help="rotate a connection gracefully after this many requests (HTTP/2 GOAWAY; HTTP/1.1 Connection: close)",
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
        "--certs-dir",
        type=Path,
        default=Path("certs"),
        help="development PKI used when no TLS flags are given",
    )
    a("-v", "--verbose", action="store_true", help="log every request")


@dataclass
class ServeConfig:
    """Everything ``serve`` needs, validated; built from the flags without opening a socket."""

    host: str
    port: int
    files: TrustFiles
    enabled: bool
    policy: Policy
    verifier: FrontProxyVerifier | None
    interval: float
    decimals: int
    attach: str = "every-response"
    routes: list[ProxyRoute] = field(default_factory=list)
    proxy_timeout: float = 30.0
    max_requests: int = 1000
    goaway_chance: float = 0.0
    metrics_address: str = ""
    reload_interval: float = 1.0
    notes: list[str] = field(default_factory=list)


def _use_dev_pki(args: argparse.Namespace, notes: list[str]) -> None:
    dev = pki.DevPKI(args.certs_dir)
    if not dev.exists():
        try:
            pki.generate(args.certs_dir)
        except (OSError, FileExistsError) as error:
            raise UsageError(f"--certs-dir: cannot create the development PKI: {error}") from None
        notes.append(f"created a development PKI in {args.certs_dir}/")
    notes.append(f"no TLS flags: using the development PKI in {args.certs_dir}/ with load metrics on")
    args.tls_cert_file, args.tls_private_key_file = dev.cert("server"), dev.key("server")
    args.client_ca_file = args.client_ca_file or dev.cert("client_ca")
    args.requestheader_client_ca_file = args.requestheader_client_ca_file or dev.cert("front_proxy_ca")
    args.requestheader_allowed_names = args.requestheader_allowed_names or pki.FRONT_PROXY_CN
    args.endpoint_load_metrics_secret_file = args.endpoint_load_metrics_secret_file or dev.secret
    args.feature_gates = args.feature_gates or f"{GATE}=true"
    if args.enable_endpoint_load_metrics is None:
        args.enable_endpoint_load_metrics = True


def _flag(name: str, parse: Callable[[], T]) -> T:
    """Run a flag value parser, turning its FlagError into a UsageError naming the flag."""
    try:
        return parse()
    except FlagError as error:
        raise UsageError(f"{name}: {error}") from None


def build_config(args: argparse.Namespace) -> ServeConfig:
    """Validate the flags and read the credential files; raise UsageError naming the flag at fault."""
    notes: list[str] = []
    if args.tls_cert_file is None and args.tls_private_key_file is None:
        _use_dev_pki(args, notes)
    elif args.tls_cert_file is None or args.tls_private_key_file is None:
        raise UsageError("--tls-cert-file and --tls-private-key-file must be given together")
    if not 0 <= args.secure_port <= 65535:
        raise UsageError(f"--secure-port: {args.secure_port} is not a port number (0-65535)")
    if not 0 <= args.endpoint_load_metrics_decimals <= 12:
        raise UsageError("--endpoint-load-metrics-decimals: must be between 0 and 12")
    if args.max_requests_per_connection < 1:
        raise UsageError("--max-requests-per-connection: must be at least 1")
    gates = _flag("--feature-gates", lambda: parse_feature_gates(args.feature_gates))
    interval = _flag("--endpoint-load-metrics-interval", lambda: parse_duration(args.endpoint_load_metrics_interval))
    if not 0.001 <= interval <= 60:
        raise UsageError("--endpoint-load-metrics-interval: must be between 1ms and 60s")
    routes = [_flag("--proxy", lambda spec=spec: parse_proxy(spec)) for spec in args.proxy]
    proxy_timeout = _flag("--proxy-timeout", lambda: parse_duration(args.proxy_timeout))
    if not 0.01 <= proxy_timeout <= 3600:
        raise UsageError("--proxy-timeout: must be between 10ms and 1h")
    if not 0.0 <= args.goaway_chance <= 0.02:
        raise UsageError(f"--goaway-chance: {args.goaway_chance} is not between 0 and 0.02")
    reload_interval = _flag("--credential-reload-interval", lambda: parse_duration(args.credential_reload_interval))
    if not 0.05 <= reload_interval <= 3600:
        raise UsageError("--credential-reload-interval: must be between 50ms and 1h")
    if args.metrics_bind_address:
        _flag("--metrics-bind-address", lambda: parse_address(args.metrics_bind_address))
    if args.requestheader_allowed_names and args.requestheader_allowed_names_file:
        raise UsageError("--requestheader-allowed-names-file: give either it or --requestheader-allowed-names")
    modes = parse_list(args.endpoint_load_metrics_auth)
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        raise UsageError(
            f"--endpoint-load-metrics-auth: unknown mode {unknown[0] if unknown else '(empty)'}; "
            f"choose from {', '.join(MODES)}"
        )
    enabled = bool(args.enable_endpoint_load_metrics)
    if enabled and not gates.get(GATE, False):
        raise UsageError(f"--enable-endpoint-load-metrics: requires --feature-gates {GATE}=true")
    try:
        check_key_pair(args.tls_cert_file, args.tls_private_key_file)
        client_cas = load_cert_bundle(args.client_ca_file, "--client-ca-file") if args.client_ca_file else []
        fp_cas = (
            load_cert_bundle(args.requestheader_client_ca_file, "--requestheader-client-ca-file")
            if args.requestheader_client_ca_file
            else []
        )
        secrets = (
            load_secrets(args.endpoint_load_metrics_secret_file, "--endpoint-load-metrics-secret-file")
            if args.endpoint_load_metrics_secret_file and "shared-secret" in modes
            else []
        )
        allowed = (
            read_allowed_names(args.requestheader_allowed_names_file)
            if args.requestheader_allowed_names_file
            else parse_list(args.requestheader_allowed_names)
        )
    except CredentialError as error:
        raise UsageError(str(error)) from None
    if shares_ca(client_cas, fp_cas) and not allowed:
        raise UsageError(
            "--requestheader-allowed-names: must not be empty when --client-ca-file and "
            "--requestheader-client-ca-file share a certificate (any client certificate could act as the proxy)"
        )
    verifier = FrontProxyVerifier(fp_cas, allowed) if fp_cas else None
    usable = {"front-proxy": verifier is not None, "shared-secret": bool(secrets), "header-only": True}
    if enabled:
        if not any(usable[m] for m in modes):
            raise UsageError(
                "--endpoint-load-metrics-auth: no listed mode is usable: front-proxy needs "
                "--requestheader-client-ca-file, shared-secret needs --endpoint-load-metrics-secret-file"
            )
        notes += [f"auth mode {m} is listed but has no material; it grants nothing" for m in modes if not usable[m]]
        if "header-only" in modes:
            notes.append(
                "WARNING: --endpoint-load-metrics-auth includes header-only: any client that reaches this "
                "server can read its load (KEP-6315 option 1)"
            )
    files = TrustFiles(
        cert=args.tls_cert_file,
        key=args.tls_private_key_file,
        client_ca=args.client_ca_file,
        requestheader_ca=args.requestheader_client_ca_file,
        allowed_names_file=args.requestheader_allowed_names_file,
        secret_file=args.endpoint_load_metrics_secret_file,
        allowed_names=allowed,
    )
    return ServeConfig(
        host=args.bind_address,
        port=args.secure_port,
        files=files,
        enabled=enabled,
        policy=Policy(frozenset(m for m in modes if usable[m]), SecretSet(secrets) if secrets else None),
        verifier=verifier,
        interval=interval,
        decimals=args.endpoint_load_metrics_decimals,
        attach=args.endpoint_load_metrics_attach,
        routes=routes,
        proxy_timeout=proxy_timeout,
        max_requests=args.max_requests_per_connection,
        goaway_chance=args.goaway_chance,
        metrics_address=args.metrics_bind_address,
        reload_interval=reload_interval,
        notes=notes,
    )


@dataclass
class Server:
    """Everything ``serve`` runs, assembled from a ServeConfig (also used in process by the benchmarks)."""

    config: ServeConfig
    sampler: Sampler
    app: LoadReportMiddleware
    proxy: ProxyApp | None
    options: ServerOptions
    reloader: Reloader
    metrics: Metrics | None

    @classmethod
    def assemble(cls, config: ServeConfig, verbose: bool = False) -> Server:
        sampler = Sampler(config.interval, decimals=config.decimals)
        app, proxy = build_app(config, sampler)
        metrics = None
        if config.metrics_address:
            metrics = Metrics(sampler, lambda: verifications(app))
            app.on_decision, app.on_stripped = metrics.on_decision, metrics.on_stripped
        files = config.files
        trust = [p for p in (files.client_ca, files.requestheader_ca) if p]
        context = make_server_context(files.cert, files.key, trust)
        reloader = Reloader(files, context, app, config.policy.modes, metrics.on_reload if metrics else None)
        options = ServerOptions(
            host=config.host,
            port=config.port,
            context=context,
            max_requests_per_connection=config.max_requests,
            goaway_chance=config.goaway_chance,
            access_log=verbose,
        )
        return cls(config, sampler, app, proxy, options, reloader, metrics)

    async def run(self, shutdown_trigger: Callable[[], Awaitable[Any]]) -> None:
        """Serve until ``shutdown_trigger`` returns; the sampler and the reloader run on this loop."""
        if self.config.enabled:
            self.sampler.start()
        reloading = asyncio.create_task(self.reloader.run(self.config.reload_interval))
        try:
            await serve(self.app, self.options, shutdown_trigger)
        finally:
            reloading.cancel()
            self.sampler.stop()
            if self.proxy is not None:
                await self.proxy.aclose()


def verifications(app: LoadReportMiddleware) -> int:
    """Client chains verified so far by the trust in force."""
    chains = app.authority.chains
    return chains.verifier.verifications if chains else 0


def build_app(config: ServeConfig, sampler: Sampler) -> tuple[LoadReportMiddleware, ProxyApp | None]:
    """The middleware around the demo backend (or the proxy in front of it)."""
    inner: ASGIApp = demo.app
    proxy = None
    if config.routes:
        proxy = ProxyApp(config.routes, demo.app, config.proxy_timeout)
        inner = proxy
    middleware = LoadReportMiddleware(
        inner,
        enabled=config.enabled,
        authority=Authority.build(config.policy, config.verifier),
        sampler=sampler,
        attach=config.attach,
    )
    return middleware, proxy


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
        log.info("metrics on http://%s/metrics", bind_address(parse_address(config.metrics_address)[0], port))

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
