"""Another client's p99 while an anonymous client floods a server whose audit log is on, under the
hostile flood and under its control, in one run.

    python -m benchmarks.audit_flood [--rounds 5 --requests 600 --samples 200] [-- SERVE FLAGS]

One ``serve`` with ``--audit-log-path`` (and any flags given after ``--``, e.g. ``--audit-log-mode batch``). Per
round, the two floods in turn (the order alternates): h2load sends REQUESTS requests on 3 HTTP/2 connections
with no client certificate, each with a 24 KB path and either ``Authorization: Bearer`` followed by 4,800 random
6-character parts (hostile: about 58 KB of headers) or the same path with a one-part Authorization (control).
While it runs, and until the writer has written every event of it (``secure_orca_audit_queue_length`` back to
0 and the written count up by REQUESTS), the victim sends sequential ``GET /healthz`` on its own HTTP/2
connection (at least SAMPLES). Printed per round: the victim's p99 under each flood, their ratio, the server's
CPU time per flood request (utime + stime over the flood and the drain), and the time until the last event was
written. Target: hostile / control within 2x. The server's RSS is read after each flood.
"""

from __future__ import annotations

import argparse
import random
import re
import ssl
import statistics
import string
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import httpx

from secure_orca.credentials import devpki
from secure_orca.lab import h2load, loadgen
from secure_orca.lab import replicas as launch
from secure_orca.lab.procfs import process_cpu, rss_kib

PATH_BYTES = 24 * 1024
PARTS, PART_CHARS = 4800, 6
CONNECTIONS = 3


def flood_headers(hostile: bool, seed: int) -> str:
    """The Authorization of one flood: 4,800 random parts (hostile) or only the first of them (control)."""
    rng = random.Random(seed)
    parts = ["".join(rng.choices(string.ascii_letters + string.digits, k=PART_CHARS)) for _ in range(PARTS)]
    return "Bearer " + " ".join(parts if hostile else parts[:1])


def flood(url: str, requests: int, authorization: str) -> subprocess.Popen[bytes]:
    path = "/" + "p" * (PATH_BYTES - 1)
    argv = h2load.argv(
        url + path,
        clients=CONNECTIONS,
        requests=requests,
        headers=[f"authorization: {authorization}"],
        program=loadgen.h2load_path(),
    )
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={"PATH": "/usr/bin:/bin"})


def counter(metrics: str, name: str) -> float:
    match = re.search(rf"^{re.escape(name)} ([0-9.e+]+)$", httpx.get(metrics, timeout=10).text, re.M)
    if match is None:
        raise RuntimeError(f"no {name} in /metrics")
    return float(match.group(1))


def p99(samples: Sequence[float]) -> float:
    return statistics.quantiles(samples, n=100)[98]


def victim(url: str, ca: Path, samples: int, busy: threading.Event) -> list[float]:
    with httpx.Client(verify=ssl.create_default_context(cafile=ca), http2=True, timeout=30) as http:
        found: list[float] = []
        while len(found) < samples or busy.is_set():
            start = time.perf_counter()
            http.get(url + "/healthz").raise_for_status()
            found.append(time.perf_counter() - start)
    return found


def measure(
    replica: launch.Replica,
    metrics: str,
    ca: Path,
    requests: int,
    samples: int,
    hostile: bool,
    seed: int,
    audited: bool,
) -> dict[str, float]:
    """One flood: the victim's p99 while it runs and until its events are written; the writer's drain time."""
    written = counter(metrics, "secure_orca_audit_events_written_total") if audited else 0
    busy = threading.Event()
    busy.set()
    result: list[list[float]] = []
    thread = threading.Thread(target=lambda: result.append(victim(replica.url, ca, samples, busy)))
    thread.start()
    pid = replica.process.popen.pid
    cpu = process_cpu(pid)
    started = time.perf_counter()
    process = flood(replica.url, requests, flood_headers(hostile, seed))
    output = process.communicate(timeout=600)[0].decode()
    if process.returncode != 0 or f"{requests} done" not in output:
        busy.clear()
        thread.join()
        raise RuntimeError(f"the flood failed: {output[-800:]}")
    peak = rss_kib(pid)
    while audited and (
        counter(metrics, "secure_orca_audit_events_written_total") < written + requests
        or counter(metrics, "secure_orca_audit_queue_length") > 0
    ):
        time.sleep(0.05)
    drained = time.perf_counter() - started
    cpu = (process_cpu(pid) - cpu) / requests
    busy.clear()
    thread.join()
    return {"p99": p99(result[0]), "drained": drained, "rss": peak, "cpu": cpu, "samples": len(result[0])}


def run(
    workdir: Path, rounds: int, requests: int, samples: int, extra: Sequence[str], audited: bool = True
) -> list[dict[str, float]]:
    dev = devpki.generate(workdir / "pki")
    metrics = f"127.0.0.1:{launch.free_port()}"
    log = workdir / "audit" / "audit.log"
    flags = ["--metrics-bind-address", metrics, *extra]
    if audited:
        flags += ["--audit-log-path", str(log)]
    found = []
    with launch.replicas([launch.serve_argv(dev, flags)]) as (replica,):
        url = f"http://{metrics}/metrics"
        measure(replica, url, dev.cert("ca"), 60, samples // 4, False, 0, audited)  # warm-up
        idle = victim(replica.url, dev.cert("ca"), samples, threading.Event())
        for index in range(rounds):
            kinds = (True, False) if index % 2 else (False, True)
            row = {"idle": p99(idle)}
            for hostile in kinds:
                name = "hostile" if hostile else "control"
                for key, value in measure(
                    replica, url, dev.cert("ca"), requests, samples, hostile, index, audited
                ).items():
                    row[f"{name}.{key}"] = value
            found.append(row)
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.audit_flood", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=600)
    parser.add_argument("--samples", type=int, default=200, help="victim requests at least, per flood")
    parser.add_argument("--no-audit", action="store_true", help="the same floods with the audit log off")
    parser.add_argument("serve", nargs="*", help="more serve flags (after --)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    with tempfile.TemporaryDirectory(prefix="audit-flood-") as tmp:
        rows = run(Path(tmp), args.rounds, args.requests, args.samples, args.serve, not args.no_audit)
    print(
        "| round | victim p99 control (ms) | hostile (ms) | hostile / control | server CPU per request control (ms) "
        "| hostile (ms) | drained control (s) | hostile (s) | RSS after control (MiB) | hostile (MiB) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for index, row in enumerate(rows):
        print(
            f"| {index} | {row['control.p99'] * 1000:.1f} | {row['hostile.p99'] * 1000:.1f} "
            f"| {row['hostile.p99'] / row['control.p99']:.2f} | {row['control.cpu'] * 1000:.1f} "
            f"| {row['hostile.cpu'] * 1000:.1f} | {row['control.drained']:.2f} "
            f"| {row['hostile.drained']:.2f} | {row['control.rss'] / 1024:.0f} | {row['hostile.rss'] / 1024:.0f} |"
        )
    ratios = sorted(row["hostile.p99"] / row["control.p99"] for row in rows)
    print(
        f"\nhostile / control p99: median {statistics.median(ratios):.2f} [{ratios[0]:.2f}, {ratios[-1]:.2f}]; "
        f"idle p99 {statistics.median(r['idle'] for r in rows) * 1000:.1f} ms"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
