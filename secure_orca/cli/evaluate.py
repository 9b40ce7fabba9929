"""Evaluate KEP-6315's three options (with 2b, the load-reader certificate, and the combination 2 or 3) and
option 4, out-of-band reports on a StreamCoreMetrics stream entitled by the load-reader certificate, side by side,
measured on this machine: a development PKI in a temporary directory, one local replica per option (plus two with
the feature off: the baseline and the A/A control), Envoy in front when the ``envoy`` extra is installed, and for
each option:

- exposure: ``secure-orca probe`` as a client that bypasses the load balancer, and as one that goes through it
  (the shared secret's comparison timed, its sentence following p);
- cost: instructions per request against the feature-off replica and per new TLS connection with each load-balancer
  certificate against none (callgrind, a range over memory layouts; skipped without valgrind), HPACK bytes per
  response (wire) and per request (the opt-in: once per connection, then per request); wall-clock requests/s and
  p99 ratios as a secondary column, printed only outside the A/A control's 95% interval (two feature-off
  replicas), the column dropped where nothing resolves;
- in band against out of band at matched freshness (1 s and 0.1 s periods, in band once per sample): bytes on the
  wire on one loaded replica and staleness with Envoy from a load step at a random time, repeated and interleaved,
  median and range (``secure_orca/lab/matched.py``);
- burden: what must be configured and rotated on each side (a description);
- the recommendation: rules in ``secure_orca/lab/recommend.py``, the default as data (``recommended_option``).

Prints the matrix and writes evaluation.md and evaluation.json to --output; ``--publish FILE.md`` (a full run
only, started and ended at the same clean commit) also writes the document with its provenance, FILE.json and
the KEP's security section (kep-6315-security.md) beside it: docs/security-options.md is made by
``./scripts/evaluate.sh --publish docs/security-options.md``.
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
from secure_orca.lab.evaluate import clean_run, evaluate, log
from secure_orca.lab.kep import render_kep
from secure_orca.lab.markdown import header, matrix_rows, render_markdown, table
from secure_orca.lab.results import Evaluation, to_json

HELP = "measure the options of KEP-6315 and the out-of-band stream side by side (the project's main job)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--output", type=Path, default=Path("evaluation"), help="directory (default: evaluation)")
    parser.add_argument("--quick", action="store_true", help="short phases, as CI runs it (never with --publish)")
    parser.add_argument("--no-envoy", action="store_true", help="evaluate the replicas directly, even with envoy")
    parser.add_argument("--json", action="store_true", help="print evaluation.json instead of the matrix")
    parser.add_argument("--no-instructions", action="store_true", help="leave out the callgrind counts (faster)")
    parser.add_argument(
        "--publish",
        type=Path,
        metavar="FILE.md",
        help="also write the document to FILE.md and its evaluation.json beside it as FILE.json (a full run only: "
        "refused with --quick or --no-instructions); docs/security-options.md is made this way",
    )


def run(args: argparse.Namespace, progress: Callable[[str], None] = log) -> int:
    if args.publish is not None:
        if args.quick or args.no_instructions or args.no_envoy:
            raise UsageError(
                "--publish writes the committed document: a full run only (no --quick, --no-instructions or --no-envoy)"
            )
        if args.publish.suffix != ".md":
            raise UsageError(f"--publish {args.publish}: the document's name must end in .md")
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
        print(table(header(results), matrix_rows(results)))
        print()
        for line in results.recommendation:
            print(f"- {line}")
        print(f"\nwritten: {args.output / 'evaluation.md'}, {args.output / 'evaluation.json'}")
    if args.publish is not None:
        unclean = clean_run(results.provenance)
        if unclean is not None:
            raise UsageError(f"--publish: not published, {unclean}; the run is in {args.output}")
        publish(results, args.publish)
        print(f"published: {args.publish}, {args.publish.with_suffix('.json')}")
    return 0


NOTICE = "<!-- Generated by `secure-orca evaluate --publish`; regenerate, do not edit (see How this was made). -->\n\n"
KEP_SECTION = "kep-6315-security.md"  # written beside the published document
GO_FIGURES = "kep-6315-go.json"  # the Go peer's figures (benchmarks/gopeer), read when present


def publish(results: Evaluation, path: Path) -> None:
    """The committed document and its figures: ``path`` (markdown, with its provenance), ``path``.json, and the
    KEP's security section beside them (its figures linked to that JSON; the Go column from GO_FIGURES)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(NOTICE + render_markdown(results))
    data = path.with_suffix(".json")
    data.write_text(json.dumps(to_json(results), indent=2) + "\n")
    go_path = path.parent / GO_FIGURES
    go = json.loads(go_path.read_text()) if go_path.exists() else None
    (path.parent / KEP_SECTION).write_text(NOTICE + render_kep(results, data.name, go))
