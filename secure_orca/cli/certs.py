"""Write the development PKI: serving CA and certificate, a client CA and a user, the front-proxy CA and its
CN-only client certificate, the load-reader CA and its CN-only client certificate (option 2b), a shared secret,
a token file (tokens.csv, a random token for jane) and a kubeconfig with the contexts developer (certificate; the
current one), jane (token) and intruder (a token the server does not know), for
`kubectl --kubeconfig certs/kubeconfig auth whoami`. Keys, secret, tokens and kubeconfig are mode 0600.

The same writer as `serve` without TLS flags: a second run fills in what is missing and overwrites nothing;
--force replaces every file."""

from __future__ import annotations

import argparse
from pathlib import Path

from secure_orca import pki
from secure_orca.credentials import devpki
from secure_orca.errors import UsageError

HELP = "write (or complete) the development PKI, token file and kubeconfig; print its client identities"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dir", type=Path, default=Path("certs"), help="output directory (default: certs)")
    parser.add_argument("--force", action="store_true", help="replace every file of the PKI in that directory")
    a = parser.add_argument
    a("--server", default=pki.DEFAULT_SERVER, help=f"the kubeconfig's server (default {pki.DEFAULT_SERVER})")


def identities(dev: pki.DevPKI) -> list[str]:
    """One line per client identity of the development PKI: its name (the certificate's CN), files and use."""
    lines = []
    for who in pki.CLIENT_IDENTITIES:
        where = f"{dev.cert(who.role)} (CN={who.name}, from {who.issuer})" if who.role else str(dev.root / who.issuer)
        lines.append(f"  {who.name}: {where}: {who.use}")
    return lines


def run(args: argparse.Namespace) -> int:
    try:
        written = devpki.ensure(args.dir, args.server, force=args.force)
    except (FileExistsError, OSError, ValueError) as error:
        raise UsageError(f"--dir: {error}") from None
    for path in written:
        print(path)
    if not written:
        print(f"{args.dir}/ already holds the whole development PKI; nothing written (--force replaces it)")
    print("client identities (keys, secret, tokens and kubeconfig are mode 0600):")
    print("\n".join(identities(pki.DevPKI(args.dir))))
    return 0
