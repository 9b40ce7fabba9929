"""Instructions per request of the whole server on asyncio's event loop and on uvloop's (``serve --event-loop``),
under callgrind, in one run (``common.variants_per_request``: windows of N and M requests on one warm pinned
server, one memory layout per repeat). Wall time on a shared 2-core machine cannot resolve a few percent;
instructions can, and ``benchmarks.workers`` gives the requests/s beside them.

    python -m benchmarks.event_loop [--requests 600 --baseline 100 --repeats 2]
"""

from __future__ import annotations

from collections.abc import Sequence

from benchmarks.common import BenchPKI, print_variants, variants_arguments, variants_per_request

LOOPS = ("asyncio", "uvloop")


def main(argv: Sequence[str] | None = None) -> None:
    args = variants_arguments("benchmarks.event_loop", __doc__ or "", "secure-orca-loop-instr", 2, argv)
    variants = {loop: ["--event-loop", loop] for loop in LOOPS}
    bench = BenchPKI.create(args.output / "pki")
    counted = variants_per_request(bench, args.output, variants, args.requests, args.baseline, args.repeats)
    ratio = "uvloop / asyncio, median [min, max] over layouts"
    print_variants(counted, ("asyncio", "asyncio"), ("uvloop", "uvloop"), ratio)


if __name__ == "__main__":
    main()
