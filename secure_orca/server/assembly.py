"""Assembly of everything `serve` runs from a validated ServeConfig (also used in process by the benchmarks)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, cast

from secure_orca.authn.authenticator import Outcome, Request
from secure_orca.authn.tokenfile import TokenFile
from secure_orca.authz.policy import Decision
from secure_orca.credentials import loader
from secure_orca.credentials.loader import Material
from secure_orca.server import demo
from secure_orca.server.asgi import ASGIApp, BodyDeadline, Scope
from secure_orca.server.audit.log import AuditLog, AuditMiddleware, KnownSecrets, open_sink, record_of
from secure_orca.server.authentication import AuthenticationMiddleware, is_authenticated
from secure_orca.server.config import ServeConfig
from secure_orca.server.http.serve import ServerOptions, serve
from secure_orca.server.http.tls import make_server_context
from secure_orca.server.metrics import Metrics
from secure_orca.server.middleware import LoadReportMiddleware
from secure_orca.server.oob import OobService
from secure_orca.server.options.serving import H2_DEFAULT_STREAMS
from secure_orca.server.refusals import RouteDialects
from secure_orca.server.reload import Reloader
from secure_orca.server.sampler import Sampler
from secure_orca.server.trust import TrustService, authority_from
from secure_orca.x509.cache import ChainCache
from secure_orca.x509.chainverifier import ChainVerifier

if TYPE_CHECKING:  # imported where a route needs it: httpx is a fifth of serve's start-up
    from secure_orca.server.proxy.forward import ProxyApp


@dataclass
class Server:
    """Everything ``serve`` runs, assembled from a ServeConfig (also used in process by the benchmarks)."""

    config: ServeConfig
    sampler: Sampler
    trust: TrustService  # the Authority in force and chain verification, shared by every layer below
    app: LoadReportMiddleware
    proxy: ProxyApp | None
    options: ServerOptions
    reloader: Reloader
    metrics: Metrics | None
    oob: OobService | None = None  # StreamCoreMetrics in front of ``app`` (docs/out-of-band.md)
    audit: AuditLog | None = None

    @classmethod
    def assemble(cls, config: ServeConfig, verbose: bool = False, sampler: Sampler | None = None) -> Server:
        """Read every credential file once (CredentialError names the flag at fault) and build from it; a
        worker of ``serve --workers`` brings the sampler that reads the server's one report."""
        material, contents = loader.load_contents(config.files)
        sampler = sampler or Sampler(config.load_metrics.interval, decimals=config.load_metrics.decimals)
        trust = trust_of(config, material)
        metrics = Metrics(sampler, lambda: chains_verified(trust)) if config.serving.metrics_address else None
        hooks = Hooks.of(metrics, audit=bool(config.audit.path))
        app, proxy = build_app(config, sampler, material, trust, hooks)
        if metrics is not None and proxy is not None:
            from secure_orca.server.proxy.metrics import RouteCollector

            metrics.registry.register(RouteCollector(proxy.metrics))
        context = make_server_context(material.serving, material.anchors())
        oob = None
        if config.oob is not None:
            bounds = config.oob
            reports = proxy.reports if proxy is not None else None
            source = sampler
            if reports is not None and any(route.report != "local" for route in config.backend.routes):
                from secure_orca.server.proxy.backendload import WithBackendLoad

                source = cast(Sampler, WithBackendLoad(sampler, reports))  # OobService reads only ``.report``
            oob = OobService(
                app,
                trust,
                source,
                enabled=config.load_metrics.enabled,
                decimals=config.load_metrics.decimals,
                min_interval=bounds.min_interval,
                limits=bounds.limits,
                write_deadline=bounds.write_deadline,
            )
            if metrics is not None:
                metrics.watch_oob(oob)
        reloader = Reloader(
            loader.sources(config.files),
            material,
            {flag: loader.fingerprint(read) for flag, read in contents.items()},
            context,
            trust,
            _both(metrics.on_reload if metrics else None, oob.reloaded if oob else None),
            contents=contents,
        )
        options = ServerOptions(
            host=config.serving.host,
            port=config.serving.port,
            context=context,
            max_requests_per_connection=config.serving.max_requests,
            goaway_chance=config.serving.goaway_chance,
            access_log=verbose,
            handshake=config.serving.handshake,
            h2_max_streams=config.serving.h2_max_streams,
        )
        if metrics is not None:
            metrics.watch_handshakes(options.handshake_stats)
        audit = None
        if config.audit.path:
            sink = open_sink(config.audit.path, config.audit.maxsize, config.audit.maxbackup)
            audit = AuditLog(sink, KnownSecrets(lambda: reloader.material), mode=config.audit.mode)
            if metrics is not None:
                metrics.watch_audit(audit)
        return cls(config, sampler, trust, app, proxy, options, reloader, metrics, oob, audit)

    @property
    def entry(self) -> ASGIApp:
        """The application ``server/http`` serves: the out-of-band service in front of the app, and the audit layer
        outermost when auditing."""
        served: ASGIApp = self.oob or self.app
        return AuditMiddleware(served, self.audit) if self.audit is not None else served

    async def run(self, shutdown_trigger: Callable[[], Awaitable[Any]]) -> None:
        """Serve until ``shutdown_trigger`` returns; the sampler and the reloader run on this loop."""
        if self.config.load_metrics.enabled:
            self.sampler.start()
        reloading = asyncio.create_task(self.reloader.run(self.config.serving.reload_interval))
        oob = self.oob

        async def trigger() -> Any:
            try:
                return await shutdown_trigger()
            finally:
                if oob is not None:
                    oob.shutdown()  # open streams end with a status before the connections drain

        if self.audit is not None:
            self.audit.start()
        try:
            await serve(self.entry, self.options, trigger)
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


def _both(
    first: Callable[[str, bool], None] | None, second: Callable[[str, bool], None] | None
) -> Callable[[str, bool], None] | None:
    """One reload callback calling each given one."""
    if first is None or second is None:
        return first or second

    def both(flag: str, ok: bool) -> None:
        first(flag, ok)
        second(flag, ok)

    return both


def verifications(app: LoadReportMiddleware) -> int:
    """Client chains verified so far by the trust in force."""
    return chains_verified(app.trust)


def chains_verified(trust: TrustService) -> int:
    """Client chains verified so far by ``trust``'s front-proxy trust in force."""
    chains = trust.authority.chains
    return chains.verifier.verifications if chains else 0


@dataclass(frozen=True)
class Hooks:
    """What the layers report to, given to their constructors: each decision and each stripped ORCA header
    (the load-report middleware), each authentication (AuthenticationMiddleware)."""

    on_decision: Callable[[Decision], None] | None = None
    on_stripped: Callable[[int], None] | None = None
    observe: Callable[[Scope, Request, Outcome, float], None] | None = None

    @classmethod
    def of(cls, metrics: Metrics | None, audit: bool) -> Hooks:
        """The hooks of kube's metrics (when served) and of the audit record (when auditing)."""
        observe = observer(metrics, audit) if metrics is not None or audit else None
        if metrics is None:
            return cls(observe=observe)
        return cls(metrics.on_decision, metrics.on_stripped, observe)


def trust_of(config: ServeConfig, material: Material) -> TrustService:
    """The trust ``material`` grants: the Authority, and the --client-ca-file trust when that authenticator is on."""
    clients = ChainCache(ChainVerifier(material.client_cas)) if material.client_cas else None
    return TrustService(authority_from(material, config.load_metrics.modes), clients)


def build_app(
    config: ServeConfig,
    sampler: Sampler,
    material: Material,
    trust: TrustService | None = None,
    hooks: Hooks = Hooks(),
) -> tuple[LoadReportMiddleware, ProxyApp | None]:
    """The middleware around the demo backend (or the proxy in front of it), trusting what ``trust`` holds (by
    default, what ``material`` grants) and reporting to ``hooks``."""
    trust = trust or trust_of(config, material)
    backend: ASGIApp = demo.with_work(demo.app) if config.backend.demo_work else demo.app
    inner = backend
    proxy = None
    if config.backend.routes:
        from secure_orca.server.proxy.backendload import BackendReports
        from secure_orca.server.proxy.forward import ProxyApp

        reports = BackendReports(sampler, config.load_metrics.decimals, config.backend.report_max_age)
        require = config.backend.readiness == "require"
        proxy = ProxyApp(config.backend.routes, backend, config.backend.limits, material.proxy_client, reports, require)
        inner = proxy
    tokens = TokenFile(material.tokens) if material.tokens else None
    errors = RouteDialects([(route.prefix, route.errors) for route in config.backend.routes])
    streams = config.serving.h2_max_streams or H2_DEFAULT_STREAMS
    authenticated = AuthenticationMiddleware(
        BodyDeadline(  # every route's body has a deadline; an authenticated caller may wait on all its streams
            inner, config.serving.request_timeout, errors=errors, authenticated=is_authenticated, streams=streams
        ),
        replace(config.authentication.authenticators, tokens=tokens),
        trust,
        observe=hooks.observe,
        errors=errors,
    )
    # Load reports are decided outside authentication, exactly as before it existed (a 401 is a response too).
    middleware = LoadReportMiddleware(
        authenticated,
        enabled=config.load_metrics.enabled,
        trust=trust,
        sampler=sampler,
        attach=config.load_metrics.attach,
        on_decision=hooks.on_decision,
        on_stripped=hooks.on_stripped,
    )
    return middleware, proxy
