"""Run ``secure-orca`` with every source of instruction-count drift pinned (for runs under valgrind).

    python -m secure_orca.cli.pinned serve --bind-address 127.0.0.1 ...

What would make two runs of the same requests execute different instructions, and how it is pinned:

- hash seed: the caller sets ``PYTHONHASHSEED=0`` (it must be set before the interpreter starts);
- UUIDs: the demo backend's ``audit-id`` is a random UUID whose characters change HPACK's Huffman work;
  ``uuid.uuid4`` draws from a seeded generator instead (same sequence every run);
- time: hypercorn's ``date`` response header changes once a second, so a slower run would add more HPACK
  table insertions; it is fixed to one instant (``time.time`` as hypercorn's config module sees it);
- the sampler's timer: ticks follow wall time, not requests, so the launcher publishes the first report as
  ``start()`` does and never ticks again (the sampler's own cost is measured per tick, elsewhere);
- GC: collections follow allocation counts, so a window that starts at another point of the GC's cycle sees
  collections at other points; start-up objects are frozen (``gc.freeze``), and ``SIGUSR1`` (sent by the
  harness before each counted window) runs a full collection and re-seeds the UUIDs, so every window starts
  from the same GC and UUID state.

What is not pinned but varied on purpose: the memory layout. CPython caches type attributes in a table indexed
by the attribute name's address, so two processes that differ only in where their objects landed can differ
by a few thousand instructions per request. ``SECURE_ORCA_BENCH_LAYOUT=k`` allocates k blocks before anything
else is imported, shifting every later address; the harness uses one layout per repeat, so the spread over
repeats includes this effect instead of hiding it in one lucky or unlucky layout.

Nothing on the request path is replaced: the middleware, policy, hypercorn and h2 run unchanged.
"""

from __future__ import annotations

import asyncio
import gc
import os
import random
import signal
import sys
import uuid
from collections.abc import Sequence

_LAYOUT_PADDING = [bytes(40 + 8 * (i % 50)) for i in range(977 * int(os.environ.get("SECURE_ORCA_BENCH_LAYOUT") or 0))]
FIXED_TIME = 1_800_000_000.0  # 2027-01-15 08:00:00 UTC: one fixed Date header
_uuids = random.Random(0)


def _seeded_uuid4() -> uuid.UUID:
    return uuid.UUID(int=_uuids.getrandbits(128), version=4)


def reset() -> None:
    """The same GC and UUID state at the start of every counted window."""
    _uuids.seed(0)
    gc.collect()


def pin() -> None:
    """Pin UUIDs, the Date header's clock, the sampler's timer and the GC's start-up generation; ``SIGUSR1``
    calls ``reset``."""
    import hypercorn.config

    from secure_orca.server import assembly
    from secure_orca.server.sampler import Sampler

    class PinnedSampler(Sampler):
        """Publishes its first report at start(), then never ticks."""

        async def _run(self) -> None:
            await asyncio.Event().wait()

    # Module attributes replaced through vars(): these are deliberate substitutions in a benchmark launcher.
    vars(uuid)["uuid4"] = _seeded_uuid4
    vars(hypercorn.config)["time"] = lambda: FIXED_TIME
    vars(assembly)["Sampler"] = PinnedSampler
    gc.collect()
    gc.freeze()
    signal.signal(signal.SIGUSR1, lambda signum, frame: reset())


def main(argv: Sequence[str]) -> int:
    pin()
    from secure_orca.cli import main as cli_main

    return cli_main(list(argv))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
