"""Envoy bootstrap configurations for secure_orca-style replicas, built as plain data (pure: no I/O; files and
the envoy binary are in :mod:`secure_orca.envoy.files`). A bootstrap is written as JSON, which is valid YAML.

One listener terminates TLS for clients (ALPN h2 and http/1.1); one cluster speaks HTTP/2 over TLS to the
replicas, verifying their serving CA and SAN. Per security option (KEP-6315) the upstream requests carry:

- ``front-proxy``: the front-proxy client certificate on every upstream connection, and the opt-in
  ``endpoint-load-metrics-request: TEXT``;
- ``shared-secret``: the opt-in with the secret, ``TEXT; secret=<secret>``;
- ``front-proxy,shared-secret``: both (either one grants);
- ``header-only``: the bare opt-in (the KEP's option 1).

With ``oob_period`` set (the certificate options only, CSWRR only), no request carries an opt-in: CSWRR opens one
``StreamCoreMetrics`` stream per replica over the cluster's transport socket, so with the same client
certificate (Envoy PR 44403, ``enable_oob_load_report``), and weighs the hosts by the streamed reports alone.

Whatever a client sends as opt-in is removed first, and the LB's own value is set with
OVERWRITE_IF_EXISTS_OR_ADD semantics, so a client can neither inject nor guess its way in. The ORCA response
headers (and trailers: ``endpoint-load-metrics``, ``-bin`` and the legacy ``-json``) are removed before a response
reaches a client. The secret never appears in the
bootstrap by default: Envoy's credential injector reads it through a file-based SDS resource that names the
secret file (``secret_delivery="sds"``); ``"inline"`` puts it (``LBConfig.inline_secret``) into
``request_headers_to_add`` instead, and then the bootstrap must be written mode 0600 (``files.write`` does).

The identity filter's Lua program is package data (``identity.lua``, a file Lua tools can check), read once when
this module is imported, as its code is: no call opens a file.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from secure_orca.addresses import is_loopback
from secure_orca.errors import SecureOrcaError
from secure_orca.kep_options import Mode, modes_of, option_named
from secure_orca.orca.headers import OPTIN as OPTIN_HEADER
from secure_orca.orca.headers import REPORT as HEADER
from secure_orca.orca.headers import REPORT_BIN as HEADER_BIN
from secure_orca.orca.headers import REPORT_JSON as HEADER_JSON
from secure_orca.orca.optin import SUPPORTED_FORMATS, header_value

OPTIONS = ("front-proxy", "shared-secret", "front-proxy,shared-secret", "header-only", "load-reader")
OOB_SERVICE_PREFIX = "/xds.service.orca.v3.OpenRcaService/"  # no client of the load balancer may call it
OOB_OPTIONS = tuple(o for o in OPTIONS if option_named(o).certificate_entitles)  # the stream: by certificate alone
POLICIES = ("cswrr", "round-robin")
SECRET_DELIVERIES = ("sds", "inline")
# Report headers removed from every response and trailer before a client sees them: ours, and the legacy
# ``endpoint-load-metrics-json`` that older Envoys parse (1.40 passes it through unread: docs/out-of-band.md).
ORCA_RESPONSE_HEADERS = (HEADER, HEADER_BIN, HEADER_JSON)
CLUSTER = "apiserver"
SECRET_NAME = "endpoint-load-metrics-secret"
# Streams the upstream provably did not process: REFUSED_STREAM (also what Envoy reports for streams above a
# GOAWAY's last-stream-id), resets before the request was sent, failed connects. Never plain "reset" or 5xx,
# which could replay a request the apiserver already executed.
RETRY_ON = "refused-stream,reset-before-request,connect-failure"
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
# Retries in flight at once across the cluster (Envoy's default circuit breaker allows 3, which a connection
# closed with a few dozen streams in flight exceeds: "upstream_rq_retry_overflow", 503 to clients).
MAX_CONCURRENT_RETRIES = 256

_TYPE = "type.googleapis.com/envoy."
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # RFC 9110 token
_CSWRR = "envoy.load_balancing_policies.client_side_weighted_round_robin"
_LOCALITY = "envoy.load_balancing_policies.load_aware_locality"
_ROUND_ROBIN = "envoy.load_balancing_policies.round_robin"
IDENTITY_LUA = resources.files(__package__).joinpath("identity.lua").read_text(encoding="utf-8")


class ConfigError(SecureOrcaError, ValueError):
    """A combination of settings that cannot make a correct configuration."""


# ---- inputs ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Upstream:
    """One replica: loopback or other address, port, and optionally its zone (Envoy locality)."""

    host: str
    port: int
    zone: str | None = None

    def __post_init__(self) -> None:
        if not 1 <= self.port <= 65535:
            raise ConfigError(f"upstream port {self.port} is not in 1-65535")
        if self.zone is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.\-]*", self.zone):
            raise ConfigError(f"zone {self.zone!r}: use letters, digits, '.', '_' and '-'")


_UPSTREAM = re.compile(r"(?:\[(?P<ip6>[0-9A-Fa-f:.]+)\]|(?P<host>[^:@\[\]]+)):(?P<port>\d{1,5})(?:@(?P<zone>.*))?")


def parse_upstream(spec: str) -> Upstream:
    """``HOST:PORT[@ZONE]``; IPv6 addresses in brackets: ``[::1]:6443@zone-a``."""
    match = _UPSTREAM.fullmatch(spec.strip())
    if match is None:
        raise ConfigError(f"{spec!r} is not HOST:PORT[@ZONE]")
    host = match.group("ip6") or match.group("host")
    if match.group("ip6"):
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ConfigError(f"{spec!r}: {host} is not an IPv6 address") from None
    zone = match.group("zone")
    if zone == "":
        raise ConfigError(f"{spec!r}: empty zone after '@'")
    return Upstream(host, int(match.group("port")), zone)


@dataclass(frozen=True)
class Timing:
    """Periods of the ORCA-driven policies, in seconds."""

    blackout_period: float
    weight_update_period: float
    weight_expiration_period: float
    smoothing_time_constant: float
    error_utilization_penalty: float = 1.0
    utilization_variance_threshold: float = 0.1
    remote_probe_fraction: float = 0.03


# Envoy's defaults (written out explicitly, so a version bump cannot change them silently); the
# error_utilization_penalty of 1.0 is the proto's documented value, which the code does not apply by default.
PRODUCTION_TIMING = Timing(
    blackout_period=10, weight_update_period=1, weight_expiration_period=180, smoothing_time_constant=5
)
# Short periods so tests converge in seconds; 0.1 s is the smallest update period Envoy accepts.
TEST_TIMING = Timing(blackout_period=1, weight_update_period=0.1, weight_expiration_period=3, smoothing_time_constant=1)


@dataclass(frozen=True)
class Credentials:
    """Files Envoy reads: its own serving pair, the replicas' CA, the front-proxy pair, the secret file, the CA
    of client certificates (users), and the load-reader pair (option 2b)."""

    listener_cert: Path
    listener_key: Path
    upstream_ca: Path
    front_proxy_cert: Path | None = None
    front_proxy_key: Path | None = None
    secret_file: Path | None = None
    client_ca: Path | None = None
    load_reader_cert: Path | None = None
    load_reader_key: Path | None = None

    def absolute(self) -> Credentials:
        """Envoy resolves relative paths against its working directory; pin them now."""

        def pin(path: Path | None) -> Path | None:
            return None if path is None else Path(path).resolve()

        return Credentials(
            listener_cert=Path(self.listener_cert).resolve(),
            listener_key=Path(self.listener_key).resolve(),
            upstream_ca=Path(self.upstream_ca).resolve(),
            front_proxy_cert=pin(self.front_proxy_cert),
            front_proxy_key=pin(self.front_proxy_key),
            secret_file=pin(self.secret_file),
            client_ca=pin(self.client_ca),
            load_reader_cert=pin(self.load_reader_cert),
            load_reader_key=pin(self.load_reader_key),
        )


@dataclass(frozen=True)
class IdentityHeaders:
    """The replicas' requestheader flags (kube-apiserver's defaults): the names the LB removes from every client
    request and, as an authenticating front proxy, sets from the verified client certificate."""

    username: tuple[str, ...] = ("X-Remote-User",)
    group: tuple[str, ...] = ("X-Remote-Group",)
    extra_prefix: tuple[str, ...] = ("X-Remote-Extra-",)
    uid: tuple[str, ...] = ("X-Remote-Uid",)

    def check(self) -> None:
        if not self.username or not self.group:
            raise ConfigError("identity headers: give at least one username and one group header")
        for name in (*self.username, *self.group, *self.extra_prefix, *self.uid):
            if not _TOKEN.fullmatch(name):
                raise ConfigError(f"identity header {name!r} is not an HTTP header name")


@dataclass(frozen=True)
class LBConfig:
    """Everything one Envoy bootstrap depends on."""

    upstreams: tuple[Upstream, ...]
    credentials: Credentials
    option: str = "front-proxy,shared-secret"  # the library's; the CLIs default to recommended.OPTION
    policy: str = "cswrr"
    listen_host: str = "127.0.0.1"
    listen_port: int = 8443
    admin_host: str = "127.0.0.1"
    admin_port: int = 9901
    local_zone: str | None = None  # Envoy's own zone; default: the first upstream's zone
    server_name: str = "localhost"  # SNI and the DNS SAN required of the replicas' serving certificates
    timing: Timing = PRODUCTION_TIMING
    identity: IdentityHeaders = field(default_factory=IdentityHeaders)
    secret_delivery: str = "sds"
    inline_secret: str | None = None  # the secret itself, for inline delivery (files.with_inline_secret reads it)
    sds_path: Path | None = None  # where the SDS resource for the secret lives (sds delivery)
    num_retries: int = 3
    # Envoy closes (drains) its own upstream connections after this many requests, gracefully, before a
    # replica that rotates (`serve --max-requests-per-connection N`; off by default, as in kube) drops the
    # streams in flight. None: no limit on Envoy's side.
    upstream_max_requests: int | None = 500
    node_id: str = "secure-orca-lb"
    extra: dict[str, Any] = field(default_factory=dict)  # merged into the bootstrap top level (tests)
    oob_period: float | None = None  # out-of-band reports every this many seconds, no opt-in; None: in-band
    report_format: str = "TEXT"  # the format the opt-in asks for: TEXT (KEP-6315 alpha), JSON or BIN (Envoy parses all)

    @property
    def modes(self) -> frozenset[Mode]:
        return frozenset(modes_of(self.option))

    @property
    def zones(self) -> list[str]:
        """Distinct zones in order of first appearance; empty when no upstream has one."""
        return list(dict.fromkeys(u.zone for u in self.upstreams if u.zone))

    def check(self) -> None:
        """Raise ConfigError for an inconsistent combination."""
        if self.option not in OPTIONS:
            raise ConfigError(f"option {self.option!r}: choose from {', '.join(OPTIONS)}")
        if self.policy not in POLICIES:
            raise ConfigError(f"policy {self.policy!r}: choose from {', '.join(POLICIES)}")
        if self.secret_delivery not in SECRET_DELIVERIES:
            raise ConfigError(f"secret delivery {self.secret_delivery!r}: choose from {', '.join(SECRET_DELIVERIES)}")
        if not self.upstreams:
            raise ConfigError("at least one upstream is needed")
        if self.zones and any(u.zone is None for u in self.upstreams):
            raise ConfigError("give every upstream a zone, or none")
        if self.local_zone is not None and self.local_zone not in self.zones:
            raise ConfigError(f"local zone {self.local_zone!r} is not the zone of any upstream")
        if self.upstream_max_requests is not None and self.upstream_max_requests < 1:
            raise ConfigError("upstream max requests per connection must be at least 1 (or unset)")
        for port in (self.listen_port, self.admin_port):
            if not 0 <= port <= 65535:
                raise ConfigError(f"port {port} is not in 0-65535")
        if not is_loopback(self.admin_host):
            raise ConfigError(f"admin address {self.admin_host}: the admin interface must stay on loopback")
        creds = self.credentials
        if Mode.FRONT_PROXY in self.modes and (creds.front_proxy_cert is None or creds.front_proxy_key is None):
            raise ConfigError("option front-proxy needs the front-proxy client certificate and key")
        if Mode.SHARED_SECRET in self.modes and creds.secret_file is None:
            raise ConfigError("option shared-secret needs the secret file")
        if Mode.LOAD_READER in self.modes and (creds.load_reader_cert is None or creds.load_reader_key is None):
            raise ConfigError("option load-reader needs the load-reader client certificate and key")
        if self.oob_period is not None:
            if self.option not in OOB_OPTIONS:
                raise ConfigError(f"out-of-band reports are entitled by certificate: option {' or '.join(OOB_OPTIONS)}")
            if self.policy != "cswrr":
                raise ConfigError("out-of-band reports need the cswrr policy")
            if not 0.01 <= self.oob_period <= 3600:
                raise ConfigError("the out-of-band reporting period must be between 10ms and 1h")
        self.identity.check()

    @property
    def authenticates(self) -> bool:
        """Envoy acts as kube's authenticating front proxy: it verifies client certificates against the client
        CA and asserts their identity upstream, where its front-proxy certificate makes the replicas believe it."""
        return Mode.FRONT_PROXY in self.modes and self.credentials.client_ca is not None


# ---- pieces of the bootstrap -------------------------------------------------------------------------------


def duration(seconds: float) -> str:
    """Protobuf Duration in Envoy's YAML form: ``0.1s``, ``180s``."""
    return f"{seconds:g}s"


def _typed(name: str, type_name: str, **config: Any) -> dict[str, Any]:
    return {"name": name, "typed_config": {"@type": _TYPE + type_name, **config}}


def _address(host: str, port: int) -> dict[str, Any]:
    return {"socket_address": {"address": host, "port_value": port}}


def _pair(cert: Path, key: Path) -> dict[str, Any]:
    return {"certificate_chain": {"filename": str(cert)}, "private_key": {"filename": str(key)}}


def downstream_tls(config: LBConfig) -> dict[str, Any]:
    """Clients' TLS: the LB's serving pair, ALPN h2 then http/1.1. As an authenticating proxy it also requests
    (not requires) a client certificate, verified against the client CA: token and anonymous clients still
    connect, as they do to kube-apiserver; a presented certificate that does not verify fails the handshake."""
    creds = config.credentials
    common: dict[str, Any] = {
        "alpn_protocols": ["h2", "http/1.1"],
        "tls_certificates": [_pair(creds.listener_cert, creds.listener_key)],
    }
    tls: dict[str, Any] = {"common_tls_context": common}
    if config.authenticates:
        assert creds.client_ca is not None
        common["validation_context"] = {"trusted_ca": {"filename": str(creds.client_ca)}}
        tls["require_client_certificate"] = False
    return _typed("envoy.transport_sockets.tls", "extensions.transport_sockets.tls.v3.DownstreamTlsContext", **tls)


def upstream_tls(config: LBConfig) -> dict[str, Any]:
    """Replicas' TLS: verify the serving CA and the SAN, ALPN h2, the front-proxy pair when that option is on."""
    creds = config.credentials
    san_type = "IP_ADDRESS" if _is_ip(config.server_name) else "DNS"
    common: dict[str, Any] = {
        "alpn_protocols": ["h2"],
        "validation_context": {
            "trusted_ca": {"filename": str(creds.upstream_ca)},
            "match_typed_subject_alt_names": [{"san_type": san_type, "matcher": {"exact": config.server_name}}],
        },
    }
    if Mode.FRONT_PROXY in config.modes:
        assert creds.front_proxy_cert is not None and creds.front_proxy_key is not None
        common["tls_certificates"] = [_pair(creds.front_proxy_cert, creds.front_proxy_key)]
    elif Mode.LOAD_READER in config.modes:
        assert creds.load_reader_cert is not None and creds.load_reader_key is not None
        common["tls_certificates"] = [_pair(creds.load_reader_cert, creds.load_reader_key)]
    tls: dict[str, Any] = {"common_tls_context": common}
    if san_type == "DNS":
        tls["sni"] = config.server_name
    return _typed("envoy.transport_sockets.tls", "extensions.transport_sockets.tls.v3.UpstreamTlsContext", **tls)


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def cswrr_policy(timing: Timing, oob_period: float | None = None) -> dict[str, Any]:
    """client_side_weighted_round_robin with every period and the error penalty explicit; with ``oob_period``,
    weights come from one out-of-band stream per host (``enable_oob_load_report``, ``oob_reporting_period``)."""
    oob: dict[str, Any] = {}
    if oob_period is not None:
        oob = {"enable_oob_load_report": True, "oob_reporting_period": duration(oob_period)}
    return _typed(
        _CSWRR,
        "extensions.load_balancing_policies.client_side_weighted_round_robin.v3.ClientSideWeightedRoundRobin",
        blackout_period=duration(timing.blackout_period),
        weight_update_period=duration(timing.weight_update_period),
        weight_expiration_period=duration(timing.weight_expiration_period),
        error_utilization_penalty=timing.error_utilization_penalty,
        **oob,
    )


def round_robin_policy() -> dict[str, Any]:
    return _typed(_ROUND_ROBIN, "extensions.load_balancing_policies.round_robin.v3.RoundRobin")


def load_balancing_policy(config: LBConfig) -> dict[str, Any]:
    """The cluster's policy: CSWRR or round robin, wrapped in load_aware_locality when upstreams have zones."""
    endpoint = cswrr_policy(config.timing, config.oob_period) if config.policy == "cswrr" else round_robin_policy()
    if not config.zones:
        return {"policies": [{"typed_extension_config": endpoint}]}
    t = config.timing
    oob: dict[str, Any] = {}
    if config.oob_period is not None:  # the locality's utilization from the same streams as the hosts' weights
        oob = {"enable_oob_load_report": True, "oob_reporting_period": duration(config.oob_period)}
    locality = _typed(
        _LOCALITY,
        "extensions.load_balancing_policies.load_aware_locality.v3.LoadAwareLocality",
        endpoint_picking_policy={"policies": [{"typed_extension_config": endpoint}]},
        weight_update_period=duration(t.weight_update_period),
        utilization_variance_threshold=t.utilization_variance_threshold,
        smoothing_time_constant=duration(t.smoothing_time_constant),
        remote_probe_fraction=t.remote_probe_fraction,
        weight_expiration_period=duration(t.weight_expiration_period),
        **oob,
    )
    return {"policies": [{"typed_extension_config": locality}]}


def load_assignment(config: LBConfig) -> dict[str, Any]:
    """Endpoints grouped by zone (one group without a locality when no zones are given)."""
    groups: dict[str | None, list[Upstream]] = {}
    for upstream in config.upstreams:
        groups.setdefault(upstream.zone, []).append(upstream)
    endpoints = []
    for zone, members in groups.items():
        group: dict[str, Any] = {"lb_endpoints": [{"endpoint": {"address": _address(u.host, u.port)}} for u in members]}
        if zone is not None:
            group["locality"] = {"zone": zone}
        endpoints.append(group)
    return {"cluster_name": CLUSTER, "endpoints": endpoints}


def cluster(config: LBConfig) -> dict[str, Any]:
    return {
        "name": CLUSTER,
        "type": "STATIC",
        "connect_timeout": "5s",
        "load_assignment": load_assignment(config),
        "load_balancing_policy": load_balancing_policy(config),
        "transport_socket": upstream_tls(config),
        "circuit_breakers": {"thresholds": [{"priority": "DEFAULT", "max_retries": MAX_CONCURRENT_RETRIES}]},
        "typed_extension_protocol_options": {
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                "@type": _TYPE + "extensions.upstreams.http.v3.HttpProtocolOptions",
                "explicit_http_config": {"http2_protocol_options": {}},
                **(
                    {"common_http_protocol_options": {"max_requests_per_connection": config.upstream_max_requests}}
                    if config.upstream_max_requests
                    else {}
                ),
            }
        },
    }


def _secret_in_sds(config: LBConfig) -> bool:
    return Mode.SHARED_SECRET in config.modes and config.secret_delivery == "sds"


def _optin_value(config: LBConfig) -> str:
    """The opt-in the route sets: the bare one, or (inline delivery) with the secret."""
    if Mode.SHARED_SECRET not in config.modes:
        return header_value(_report_format(config))
    if config.inline_secret is None:
        raise ConfigError("secret delivery inline needs the secret (files.with_inline_secret reads it)")
    return header_value(_report_format(config), config.inline_secret)


def _report_format(config: LBConfig) -> str:
    """The format the opt-in asks for, one Envoy parses and the gateway serves (``orca.optin.SUPPORTED_FORMATS``)."""
    if config.report_format not in SUPPORTED_FORMATS:
        raise ConfigError(f"report format must be one of {', '.join(sorted(SUPPORTED_FORMATS))}")
    return config.report_format


def routes(config: LBConfig) -> list[dict[str, Any]]:
    """Two catch-all routes that differ only in what they retry: safe methods also after a reset of a request
    already sent (hypercorn drops the streams in flight when it closes a connection at its request limit);
    every other method only when the upstream provably did not process it. Both set the opt-in header and
    remove the ORCA headers. Before them, Envoy answers 404 itself to StreamCoreMetrics and to any gRPC call
    (kube-apiserver serves none to clients): forwarded, it would carry Envoy's own client certificate, which is
    what entitles the stream (tests/hostile/test_envoy_oob_path.py). The replica serves the stream only to a
    gRPC content type, so the second match holds however the path is spelled."""
    safe = {"headers": [{"name": ":method", "string_match": {"safe_regex": {"regex": "|".join(SAFE_METHODS)}}}]}
    grpc_type = {"name": "content-type", "string_match": {"prefix": "application/grpc", "ignore_case": True}}
    grpc = {"prefix": "/", "headers": [grpc_type]}
    refuse = [{"match": m, "direct_response": {"status": 404}} for m in ({"prefix": OOB_SERVICE_PREFIX}, grpc)]
    return [
        *refuse,
        _route(config, {"prefix": "/", **safe}, f"{RETRY_ON},reset"),
        _route(config, {"prefix": "/"}, RETRY_ON),
    ]


def _route(config: LBConfig, match: dict[str, Any], retry_on: str) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "match": match,
        "route": {
            "cluster": CLUSTER,
            "timeout": "60s",
            "retry_policy": {
                "retry_on": retry_on,
                "num_retries": config.num_retries,
                "retry_back_off": {"base_interval": "0.01s", "max_interval": "0.1s"},
            },
        },
        "response_headers_to_remove": list(ORCA_RESPONSE_HEADERS),
    }
    if not _secret_in_sds(config) and config.oob_period is None:  # out of band: no request opts in
        entry["request_headers_to_add"] = [
            {
                "header": {"key": OPTIN_HEADER, "value": _optin_value(config)},
                "append_action": "OVERWRITE_IF_EXISTS_OR_ADD",
            }
        ]
    return entry


def http_filters(config: LBConfig) -> list[dict[str, Any]]:
    """Remove the client's opt-in and any ORCA trailers; inject the secret (sds delivery); route."""
    mutations = _typed(
        "envoy.filters.http.header_mutation",
        "extensions.filters.http.header_mutation.v3.HeaderMutation",
        mutations={
            "request_mutations": [{"remove": OPTIN_HEADER}],
            "response_trailers_mutations": [{"remove": name} for name in ORCA_RESPONSE_HEADERS],
        },
    )
    filters = [mutations, identity_filter(config)]
    if _secret_in_sds(config):
        assert config.sds_path is not None
        generic = _typed(
            "envoy.http.injected_credentials.generic",
            "extensions.http.injected_credentials.generic.v3.Generic",
            header=OPTIN_HEADER,
            header_value_prefix=header_value(_report_format(config), ""),
            credential={"name": SECRET_NAME, "sds_config": {"path_config_source": {"path": str(config.sds_path)}}},
        )
        filters.append(
            _typed(
                "envoy.filters.http.credential_injector",
                "extensions.filters.http.credential_injector.v3.CredentialInjector",
                overwrite=True,
                allow_request_without_credential=True,  # no secret, no opt-in: reports stop, traffic flows
                credential=generic,
            )
        )
    filters.append(_typed("envoy.filters.http.router", "extensions.filters.http.router.v3.Router"))
    return filters


def _lua_strings(names: Sequence[str]) -> str:
    return ", ".join(f'"{name.lower()}"' for name in names)  # names are RFC 9110 tokens: no quoting needed


def identity_lua(config: LBConfig) -> str:
    """The Lua program of :func:`identity_filter`: a prologue from the replicas' requestheader flags, then
    ``identity.lua`` (our own, written against Envoy's documented Lua API)."""
    ids = config.identity
    prologue = (
        "-- generated by secure-orca from the replicas' requestheader flags\n"
        f"local IDENTITY_HEADERS = {{{_lua_strings((*ids.username, *ids.group, *ids.uid))}}}\n"
        f"local EXTRA_PREFIXES = {{{_lua_strings(ids.extra_prefix)}}}\n"
        f"local AUTHENTICATE = {'true' if config.authenticates else 'false'}\n"
        f'local USER_HEADER = "{ids.username[0]}"\n'
        f'local GROUP_HEADER = "{ids.group[0]}"\n'
    )
    return prologue + IDENTITY_LUA


def identity_filter(config: LBConfig) -> dict[str, Any]:
    """Remove every identity header a client sent (all names, any case, duplicates); then, as an authenticating
    front proxy, assert the verified client certificate's identity as kube-apiserver's x509 authenticator reads
    it: CN (the last one, as Go and Envoy both take it) is the user, each O a group."""
    return _typed(
        "envoy.filters.http.lua",
        "extensions.filters.http.lua.v3.Lua",
        default_source_code={"inline_string": identity_lua(config)},
    )


def listener(config: LBConfig) -> dict[str, Any]:
    hcm = _typed(
        "envoy.filters.network.http_connection_manager",
        "extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
        stat_prefix="ingress",
        codec_type="AUTO",
        route_config={
            "name": "apiserver",
            "virtual_hosts": [{"name": "apiserver", "domains": ["*"], "routes": routes(config)}],
        },
        http_filters=http_filters(config),
        # A header name with "_" can alias a dashed one in some servers (CGI-style); drop such headers.
        common_http_protocol_options={"headers_with_underscores_action": "DROP_HEADER"},
    )
    return {
        "name": "ingress",
        "address": _address(config.listen_host, config.listen_port),
        "filter_chains": [{"transport_socket": downstream_tls(config), "filters": [hcm]}],
    }


def build_bootstrap(config: LBConfig) -> dict[str, Any]:
    """The whole Envoy bootstrap as a dict."""
    config.check()
    if _secret_in_sds(config) and config.sds_path is None:
        raise ConfigError("secret delivery sds needs the path of the SDS file (sds_path; `write` sets it)")
    node: dict[str, Any] = {"id": config.node_id, "cluster": "secure-orca"}
    local_zone = config.local_zone or (config.zones[0] if config.zones else None)
    if local_zone is not None:
        node["locality"] = {"zone": local_zone}
    bootstrap: dict[str, Any] = {
        "node": node,
        "admin": {"address": _address(config.admin_host, config.admin_port)},
        "static_resources": {"listeners": [listener(config)], "clusters": [cluster(config)]},
    }
    bootstrap.update(config.extra)
    return bootstrap


def sds_resource(config: LBConfig) -> dict[str, Any]:
    """The file-based SDS resource: a generic secret that names the secret file (its content stays there)."""
    assert config.credentials.secret_file is not None
    return {
        "resources": [
            {
                "@type": _TYPE + "extensions.transport_sockets.tls.v3.Secret",
                "name": SECRET_NAME,
                "generic_secret": {"secret": {"filename": str(config.credentials.secret_file)}},
            }
        ]
    }


def render(document: Any, header: str = "") -> str:
    """A bootstrap file's text: ``header`` as YAML comment lines, then the document as JSON (valid YAML)."""
    lines = [f"# {line}".rstrip() for line in header.splitlines()]
    return "\n".join([*lines, json.dumps(document, indent=2)]) + "\n"
