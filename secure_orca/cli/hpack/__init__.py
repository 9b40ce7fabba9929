"""HPACK cost of ORCA load reports on HTTP/2 responses.

model    replay kube-apiserver-like response headers plus the report through hpack.Encoder in virtual
         time, for a grid of per-connection rates, sampling intervals and precisions, and for each
         mitigation; attribute every byte with the HPACK walker (no network, deterministic per --seed).
measure  open real HTTP/2 TLS connections to a running server, with the load balancer's credentials and
         without the opt-in, at each --rate per connection; attribute every received header block with
         the walker and show the model for the same rate beside it. The secret is never printed.
"""

from __future__ import annotations

import argparse

from secure_orca.cli.hpack import measure, model
from secure_orca.errors import UsageError

HELP = "measure (on the wire) and model the HPACK cost of ORCA headers"
COMMANDS = {"model": model, "measure": measure}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Subcommands of ``secure-orca hpack``: one module each."""
    sub = parser.add_subparsers(dest="hpack_command", metavar="SUBCOMMAND", required=True)
    for name, command in COMMANDS.items():
        command.add_arguments(sub.add_parser(name, help=command.HELP, description=__doc__))


def run(args: argparse.Namespace) -> int:
    """Dispatch ``secure-orca hpack SUBCOMMAND``."""
    command = COMMANDS.get(args.hpack_command)
    if command is None:
        raise UsageError(f"unknown subcommand {args.hpack_command!r}")
    return command.run(args)
