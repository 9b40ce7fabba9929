"""The validated configuration of `serve`, built from kube-apiserver-style flags; reads the credential files
it names, opens no socket."""

from __future__ import annotations

import argparse
import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from secure_orca import pki
from secure_orca.authn import tokenfile
from secure_orca.authn.requestheader import RequestHeaderConfig
from secure_orca.authn.tokenfile import TokenFile
from secure_orca.authz.frontproxy import FrontProxyVerifier, shares_ca
from secure_orca.authz.policy import MODES, Policy
from secure_orca.authz.secrets import SecretSet
from secure_orca.authz.trust import check_key_pair, load_cert_bundle, load_secrets, read_private_file
from secure_orca.errors import CredentialError, FlagError, UsageError
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
from secure_orca.server.reload import TrustFiles, read_allowed_names

log = logging.getLogger("secure_orca.serve")
GATE = "RequestCostAggregation"
T = TypeVar("T")




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
    reader_verifier: FrontProxyVerifier | None = None  # --endpoint-load-metrics-client-ca-file (load-reader)
    attach: str = "every-response"
    routes: list[ProxyRoute] = field(default_factory=list)
    proxy_timeout: float = 30.0
    max_requests: int = 0  # 0: never rotate (kube-apiserver has no such limit)
    goaway_chance: float = 0.0
    metrics_address: str = ""
    reload_interval: float = 1.0
    demo_work: bool = False
    notes: list[str] = field(default_factory=list)
    authentication: AuthenticationConfig = field(default_factory=AuthenticationConfig)
    client_verifier: FrontProxyVerifier | None = None  # --client-ca-file, for the x509 authenticator
    proxy_client: tuple[Path, Path] | None = None  # --proxy-client-cert-file and --proxy-client-key-file


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
    return RequestHeaderConfig(
        lists["username-headers"], uids, lists["group-headers"], lists["extra-headers-prefix"]
    )


def _proxy_client(args: argparse.Namespace) -> tuple[Path, Path] | None:
    cert, key = args.proxy_client_cert_file, args.proxy_client_key_file
    if cert is None and key is None:
        return None
    if cert is None or key is None:
        raise UsageError("--proxy-client-cert-file and --proxy-client-key-file must be given together")
    try:
        check_key_pair(cert, key, "--proxy-client-cert-file", "--proxy-client-key-file")
    except CredentialError as error:
        raise UsageError(str(error)) from None
    return cert, key


def _tokens(path: Path | None) -> TokenFile | None:
    if path is None:
        return None
    try:
        return TokenFile(tokenfile.parse(read_private_file(path, tokenfile.FLAG), path))
    except CredentialError as error:
        raise UsageError(str(error)) from None


def build_config(args: argparse.Namespace) -> ServeConfig:
    """Validate the flags and read the credential files; raise UsageError naming the flag at fault."""
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
        check_key_pair(cert_file, key_file)
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
    reader_names = parse_list(args.endpoint_load_metrics_allowed_names)
    try:
        reader_cas = (
            load_cert_bundle(args.endpoint_load_metrics_client_ca_file, "--endpoint-load-metrics-client-ca-file")
            if args.endpoint_load_metrics_client_ca_file and "load-reader" in modes
            else []
        )
    except CredentialError as error:
        raise UsageError(str(error)) from None
    if shares_ca(client_cas + fp_cas, reader_cas) and not reader_names:
        raise UsageError(
            "--endpoint-load-metrics-allowed-names: must not be empty when --endpoint-load-metrics-client-ca-file "
            "shares a certificate with --client-ca-file or --requestheader-client-ca-file"
        )
    reader_verifier = FrontProxyVerifier(reader_cas, reader_names) if reader_cas else None
    if shares_ca(client_cas, fp_cas) and not allowed:
        raise UsageError(
            "--requestheader-allowed-names: must not be empty when --client-ca-file and "
            "--requestheader-client-ca-file share a certificate (any client certificate could act as the proxy)"
        )
    verifier = FrontProxyVerifier(fp_cas, allowed) if fp_cas else None
    header_names = _header_lists(args)
    authentication = AuthenticationConfig(
        requestheader=header_names if verifier is not None else None,
        header_names=header_names,
        client_certs=bool(client_cas),
        tokens=_tokens(args.token_auth_file),
        anonymous=_flag("--anonymous-auth", lambda: parse_bool(args.anonymous_auth)),
        proxy_without_user_is_anonymous=args.requestheader_missing_user == "anonymous",
    )
    proxy_client = _proxy_client(args)
    usable = {
        "front-proxy": verifier is not None,
        "shared-secret": bool(secrets),
        "header-only": True,
        "load-reader": reader_verifier is not None,
    }
    if enabled:
        if not any(usable[m] for m in modes):
            raise UsageError(
                "--endpoint-load-metrics-auth: no listed mode is usable: front-proxy needs "
                "--requestheader-client-ca-file, shared-secret needs --endpoint-load-metrics-secret-file, "
                "load-reader needs --endpoint-load-metrics-client-ca-file"
            )
        notes += [f"auth mode {m} is listed but has no material; it grants nothing" for m in modes if not usable[m]]
        if "header-only" in modes:
            notes.append(
                "WARNING: --endpoint-load-metrics-auth includes header-only: any client that reaches this "
                "server can read its load (KEP-6315 option 1)"
            )
    files = TrustFiles(
        cert=cert_file,
        key=key_file,
        client_ca=args.client_ca_file,
        requestheader_ca=args.requestheader_client_ca_file,
        allowed_names_file=args.requestheader_allowed_names_file,
        secret_file=args.endpoint_load_metrics_secret_file,
        allowed_names=allowed,
        load_reader_ca=args.endpoint_load_metrics_client_ca_file if reader_verifier else None,
        load_reader_names=reader_names,
    )
    return ServeConfig(
        host=args.bind_address,
        port=args.secure_port,
        files=files,
        enabled=enabled,
        policy=Policy(frozenset(m for m in modes if usable[m]), SecretSet(secrets) if secrets else None),
        verifier=verifier,
        reader_verifier=reader_verifier,
        interval=interval,
        decimals=args.endpoint_load_metrics_decimals,
        attach=args.endpoint_load_metrics_attach,
        routes=routes,
        proxy_timeout=proxy_timeout,
        max_requests=args.max_requests_per_connection,
        goaway_chance=args.goaway_chance,
        metrics_address=args.metrics_bind_address,
        reload_interval=reload_interval,
        demo_work=bool(getattr(args, "demo_work", False)),
        notes=notes,
        authentication=authentication,
        client_verifier=FrontProxyVerifier(client_cas) if client_cas else None,
        proxy_client=proxy_client,
    )








