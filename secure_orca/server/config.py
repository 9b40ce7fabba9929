"""The validated configuration of `serve`, built from kube-apiserver-style flags alone: it names the credential
files (``secure_orca.credentials`` reads them), reads none and opens no socket."""

from __future__ import annotations

import argparse
import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from secure_orca import pki
from secure_orca.authn.requestheader import RequestHeaderConfig
from secure_orca.authz.policy import MODES, Mode
from secure_orca.authz.streams import Limits
from secure_orca.credentials import flags
from secure_orca.credentials.loader import CredentialFiles
from secure_orca.errors import FlagError, UsageError
from secure_orca.server.authentication import AuthenticationConfig
from secure_orca.server.flags import (
    ProxyRoute,
    parse_bool,
    parse_duration,
    parse_feature_gates,
    parse_header_names,
    parse_list,
    parse_proxy,
)
from secure_orca.server.metrics import parse_address

log = logging.getLogger("secure_orca.serve")
GATE = "RequestCostAggregation"
T = TypeVar("T")


@dataclass
class ServeConfig:
    """Everything ``serve`` needs, validated; built from the flags without opening a socket."""

    host: str
    port: int
    files: CredentialFiles
    enabled: bool
    modes: frozenset[Mode]  # --endpoint-load-metrics-auth: the listed modes whose credential flags are given
    interval: float
    decimals: int
    attach: str = "every-response"
    routes: list[ProxyRoute] = field(default_factory=list)
    proxy_timeout: float = 30.0
    request_timeout: float = 60.0  # --request-timeout: every request body's deadline (kube's default 60s)
    max_requests: int = 0  # 0: never rotate (kube-apiserver has no such limit)
    goaway_chance: float = 0.0
    metrics_address: str = ""
    reload_interval: float = 1.0
    demo_work: bool = False
    notes: list[str] = field(default_factory=list)
    authentication: AuthenticationConfig = field(default_factory=AuthenticationConfig)
    audit_path: str = ""  # --audit-log-path ('-': standard out)
    audit_maxsize: int = 100  # --audit-log-maxsize, MB
    audit_maxbackup: int = 100  # --audit-log-maxbackup
    oob: OobConfig | None = None  # StreamCoreMetrics on the serving port (docs/out-of-band.md); None: off


@dataclass(frozen=True)
class OobConfig:
    """--endpoint-load-metrics-oob-*: the out-of-band stream's interval floor, its capacity and write deadline."""

    min_interval: float = 1.0
    limits: Limits = field(default_factory=Limits)
    write_deadline: float = 10.0


CERTIFICATE_MODES = frozenset({Mode.FRONT_PROXY, Mode.LOAD_READER})


def _oob(args: argparse.Namespace, enabled: bool, modes: frozenset[Mode], interval: float) -> OobConfig | None:
    """The out-of-band service's settings: on with the feature and a certificate mode, unless turned off."""
    switch = _flag(
        "--endpoint-load-metrics-oob", lambda: parse_bool(getattr(args, "endpoint_load_metrics_oob", "true"))
    )
    floor = _flag(
        "--endpoint-load-metrics-oob-min-interval",
        lambda: parse_duration(getattr(args, "endpoint_load_metrics_oob_min_interval", "1s")),
    )
    if not 0.01 <= floor <= 3600:
        raise UsageError("--endpoint-load-metrics-oob-min-interval: must be between 10ms and 1h")
    default = Limits()
    total = getattr(args, "endpoint_load_metrics_oob_max_streams", default.total)
    share = getattr(args, "endpoint_load_metrics_oob_front_proxy_streams", None)
    limits = Limits(
        total=total,
        per_connection=getattr(args, "endpoint_load_metrics_oob_max_streams_per_connection", default.per_connection),
        per_identity=getattr(args, "endpoint_load_metrics_oob_max_streams_per_identity", default.per_identity),
        front_proxy_share=total // 4 if share is None else share,  # default: a quarter, 16 of 64
    )
    problems = limits.problems()
    if problems:
        raise UsageError("; ".join(f"--endpoint-load-metrics-oob-{problem}" for problem in problems))
    deadline = _flag(
        "--endpoint-load-metrics-oob-write-deadline",
        lambda: parse_duration(getattr(args, "endpoint_load_metrics_oob_write_deadline", "10s")),
    )
    if not 0.1 <= deadline <= 3600:
        raise UsageError("--endpoint-load-metrics-oob-write-deadline: must be between 100ms and 1h")
    if not (switch and enabled and modes & CERTIFICATE_MODES):
        return None
    return OobConfig(max(floor, interval), limits, deadline)  # never faster than the sampler


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


def _header_lists(args: argparse.Namespace) -> RequestHeaderConfig:
    """The --requestheader-* header lists, validated as kube-apiserver validates them."""
    lists = {}
    for flag in ("username-headers", "uid-headers", "group-headers", "extra-headers-prefix"):
        text = getattr(args, "requestheader_" + flag.replace("-", "_"))
        lists[flag] = _flag(f"--requestheader-{flag}", functools.partial(parse_header_names, text))
    uids = lists["uid-headers"]
    if uids and "x-remote-uid" not in (name.lower() for name in uids):
        raise UsageError(
            "--requestheader-uid-headers: is set without specifying the standard X-Remote-Uid header "
            "(API aggregation will not work)"
        )
    return RequestHeaderConfig(lists["username-headers"], uids, lists["group-headers"], lists["extra-headers-prefix"])


def build_config(args: argparse.Namespace) -> ServeConfig:
    """Validate the flags; raise UsageError naming the flag at fault. No credential file is read here."""
    notes: list[str] = []
    if args.tls_cert_file is None and args.tls_private_key_file is None:
        _use_dev_pki(args, notes)
    cert_file: Path | None = args.tls_cert_file
    key_file: Path | None = args.tls_private_key_file
    if cert_file is None or key_file is None:
        raise UsageError("--tls-cert-file and --tls-private-key-file must be given together")
    if not 0 <= args.secure_port <= 65535:
        raise UsageError(f"--secure-port: {args.secure_port} is not a port number (0-65535)")
    if not 0 <= args.endpoint_load_metrics_decimals <= 12:
        raise UsageError("--endpoint-load-metrics-decimals: must be between 0 and 12")
    if args.max_requests_per_connection < 0:
        raise UsageError("--max-requests-per-connection: must be 0 (never rotate) or more")
    gates = _flag("--feature-gates", lambda: parse_feature_gates(args.feature_gates))
    interval = _flag("--endpoint-load-metrics-interval", lambda: parse_duration(args.endpoint_load_metrics_interval))
    if not 0.001 <= interval <= 60:
        raise UsageError("--endpoint-load-metrics-interval: must be between 1ms and 60s")
    routes = [_flag("--proxy", functools.partial(parse_proxy, spec)) for spec in args.proxy]
    proxy_timeout = _flag("--proxy-timeout", lambda: parse_duration(args.proxy_timeout))
    if not 0.01 <= proxy_timeout <= 3600:
        raise UsageError("--proxy-timeout: must be between 10ms and 1h")
    if not 0.0 <= args.goaway_chance <= 0.02:
        raise UsageError(f"--goaway-chance: {args.goaway_chance} is not between 0 and 0.02")
    request_timeout = _flag("--request-timeout", lambda: parse_duration(args.request_timeout))
    if not 0.01 <= request_timeout <= 3600:
        raise UsageError("--request-timeout: must be between 10ms and 1h")
    reload_interval = _flag("--credential-reload-interval", lambda: parse_duration(args.credential_reload_interval))
    if not 0.05 <= reload_interval <= 3600:
        raise UsageError("--credential-reload-interval: must be between 50ms and 1h")
    if args.metrics_bind_address:
        _flag("--metrics-bind-address", lambda: parse_address(args.metrics_bind_address))
    if args.requestheader_allowed_names and args.requestheader_allowed_names_file:
        raise UsageError("--requestheader-allowed-names-file: give either it or --requestheader-allowed-names")
    for flag in ("maxsize", "maxbackup"):
        if getattr(args, f"audit_log_{flag}", 0) < 0:
            raise UsageError(f"--audit-log-{flag} {getattr(args, f'audit_log_{flag}')} can't be a negative number")
    listed = parse_list(args.endpoint_load_metrics_auth)
    unknown = [m for m in listed if m not in MODES]
    if unknown or not listed:
        raise UsageError(
            f"--endpoint-load-metrics-auth: unknown mode {unknown[0] if unknown else '(empty)'}; "
            f"choose from {', '.join(MODES)}"
        )
    modes = tuple(Mode(m) for m in listed)
    enabled = bool(args.enable_endpoint_load_metrics)
    if enabled and not gates.get(GATE, False):
        raise UsageError(f"--enable-endpoint-load-metrics: requires --feature-gates {GATE}=true")
    if (args.proxy_client_cert_file is None) != (args.proxy_client_key_file is None):
        raise UsageError(f"{flags.PROXY_CERT} and {flags.PROXY_KEY} must be given together")
    usable = {
        Mode.FRONT_PROXY: args.requestheader_client_ca_file is not None,
        Mode.SHARED_SECRET: args.endpoint_load_metrics_secret_file is not None,
        Mode.HEADER_ONLY: True,
        Mode.LOAD_READER: args.endpoint_load_metrics_client_ca_file is not None,
    }
    if enabled:
        if not any(usable[m] for m in modes):
            raise UsageError(
                f"--endpoint-load-metrics-auth: no listed mode is usable: front-proxy needs {flags.REQUESTHEADER_CA}"
                f", shared-secret needs {flags.SECRET}, load-reader needs {flags.LOAD_READER_CA}"
            )
        notes += [f"auth mode {m} is listed but has no material; it grants nothing" for m in modes if not usable[m]]
        if Mode.HEADER_ONLY in modes:
            notes.append(
                "WARNING: --endpoint-load-metrics-auth includes header-only: any client that reaches this "
                "server can read its load (KEP-6315 option 1)"
            )
    header_names = _header_lists(args)
    authentication = AuthenticationConfig(
        requestheader=header_names if args.requestheader_client_ca_file else None,
        header_names=header_names,
        client_certs=args.client_ca_file is not None,
        anonymous=_flag("--anonymous-auth", lambda: parse_bool(args.anonymous_auth)),
        proxy_without_user_is_anonymous=args.requestheader_missing_user == "anonymous",
    )
    files = CredentialFiles(
        cert=cert_file,
        key=key_file,
        client_ca=args.client_ca_file,
        requestheader_ca=args.requestheader_client_ca_file,
        allowed_names_file=args.requestheader_allowed_names_file,
        secret_file=args.endpoint_load_metrics_secret_file if Mode.SHARED_SECRET in modes else None,
        load_reader_ca=args.endpoint_load_metrics_client_ca_file if Mode.LOAD_READER in modes else None,
        token_file=args.token_auth_file,
        proxy_cert=args.proxy_client_cert_file,
        proxy_key=args.proxy_client_key_file,
        allowed_names=tuple(parse_list(args.requestheader_allowed_names)),
        load_reader_names=tuple(parse_list(args.endpoint_load_metrics_allowed_names)),
    )
    return ServeConfig(
        host=args.bind_address,
        port=args.secure_port,
        files=files,
        enabled=enabled,
        modes=frozenset(m for m in modes if usable[m]),
        interval=interval,
        decimals=args.endpoint_load_metrics_decimals,
        attach=args.endpoint_load_metrics_attach,
        routes=routes,
        proxy_timeout=proxy_timeout,
        request_timeout=request_timeout,
        max_requests=args.max_requests_per_connection,
        goaway_chance=args.goaway_chance,
        metrics_address=args.metrics_bind_address,
        reload_interval=reload_interval,
        demo_work=bool(getattr(args, "demo_work", False)),
        notes=notes,
        authentication=authentication,
        oob=_oob(args, enabled, frozenset(m for m in modes if usable[m]), interval),
        audit_path=getattr(args, "audit_log_path", ""),
        audit_maxsize=getattr(args, "audit_log_maxsize", 100),
        audit_maxbackup=getattr(args, "audit_log_maxbackup", 100),
    )
