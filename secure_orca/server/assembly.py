"""Assembly of everything `serve` runs from a validated ServeConfig (also used in process by the benchmarks)."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeVar, cast

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
from secure_orca.server.http.accept import Balance
from secure_orca.server.http.serve import ServerOptions, serve
from secure_orca.server.http.tls import make_server_context
from secure_orca.server.middleware import LoadReportMiddleware
from secure_orca.server.oob import OobService
from secure_orca.server.options.serving import H2_DEFAULT_STREAMS
from secure_orca.server.refusals import RouteDialects
from secure_orca.server.reload import Reloader
from secure_orca.server.sampler import Sampler
from secure_orca.server.trust import TrustService, authority_from
from secure_orca.x509.cache import ChainCache
from secure_orca.x509.chainverifier import ChainVerifier

if TYPE_CHECKING:  # imported where a route or /metrics needs it: httpx, prometheus-client (serve's start-up)
    from secure_orca.server.metrics import Metrics
    from secure_orca.server.proxy.backendload import BackendReports
    from secure_orca.server.proxy.forward import ProxyApp

L = TypeVar("L")


@dataclass(frozen=True)
class Stack:
    """The ASGI layers as built from ``layers``' one ordered list, innermost first: ``entry`` is what is served."""

    built: tuple[ASGIApp, ...]

    @property
    def entry(self) -> ASGIApp:
        """The outermost layer."""
        return self.built[-1]

    def find(self, kind: type[L]) -> L | None:
        """The layer of type ``kind``, if the stack has one."""
        return next((layer for layer in self.built if isinstance(layer, kind)), None)

    def get(self, kind: type[L]) -> L:
        """The layer of type ``kind``, which every stack has."""
        layer = self.find(kind)
        if layer is None:
            raise LookupError(f"the stack has no {kind.__name__}")
        return layer


@dataclass(frozen=True)
class Server:
    """Everything ``serve`` runs, assembled from a ServeConfig (also used in process by the benchmarks)."""

    config: ServeConfig
    sampler: Sampler
    trust: TrustService  # the Authority in force and chain verification, shared by every layer below
    stack: Stack
    options: ServerOptions
    reloader: Reloader
    metrics: Metrics | None
    audit: AuditLog | None = None

    @classmethod
    def assemble(
        cls,
        config: ServeConfig,
        verbose: bool = False,
        sampler: Sampler | None = None,
        sock: socket.socket | None = None,
    ) -> Server:
        """Read every credential file once (CredentialError names the flag at fault) and build from it; a
        worker of ``serve --workers`` brings the sampler that reads the server's one report, and the listening
        socket the workers share."""
        material, contents = loader.load_contents(config.files)
        sampler = sampler or Sampler(config.load_metrics.interval, decimals=config.load_metrics.decimals)
        trust = trust_of(config, material)
        metrics = metrics_of(config, sampler, trust)
        audit = None
        if config.audit.path:  # its secrets are the material in force: the reloader's, made below
            sink = open_sink(config.audit.path, config.audit.maxsize, config.audit.maxbackup)
            audit = AuditLog(sink, KnownSecrets(lambda: reloader.material), mode=config.audit.mode)
        stack = layers(config, sampler, material, trust, Hooks.of(metrics, audit), audit)
        proxy, oob = _find_proxy(config, stack), stack.find(OobService)
        if metrics is not None and proxy is not None:
            from secure_orca.server.proxy.metrics import RouteCollector

            metrics.registry.register(RouteCollector(proxy.metrics))
        if metrics is not None and oob is not None:
            metrics.watch_oob(oob)
        context = make_server_context(material.serving, material.anchors())
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
            sock=sock,
            h2_max_streams=config.serving.h2_max_streams,
        )
        if metrics is not None:
            metrics.watch_handshakes(options.handshake_stats)
            if audit is not None:
                metrics.watch_audit(audit)
        return cls(config, sampler, trust, stack, options, reloader, metrics, audit)

    def balanced(self, balance: Balance) -> Server:
        """This server as a worker serves it: the same parts, options sharing connection counts through ``balance``
        (a new Server, made in the worker after the fork; nothing of this one changes)."""
        return replace(self, options=replace(self.options, balance=balance))

    @property
    def entry(self) -> ASGIApp:
        """The application ``server/http`` serves: the outermost layer."""
        return self.stack.entry

    @property
    def app(self) -> LoadReportMiddleware:
        """The load-report middleware: where each response's ORCA header is decided."""
        return self.stack.get(LoadReportMiddleware)

    @property
    def proxy(self) -> ProxyApp | None:
        return _find_proxy(self.config, self.stack)

    @property
    def oob(self) -> OobService | None:
        """StreamCoreMetrics in front of ``app`` (docs/out-of-band.md)."""
        return self.stack.find(OobService)

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


def metrics_of(config: ServeConfig, sampler: Sampler, trust: TrustService) -> Metrics | None:
    """/metrics when --metrics-bind-address asks for it; only then is prometheus-client imported."""
    if not config.serving.metrics_address:
        return None
    from secure_orca.server.metrics import Metrics

    return Metrics(sampler, lambda: chains_verified(trust))


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
    def of(cls, metrics: Metrics | None, audit: AuditLog | None) -> Hooks:
        """The hooks of kube's metrics (when served) and of the audit record (when auditing)."""
        observe = observer(metrics, audit is not None) if metrics is not None or audit is not None else None
        if metrics is None:
            return cls(observe=observe)
        return cls(metrics.on_decision, metrics.on_stripped, observe)


def trust_of(config: ServeConfig, material: Material) -> TrustService:
    """The trust ``material`` grants: the Authority, and the --client-ca-file trust when that authenticator is on."""
    clients = ChainCache(ChainVerifier(material.client_cas)) if material.client_cas else None
    return TrustService(authority_from(material, config.load_metrics.modes), clients)


Wrap = Callable[[ASGIApp], ASGIApp]


def layers(
    config: ServeConfig,
    sampler: Sampler,
    material: Material,
    trust: TrustService,
    hooks: Hooks = Hooks(),
    audit: AuditLog | None = None,
) -> Stack:
    """The ASGI stack, from its one ordered list of layers (innermost first; a layer that ``config`` leaves off
    is None). Each layer is given what it reports to (``hooks``, ``audit``) when it is built."""
    load = config.load_metrics
    reports = None
    if config.backend.routes:
        from secure_orca.server.proxy.backendload import BackendReports

        reports = BackendReports(sampler, load.decimals, config.backend.report_max_age)
    authenticators = replace(
        config.authentication.authenticators, tokens=TokenFile(material.tokens) if material.tokens else None
    )
    errors = RouteDialects([(route.prefix, route.errors) for route in config.backend.routes])
    streams = config.serving.h2_max_streams or H2_DEFAULT_STREAMS
    built: list[ASGIApp] = [demo.app]  # the layers built so far, innermost first

    def proxy_below() -> ProxyApp | None:
        return _find_proxy(config, Stack(tuple(built)))

    order: list[Wrap | None] = [
        demo.with_work if config.backend.demo_work else None,
        _proxy(config, material, reports) if config.backend.routes else None,
        # Every route's body has a deadline; an authenticated caller may wait on all its streams.
        lambda inner: BodyDeadline(
            inner, config.serving.request_timeout, errors=errors, authenticated=is_authenticated, streams=streams
        ),
        lambda inner: AuthenticationMiddleware(inner, authenticators, trust, observe=hooks.observe, errors=errors),
        # Load reports are decided outside authentication, exactly as before it existed (a 401 is a response too).
        lambda inner: LoadReportMiddleware(
            inner,
            enabled=load.enabled,
            trust=trust,
            sampler=sampler,
            attach=load.attach,
            on_decision=hooks.on_decision,
            on_stripped=hooks.on_stripped,
        ),
        _oob(config, trust, sampler, reports, proxy_below) if config.oob is not None else None,
        (lambda inner: AuditMiddleware(inner, audit)) if audit is not None else None,  # outermost
    ]
    for wrap in order:
        if wrap is not None:
            built.append(wrap(built[-1]))
    return Stack(tuple(built))


def _proxy(config: ServeConfig, material: Material, reports: BackendReports | None) -> Wrap:
    """The reverse proxy, with the demo backend as its fallback route."""
    from secure_orca.server.proxy.forward import ProxyApp

    backend = config.backend
    require = backend.readiness == "require"
    return lambda inner: ProxyApp(backend.routes, inner, backend.limits, material.proxy_client, reports, require)


def _oob(
    config: ServeConfig,
    trust: TrustService,
    sampler: Sampler,
    reports: BackendReports | None,
    proxy_below: Callable[[], ProxyApp | None],
) -> Wrap:
    """The out-of-band service; its reports carry the backends' load when a route says so (polled, when a route
    has ``load-poll``, through the proxy built below it)."""
    assert config.oob is not None
    bounds, load = config.oob, config.load_metrics

    def source() -> Sampler:
        proxy = proxy_below()
        if proxy is None or reports is None or all(route.report == "local" for route in config.backend.routes):
            return sampler
        from secure_orca.server.proxy.backendload import WithBackendLoad

        carrying = WithBackendLoad.of(sampler, reports, proxy, config.backend.routes, bounds.min_interval)
        return cast(Sampler, carrying)  # OobService reads only ``.report``

    return lambda inner: OobService(
        inner,
        trust,
        source(),
        enabled=load.enabled,
        decimals=load.decimals,
        min_interval=bounds.min_interval,
        limits=bounds.limits,
        write_deadline=bounds.write_deadline,
    )


def build_app(
    config: ServeConfig,
    sampler: Sampler,
    material: Material,
    trust: TrustService | None = None,
    hooks: Hooks = Hooks(),
) -> tuple[LoadReportMiddleware, ProxyApp | None]:
    """The load-report middleware as ``serve`` builds it (and the proxy, when routed), trusting what ``trust``
    holds (by default, what ``material`` grants) and reporting to ``hooks``."""
    stack = layers(config, sampler, material, trust or trust_of(config, material), hooks)
    return stack.get(LoadReportMiddleware), _find_proxy(config, stack)


def _find_proxy(config: ServeConfig, stack: Stack) -> ProxyApp | None:
    """The stack's reverse proxy, when routed (httpx, which it imports, is a fifth of serve's start-up)."""
    if not config.backend.routes:
        return None
    from secure_orca.server.proxy.forward import ProxyApp

    return stack.find(ProxyApp)
