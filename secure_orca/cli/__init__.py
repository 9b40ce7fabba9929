"""The ``secure-orca`` entry point: one subcommand per tool module.

Each module listed in COMMANDS provides ``HELP`` (one line), ``add_arguments(parser)`` and ``run(args) -> int``.
Bad input is reported as one line on stderr with exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from secure_orca.errors import SecureOrcaError

COMMANDS: dict[str, str] = {
    "evaluate": "secure_orca.cli.evaluate",
    "serve": "secure_orca.cli.serve",
    "certs": "secure_orca.cli.certs",
    "probe": "secure_orca.cli.probe",
    "envoy-config": "secure_orca.cli.envoy",
    "deploy": "secure_orca.cli.deploy",
    "hpack": "secure_orca.cli.hpack",
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """Every subcommand's parser; with ``only``, that one alone is built and the others are bare names, so
    that ``secure-orca serve`` does not import the tools it does not run (a quarter of its start-up)."""
    parser = argparse.ArgumentParser(
        prog="secure-orca",
        description="ORCA load reports (KEP-6315) over HTTP/2 TLS, granted only to a front proxy "
        "(mTLS) or a holder of a shared secret; with audit, measurement and Envoy tools.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, module_name in COMMANDS.items():
        if only is not None and name != only:
            sub.add_parser(name)
            continue
        module = importlib.import_module(module_name)
        command = sub.add_parser(
            name,
            help=module.HELP,
            description=module.__doc__,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        module.add_arguments(command)
        command.set_defaults(run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    given = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(given[0] if given and given[0] in COMMANDS else None)
    args = parser.parse_args(given)
    try:
        return int(args.run(args))
    except SecureOrcaError as error:
        print(f"secure-orca {args.command}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
