"""How a load balancer's few long-lived connections spread over the workers of ``serve --workers 2``, and what
that does to throughput: Envoy keeps about one HTTP/2 connection per Envoy worker to each host, so a replica may
see only 2 to 8 connections in all.

    python -m benchmarks.spread [ROUNDS] [SECONDS]

For each connection count, h2load opens that many connections at once (front-proxy certificate, the opt-in on
/healthz, 10 streams each) against ``--workers 2`` and ``--workers 1`` in turn; halfway through each run the
kernel's socket tables (``lab.sockets``, procfs) say which worker holds each connection. Printed per count: how
the connections split over the two workers in every round, and the req/s of two workers over one, per round.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from contextlib import ExitStack
from pathlib import Path

from secure_orca.credentials import devpki
from secure_orca.lab import launcher as lb
from secure_orca.lab import replicas as launch
from secure_orca.lab.loadgen import Identity, Load, build_shim, run_h2load
from secure_orca.lab.sockets import children, connections, listening

COUNTS = (1, 2, 4, 8)
STREAMS = 10


def split(replica: launch.Replica) -> tuple[int, ...]:
    """Established connections per worker, most first."""
    pids = listening(children(replica.process.popen.pid), replica.port)
    return tuple(sorted(connections(pids, replica.port).values(), reverse=True))


def main(rounds: int = 5, seconds: float = 4.0) -> None:
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        dev = devpki.generate(Path(tmp) / "pki")
        identity = Identity("front-proxy", dev.cert("front_proxy_client"), dev.key("front_proxy_client"), "TEXT")
        shim = build_shim(Path(tmp))
        argvs = [
            launch.serve_argv(dev, lb.replica_flags(dev, "front-proxy", "--workers", n), demo_work=False)
            for n in ("1", "2")
        ]
        one, two = stack.enter_context(launch.replicas(argvs))
        splits: dict[int, list[tuple[int, ...]]] = {count: [] for count in COUNTS}
        ratios: dict[int, list[float]] = {count: [] for count in COUNTS}
        for round_ in range(rounds):
            for count in COUNTS:
                load = Load(count, STREAMS, duration=seconds, warmup=0.5)
                seen: list[tuple[int, ...]] = []
                timer = threading.Timer(0.5 + seconds / 2, lambda seen=seen: seen.append(split(two)))
                timer.start()
                rps_two = run_h2load(f"{two.url}/healthz", load, identity, Path(tmp), shim).rps
                timer.join()
                rps_one = run_h2load(f"{one.url}/healthz", load, identity, Path(tmp), shim).rps
                splits[count].append(seen[0])
                ratios[count].append(rps_two / rps_one)
                print(
                    f"round {round_ + 1}/{rounds}, {count} connections: split {seen[0]}, "
                    f"req/s x{ratios[count][-1]:.2f}",
                    flush=True,
                )
            time.sleep(0.2)
    print(
        f"\nh2load -c N -m {STREAMS} -t 1 for {seconds:g} s, {rounds} rounds; connections per worker of "
        "`--workers 2` read halfway through each run\n"
    )
    print("| connections | split over the 2 workers (rounds) | req/s, 2 workers over 1: median (range) |")
    print("|---|---|---|")
    for count in COUNTS:
        tally = ", ".join(f"{'/'.join(map(str, s))} ({n})" for s, n in Counter(splits[count]).most_common())
        r = ratios[count]
        print(f"| {count} | {tally} | x{statistics.median(r):.2f} (x{min(r):.2f}–x{max(r):.2f}) |")


if __name__ == "__main__":
    arguments = sys.argv[1:]
    main(int(arguments[0]) if arguments else 5, float(arguments[1]) if len(arguments) > 1 else 4.0)
