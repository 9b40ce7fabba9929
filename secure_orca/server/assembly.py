"""Assembly of everything `serve` runs from a validated ServeConfig (also used in process by the benchmarks)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from secure_orca.authn.authenticator import Outcome, Request
from secure_orca.server import demo
from secure_orca.server.adapter import ServerOptions, make_server_context, serve
from secure_orca.server.asgi import ASGIApp, Scope
from secure_orca.server.audit import AuditLog, AuditMiddleware, FileSecrets, open_sink, record_of
from secure_orca.server.authentication import AuthenticationMiddleware
from secure_orca.server.config import ServeConfig
from secure_orca.server.metrics import Metrics
from secure_orca.server.middleware import Authority, ChainCache, LoadReportMiddleware
from secure_orca.server.proxy import ProxyApp
from secure_orca.server.reload import Reloader
from secure_orca.server.sampler import Sampler


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
    audit: AuditLog | None = None

    @classmethod
    def assemble(cls, config: ServeConfig, verbose: bool = False) -> Server:
        sampler = Sampler(config.interval, decimals=config.decimals)
        app, proxy = build_app(config, sampler)
        metrics = None
        if config.metrics_address:
            metrics = Metrics(sampler, lambda: verifications(app))
            app.on_decision, app.on_stripped = metrics.on_decision, metrics.on_stripped
        files = config.files
        trust = [p for p in (files.client_ca, files.requestheader_ca, files.load_reader_ca) if p]
        context = make_server_context(files.cert, files.key, trust)
        authentication = app.app if isinstance(app.app, AuthenticationMiddleware) else None
        reloader = Reloader(
            files,
            context,
            app,
            config.policy.modes,
            metrics.on_reload if metrics else None,
            authentication.trust_clients if authentication else None,
        )
        options = ServerOptions(
            host=config.host,
            port=config.port,
            context=context,
            max_requests_per_connection=config.max_requests,
            goaway_chance=config.goaway_chance,
            access_log=verbose,
        )
        audit = None
        if config.audit_path:
            sink = open_sink(config.audit_path, config.audit_maxsize, config.audit_maxbackup)
            audit = AuditLog(sink, FileSecrets(files.secret_file, config.token_file))
            if metrics is not None:
                metrics.watch_audit(audit)
        if authentication is not None and (metrics is not None or audit is not None):
            authentication.observe = observer(metrics, audit is not None)
        return cls(config, sampler, app, proxy, options, reloader, metrics, audit)

    @property
    def entry(self) -> ASGIApp:
        """The application the adapter serves: the audit layer outermost when auditing."""
        return AuditMiddleware(self.app, self.audit) if self.audit is not None else self.app

    async def run(self, shutdown_trigger: Callable[[], Awaitable[Any]]) -> None:
        """Serve until ``shutdown_trigger`` returns; the sampler and the reloader run on this loop."""
        if self.config.enabled:
            self.sampler.start()
        reloading = asyncio.create_task(self.reloader.run(self.config.reload_interval))
        if self.audit is not None:
            self.audit.start()
        try:
            await serve(self.entry, self.options, shutdown_trigger)
        finally:
            reloading.cancel()
            self.sampler.stop()
            if self.audit is not None:
                self.audit.stop()
            if self.proxy is not None:
                await self.proxy.aclose()


def observer(metrics: Metrics | None, audit: bool) -> Callable[[Scope, Request, Outcome, float], None]:
    """What AuthenticationMiddleware reports each authentication to: kube's metrics, the audit record."""

    def observe(scope: Scope, request: Request, outcome: Outcome, started: float) -> None:
        if metrics is not None:
            metrics.on_authentication(outcome, time.perf_counter() - started)
        record = record_of(scope) if audit else None
        if record is not None:
            record.user = outcome.user
            if request.front_proxy.holds_at(request.now):
                record.front_proxy = request.leaf

    return observe


def verifications(app: LoadReportMiddleware) -> int:
    """Client chains verified so far by the trust in force."""
    chains = app.authority.chains
    return chains.verifier.verifications if chains else 0


def build_app(config: ServeConfig, sampler: Sampler) -> tuple[LoadReportMiddleware, ProxyApp | None]:
    """The middleware around the demo backend (or the proxy in front of it)."""
    backend: ASGIApp = demo.with_work(demo.app) if config.demo_work else demo.app
    inner = backend
    proxy = None
    if config.routes:
        proxy = ProxyApp(config.routes, backend, config.proxy_timeout, client_cert=config.proxy_client)
        inner = proxy
    clients = ChainCache(config.client_verifier) if config.client_verifier is not None else None
    authenticated = AuthenticationMiddleware(
        inner,
        config.authentication,
        lambda: middleware.authority.chains,
        clients,
        load_readers=lambda: middleware.authority.readers,
    )
    # Load reports are decided outside authentication, exactly as before it existed (a 401 is a response too).
    middleware = LoadReportMiddleware(
        authenticated,
        enabled=config.enabled,
        authority=Authority.build(config.policy, config.verifier, config.reader_verifier),
        sampler=sampler,
        attach=config.attach,
    )
    return middleware, proxy
