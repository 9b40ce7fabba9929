"""Authentication (kube's DelegatingAuthenticationOptions and BuiltInAuthenticationOptions): client
certificates (--client-ca-file), the front proxy (--requestheader-*), static tokens and anonymous requests."""

from __future__ import annotations

import argparse
import functools
from dataclasses import dataclass, field
from pathlib import Path

from secure_orca import credential_flags as flags
from secure_orca.authn.requestheader import RequestHeaderConfig
from secure_orca.pki import FRONT_PROXY_CN, DevPKI
from secure_orca.server.authentication import AuthenticationConfig
from secure_orca.server.flags import parse_bool, parse_header_names, parse_list
from secure_orca.server.options.common import problem, value

HEADER_LISTS = ("username-headers", "uid-headers", "group-headers", "extra-headers-prefix")


@dataclass(frozen=True)
class AuthenticationFiles:
    """The credential files authentication reads, and the allowed names given inline."""

    client_ca: Path | None = None
    requestheader_ca: Path | None = None
    allowed_names: tuple[str, ...] = ()  # --requestheader-allowed-names
    allowed_names_file: Path | None = None
    token_file: Path | None = None


@dataclass(frozen=True)
class Authentication:
    """The authenticators (what the ASGI layer runs) and the files they trust."""

    authenticators: AuthenticationConfig = field(default_factory=AuthenticationConfig)
    files: AuthenticationFiles = field(default_factory=AuthenticationFiles)


def add_flags(parser: argparse.ArgumentParser) -> None:
    a = parser.add_argument
    a(flags.CLIENT_CA, type=Path, help="CA bundle for ordinary client certificates (never grants reports)")
    a(flags.REQUESTHEADER_CA, type=Path, help="CA bundle that signs front-proxy client certificates")
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


def _lists(args: argparse.Namespace) -> dict[str, str]:
    return {flag: getattr(args, "requestheader_" + flag.replace("-", "_")) for flag in HEADER_LISTS}


def validate(args: argparse.Namespace) -> list[str]:
    """As kube-apiserver validates these flags."""
    out = []
    for flag, text in _lists(args).items():
        out += problem(f"--requestheader-{flag}", functools.partial(parse_header_names, text))
    if not out:
        uids = parse_header_names(args.requestheader_uid_headers)
        if uids and "x-remote-uid" not in (name.lower() for name in uids):
            out.append(
                "--requestheader-uid-headers: is set without specifying the standard X-Remote-Uid header "
                "(API aggregation will not work)"
            )
    if args.requestheader_allowed_names and args.requestheader_allowed_names_file:
        out.append(f"{flags.ALLOWED_NAMES_FILE}: give either it or {flags.ALLOWED_NAMES}")
    out += problem("--anonymous-auth", lambda: parse_bool(args.anonymous_auth))
    return out


def to_config(args: argparse.Namespace, dev: DevPKI | None) -> Authentication:
    """The authenticators; with the development PKI, its client CA, front-proxy CA (allowing its one front-proxy
    CN) and token file fill in whatever flag was not given."""
    requestheader_ca = args.requestheader_client_ca_file
    names = tuple(parse_list(args.requestheader_allowed_names))
    files = AuthenticationFiles(
        client_ca=args.client_ca_file,
        requestheader_ca=requestheader_ca,
        allowed_names=names,
        allowed_names_file=args.requestheader_allowed_names_file,
        token_file=args.token_auth_file,
    )
    if dev is not None:
        files = AuthenticationFiles(
            client_ca=files.client_ca or dev.cert("client_ca"),
            requestheader_ca=requestheader_ca or dev.cert("front_proxy_ca"),
            allowed_names=names or (() if files.allowed_names_file else (FRONT_PROXY_CN,)),
            allowed_names_file=files.allowed_names_file,
            token_file=files.token_file or dev.tokens,
        )
    lists = {flag: parse_header_names(text) for flag, text in _lists(args).items()}
    headers = RequestHeaderConfig(
        lists["username-headers"], lists["uid-headers"], lists["group-headers"], lists["extra-headers-prefix"]
    )
    authenticators = AuthenticationConfig(
        requestheader=headers if files.requestheader_ca else None,
        header_names=headers,
        client_certs=files.client_ca is not None,
        anonymous=value("--anonymous-auth", lambda: parse_bool(args.anonymous_auth)),
        proxy_without_user_is_anonymous=args.requestheader_missing_user == "anonymous",
    )
    return Authentication(authenticators, files)
