"""Write an Envoy bootstrap (JSON, which is valid YAML) that load-balances over secure-orca (or kube-apiserver)
replicas using their ORCA load reports, for one security option of KEP-6315:

  front-proxy                 present the front-proxy client certificate to the replicas
  shared-secret               send the secret in the opt-in header (endpoint-load-metrics-request)
  front-proxy,shared-secret   both
  header-only                 the bare opt-in (replicas must accept header-only)
  load-reader                 present the load-reader certificate (option 2b, the default, as recommended by
                              the evaluation): load reports, no identity

Every option removes the identity headers clients send (X-Remote-User, X-Remote-Group, X-Remote-Uid,
X-Remote-Extra-*, in any letter case). With front-proxy, Envoy is kube's authenticating front proxy: it requests
a client certificate (verified against --client-ca-file; tokens and anonymous clients still connect) and sends
its CN as X-Remote-User and each O as X-Remote-Group. Tokens pass upstream in Authorization, unchanged.

--out-of-band PERIOD (front-proxy or load-reader, cswrr): no opt-in at all; Envoy opens one StreamCoreMetrics
stream per replica with the same client certificate and weighs hosts by the streamed reports (Envoy >= 1.40).

Clients' opt-in headers are replaced, ORCA response headers are removed, streams refused during connection
rotation are retried, the admin interface listens on loopback only. Replicas with zones (HOST:PORT@ZONE) are
balanced by load_aware_locality around the chosen policy. With no certificate flags it uses the development
PKI in certs/. For the shared-secret option the secret stays in its file by default (file-based SDS, written
next to --output); --secret-inline puts it in the bootstrap, which is then written mode 0600.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from secure_orca import recommended
from secure_orca.envoy import bootstrap as envoy
from secure_orca.envoy import files
from secure_orca.errors import FlagError, UsageError
from secure_orca.kep_options import Mode, modes_of
from secure_orca.pki import DevPKI
from secure_orca.server.flags import parse_duration, parse_list

HELP = "write (and validate) an Envoy bootstrap for ORCA-weighted load balancing over replicas"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    a = parser.add_argument
    a("--upstream", action="append", default=[], metavar="HOST:PORT[@ZONE]", help="a replica (repeatable)")
    a(
        "--option",
        default=recommended.OPTION,
        help=f"one of {', '.join(envoy.OPTIONS)} (default {recommended.OPTION}, the recommended 2b)",
    )
    a("--policy", default="cswrr", choices=envoy.POLICIES, help="cswrr (ORCA weights, default) or round-robin")
    a("--local-zone", help="Envoy's own zone (default: the first upstream's zone)")
    a("--listen", default="127.0.0.1:8443", metavar="HOST:PORT", help="client listener (default 127.0.0.1:8443)")
    a("--admin-port", type=int, default=9901, help="admin port on 127.0.0.1 (default 9901)")
    a("--server-name", default="localhost", help="SNI and SAN required of the replicas (default localhost)")
    a(
        "--timing",
        choices=("production", "test"),
        default="production",
        help="production: Envoy's default periods (blackout 10s, update 1s, expiry 180s); test: short ones",
    )
    a("--certs-dir", type=Path, default=Path("certs"), help="development PKI for the defaults below")
    a("--tls-cert-file", type=Path, help="the listener's serving certificate (default: dev server cert)")
    a("--tls-private-key-file", type=Path, help="its key")
    a("--upstream-ca-file", type=Path, help="CA that signs the replicas' serving certificates (default: dev CA)")
    a("--front-proxy-cert-file", type=Path, help="front-proxy client certificate (default: dev front-proxy-client)")
    a("--front-proxy-key-file", type=Path, help="its key")
    a("--secret-file", type=Path, help="the one shared secret (default: the dev secret file)")
    a("--client-ca-file", type=Path, help="CA of client (user) certificates (default: the dev client CA)")
    a("--no-client-certificates", action="store_true", help="front-proxy: do not request client certificates")
    a("--load-reader-cert-file", type=Path, help="load-reader client certificate (default: dev load-reader-client)")
    a("--load-reader-key-file", type=Path, help="its key")
    a("--requestheader-username-headers", default="X-Remote-User", help="the replicas' value (default X-Remote-User)")
    a("--requestheader-group-headers", default="X-Remote-Group", help="the replicas' value (default X-Remote-Group)")
    a("--requestheader-extra-headers-prefix", default="X-Remote-Extra-", help="the replicas' value")
    a("--requestheader-uid-headers", default="X-Remote-Uid", help="the replicas' value (default X-Remote-Uid)")
    a(
        "--out-of-band",
        metavar="PERIOD",
        help="CSWRR reads load out of band: one StreamCoreMetrics stream per replica every PERIOD (e.g. 1s), "
        "entitled by the client certificate (--option front-proxy or load-reader); no request carries an opt-in",
    )
    a("--secret-inline", action="store_true", help="put the secret in the bootstrap (written mode 0600)")
    a("--output", "-o", type=Path, help="write here (default: stdout; sds delivery needs a file)")
    a("--validate", action="store_true", help="run `envoy --mode validate` on the written file")


def _host_port(spec: str, flag: str) -> tuple[str, int]:
    try:
        upstream = envoy.parse_upstream(spec)
    except envoy.ConfigError as error:
        raise UsageError(f"{flag}: {error}") from None
    if upstream.zone is not None:
        raise UsageError(f"{flag}: {spec!r} takes no zone")
    return upstream.host, upstream.port


def _credentials(args: argparse.Namespace) -> envoy.Credentials:
    dev = files.dev_credentials(DevPKI(args.certs_dir))
    chosen = envoy.Credentials(
        listener_cert=args.tls_cert_file or dev.listener_cert,
        listener_key=args.tls_private_key_file or dev.listener_key,
        upstream_ca=args.upstream_ca_file or dev.upstream_ca,
        front_proxy_cert=args.front_proxy_cert_file or dev.front_proxy_cert,
        front_proxy_key=args.front_proxy_key_file or dev.front_proxy_key,
        secret_file=args.secret_file or dev.secret_file,
        client_ca=None if args.no_client_certificates else args.client_ca_file or dev.client_ca,
        load_reader_cert=args.load_reader_cert_file or dev.load_reader_cert,
        load_reader_key=args.load_reader_key_file or dev.load_reader_key,
    )
    needed: dict[str, Path | None] = {
        "--tls-cert-file": chosen.listener_cert,
        "--tls-private-key-file": chosen.listener_key,
        "--upstream-ca-file": chosen.upstream_ca,
    }
    modes = modes_of(args.option)
    if Mode.FRONT_PROXY in modes:
        needed |= {"--front-proxy-cert-file": chosen.front_proxy_cert, "--front-proxy-key-file": chosen.front_proxy_key}
    if Mode.SHARED_SECRET in modes:
        needed["--secret-file"] = chosen.secret_file
    if Mode.FRONT_PROXY in modes and not args.no_client_certificates:
        needed["--client-ca-file"] = chosen.client_ca
    if Mode.LOAD_READER in modes:
        needed |= {"--load-reader-cert-file": chosen.load_reader_cert, "--load-reader-key-file": chosen.load_reader_key}
    for flag, path in needed.items():
        if path is None or not Path(path).is_file():
            raise UsageError(f"{flag}: {path} does not exist (run `secure-orca certs` for a development PKI)")
    return chosen


def build(args: argparse.Namespace) -> envoy.LBConfig:
    """The LBConfig the flags describe; UsageError naming the flag at fault."""
    if not args.upstream:
        raise UsageError("--upstream: give at least one replica, HOST:PORT[@ZONE]")
    if args.option not in envoy.OPTIONS:
        raise UsageError(f"--option: {args.option!r} is not one of {', '.join(envoy.OPTIONS)}")
    try:
        upstreams = tuple(envoy.parse_upstream(spec) for spec in args.upstream)
    except envoy.ConfigError as error:
        raise UsageError(f"--upstream: {error}") from None
    host, port = _host_port(args.listen, "--listen")
    oob_period = None
    if getattr(args, "out_of_band", None):
        try:
            oob_period = parse_duration(args.out_of_band)
        except FlagError as error:
            raise UsageError(f"--out-of-band: {error}") from None
    config = envoy.LBConfig(
        oob_period=oob_period,
        upstreams=upstreams,
        credentials=_credentials(args),
        option=args.option,
        policy=args.policy,
        listen_host=host,
        listen_port=port,
        admin_port=args.admin_port,
        local_zone=args.local_zone,
        server_name=args.server_name,
        timing=envoy.TEST_TIMING if args.timing == "test" else envoy.PRODUCTION_TIMING,
        secret_delivery="inline" if args.secret_inline else "sds",
        identity=envoy.IdentityHeaders(
            username=tuple(parse_list(args.requestheader_username_headers)),
            group=tuple(parse_list(args.requestheader_group_headers)),
            extra_prefix=tuple(parse_list(args.requestheader_extra_headers_prefix)),
            uid=tuple(parse_list(args.requestheader_uid_headers)),
        ),
    )
    try:
        config.check()
        config = files.with_inline_secret(config)
    except envoy.ConfigError as error:
        raise UsageError(str(error)) from None
    if Mode.SHARED_SECRET in config.modes and not args.secret_inline and args.output is None:
        raise UsageError(
            "--output: the shared-secret option writes an SDS file next to the bootstrap; "
            "give --output FILE (or --secret-inline)"
        )
    return config


def run(args: argparse.Namespace) -> int:
    config = build(args)
    if args.output is None:
        if args.validate:
            raise UsageError("--validate: needs --output FILE")
        try:
            sys.stdout.write(envoy.render(envoy.build_bootstrap(config)))
        except envoy.ConfigError as error:
            raise UsageError(str(error)) from None
        return 0
    try:
        written = files.write(config, args.output)
    except envoy.ConfigError as error:
        raise UsageError(str(error)) from None
    except OSError as error:
        raise UsageError(f"--output: cannot write {args.output}: {error.strerror}") from None
    for path in written:
        print(path)
    if args.validate:
        ok, output = files.validate(args.output)
        if not ok:
            print(output, file=sys.stderr)
            raise UsageError(f"--validate: envoy rejected {args.output}")
        print(f"{args.output}: envoy --mode validate OK")
    return 0
