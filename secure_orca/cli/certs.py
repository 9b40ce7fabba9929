"""Write a development PKI: serving CA and certificate, client CA and a user, front-proxy CA and its CN-only
client certificate, and a shared secret (keys and secret mode 0600). Never overwrites without --force."""

from __future__ import annotations

import argparse
from pathlib import Path

from secure_orca.pki import FRONT_PROXY_CN, generate

HELP = "write a development PKI (server, client CA, front-proxy CA) and a shared secret"

def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dir", type=Path, default=Path("certs"), help="output directory (default: certs)")
    parser.add_argument("--force", action="store_true", help="replace an existing PKI in that directory")

def run(args: argparse.Namespace) -> int:
    from secure_orca.errors import UsageError

    try:
        pki = generate(args.dir, force=args.force)
    except (FileExistsError, OSError) as error:
        raise UsageError(str(error)) from None
    for path in pki.all_paths():
        print(path)
    print(f"front-proxy client certificate CN={FRONT_PROXY_CN}; keys and secret are mode 0600")
    return 0
