"""Write a development PKI: serving CA and certificate, client CA and a user, front-proxy CA and its CN-only
client certificate, and a shared secret (keys and secret mode 0600). Never overwrites without --force.

Also a token file for --token-auth-file (tokens.csv: a random token for jane, mode 0600) and a kubeconfig
(mode 0600) with the contexts developer (certificate; the current one), jane (token) and intruder (a token the
server does not know), for `kubectl --kubeconfig certs/kubeconfig auth whoami`."""

from __future__ import annotations

import argparse
from pathlib import Path

from secure_orca.pki import DEFAULT_SERVER, FRONT_PROXY_CN, generate, write_kubeconfig, write_tokens

HELP = "write a development PKI (server, client CA, front-proxy CA) and a shared secret"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dir", type=Path, default=Path("certs"), help="output directory (default: certs)")
    parser.add_argument("--force", action="store_true", help="replace an existing PKI in that directory")
    parser.add_argument("--server", default=DEFAULT_SERVER, help=f"the kubeconfig's server (default {DEFAULT_SERVER})")


def run(args: argparse.Namespace) -> int:
    from secure_orca.errors import UsageError

    try:
        pki = generate(args.dir, force=args.force)
    except (FileExistsError, OSError) as error:
        raise UsageError(str(error)) from None
    try:
        tokens, token = write_tokens(args.dir)
        extra = [tokens, write_kubeconfig(args.dir, args.server, token)]
    except OSError as error:
        raise UsageError(str(error)) from None
    for path in [*pki.all_paths(), *extra]:
        print(path)
    print(f"front-proxy client certificate CN={FRONT_PROXY_CN}; keys, secret, tokens and kubeconfig are mode 0600")
    return 0
