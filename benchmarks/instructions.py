"""Instruction counts under valgrind (callgrind): what the load report costs per request, deterministically.

    python -m benchmarks.instructions                        # in process, whole server, connections (minutes)
    python -m benchmarks.instructions --only inprocess --requests 2000 --baseline 400
    python -m benchmarks.instructions --only server --repeats 3 --output /tmp/instr

Every figure is a difference of two counted windows, a run of N requests minus a run of M on the same warm
process, divided by N - M: start-up, imports, the TLS handshake and the connection's end cancel out. Wall time
never enters. Drift sources are pinned by ``secure_orca.cli.pinned`` (hash seed, UUIDs, the Date header's clock, the
sampler's timer, the GC's start-up generation), so repeats agree to about 0.01%.

- **in process**: the ASGI app exactly as ``serve`` builds it (``build_config`` + ``build_app``) around the demo
  backend, called in one event loop; windows are marked from inside with callgrind client requests
  (``instr_marks.c``, compiled on first use).
- **whole server**: real ``secure-orca serve`` (through ``secure_orca.cli.pinned``) under callgrind, real TLS and
  HTTP/2, driven by h2load with one connection and one stream (``-c 1 -m 1``: the same frames every run);
  windows are marked from outside with ``callgrind_control``.
- **per new connection**: K connections of one request each minus one connection of K requests, over K - 1.

A variant is a client identity; its fair baseline is the same client against the feature turned off. To
re-measure with another layer in front of the app (say an authentication layer), build it in ``build_app``:
both benchmarks take the app from there, so nothing here changes.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from secure_orca.lab import instrcount
from secure_orca.lab.instrcount import Counted, CountedServer, dump_total, dumps_by_label, ratio_range
from secure_orca.lab.loadgen import Identity

from .common import (
    PATH,
    BenchError,
    BenchPKI,
    jsonable,
    markdown_table,
    report_attached,
)

MARKS_SOURCE = Path(__file__).with_name("instr_marks.c")


# ---- variants ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Variant:
    """One client identity, measured against the feature on and against the feature off (its fair baseline)."""

    key: str
    title: str
    identity: Identity
    attached: bool  # whether the feature-on server must attach a report
    target: float | None  # the most the on/off ratio may be (None: 0.0% within the spread)


def variants(bench: BenchPKI) -> list[Variant]:
    """The identities whose per-request cost is counted. The load-reader certificate (option 2b) is not among
    them yet: its identity would be a certificate from BenchPKI and the bare opt-in, with target 1.010."""
    return [
        Variant("front-proxy", "front proxy, opt-in (authorised)", bench.front_proxy(), True, 1.010),
        Variant("secret", "shared secret, opt-in (authorised)", bench.shared_secret(), True, 1.010),
        Variant("refused", "ordinary client-CA user, opt-in (refused)", bench.user(), False, 1.003),
        Variant("no-opt-in", "front proxy, no opt-in", bench.front_proxy(optin=None), False, None),
    ]


# ---- reading callgrind dumps ------------------------------------------------------------------------------

_ANNOTATED = re.compile(r"^\s*([\d,]+)\s+\(\s*[-\d.]+%\)\s+(.+?)\s*$")


def function_name(location: str) -> str:
    """``/build/.../Objects/dictobject.c:_Py_dict_lookup'2 [/lib/libpython.so]`` -> ``dictobject.c:_Py_dict_lookup``."""
    location = location.split(" [", 1)[0]
    file, _, function = location.rpartition(":")
    function = function.split("'", 1)[0]
    return f"{os.path.basename(file)}:{function}" if file else function


def object_name(location: str) -> str:
    """``... [/usr/lib/x86_64-linux-gnu/libcrypto.so.3]`` -> ``libcrypto.so.3``; code inlined from a header has
    no object in callgrind_annotate's output and is grouped as such."""
    if " [" not in location:
        return "(inlined, object not named)"
    return os.path.basename(location.rsplit(" [", 1)[1].rstrip("]"))


def function_costs(path: Path, key: Callable[[str], str] = function_name) -> dict[str, int]:
    """Exclusive instructions per function (or per ``key`` of its location) of one dump."""
    out = subprocess.run(
        ["callgrind_annotate", "--inclusive=no", "--threshold=100", str(path)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    costs: dict[str, int] = {}
    for line in out.splitlines():
        match = _ANNOTATED.match(line)
        if match and "PROGRAM TOTALS" not in line:
            name = key(match.group(2))
            costs[name] = costs.get(name, 0) + int(match.group(1).replace(",", ""))
    return costs


def window_difference(long: dict[str, int], short: dict[str, int]) -> dict[str, int]:
    return {name: long.get(name, 0) - short.get(name, 0) for name in long.keys() | short.keys()}


def attribute(
    on: tuple[Path, Path],
    off: tuple[Path, Path],
    requests: int,
    top: int = 12,
    key: Callable[[str], str] = function_name,
) -> list[tuple[str, float]]:
    """Per-request instruction difference on - off by function (or by ``key``), the ``top`` largest in magnitude;
    each pair is (long window, short window) and ``requests`` their difference in requests (or connections)."""
    on_diff = window_difference(function_costs(on[0], key), function_costs(on[1], key))
    off_diff = window_difference(function_costs(off[0], key), function_costs(off[1], key))
    names = on_diff.keys() | off_diff.keys()
    delta = {name: (on_diff.get(name, 0) - off_diff.get(name, 0)) / requests for name in names}
    return sorted(delta.items(), key=lambda item: -abs(item[1]))[:top]


# ---- statistics -------------------------------------------------------------------------------------------


def meets(target: float | None, on: Counted, off: Counted) -> bool:
    median, _, _ = ratio_range(on, off)
    if target is not None:
        return median <= target
    return abs(median - 1) <= max(on.spread, off.spread)  # 0.0% within the spread


# ---- valgrind plumbing ------------------------------------------------------------------------------------


def build_marks(directory: Path | None = None) -> Path:
    directory = directory or Path(tempfile.gettempdir()) / "secure-orca-instr"
    target = directory / "instr_marks.so"
    if target.exists() and target.stat().st_mtime >= MARKS_SOURCE.stat().st_mtime:
        return target
    directory.mkdir(parents=True, exist_ok=True)
    compiler = shutil.which("cc") or shutil.which("gcc") or "cc"
    subprocess.run([compiler, "-shared", "-fPIC", "-O1", "-o", str(target), str(MARKS_SOURCE)], check=True, timeout=60)
    return target


def count_windows(
    marks_path: str,
    cases: Mapping[str, Callable[[], object]],
    counts: tuple[int, ...],
    before: Callable[[], object] = lambda: None,
) -> None:
    """In a child under callgrind: per case and count, one window of ``count`` calls, dumped as ``case,count``
    (``before`` runs ahead of each window, outside it)."""
    marks = ctypes.CDLL(marks_path)
    marks.marks_start()
    for name, call in cases.items():
        for count in counts:
            before()
            marks.marks_zero()
            for _ in range(count):
                call()
            marks.marks_dump(f"{name},{count}".encode())


def windows_of_child(module: str, prefix: str, timeout: float) -> tuple[dict[str, int], str]:
    """Run ``python -m module --child MARKS`` under callgrind (its windows from ``count_windows``): the
    instructions of each ``case,count`` window, and what the child wrote to stderr. SystemExit when valgrind or
    the marks cannot be had."""
    missing = instrcount.valgrind_available(marks=True)
    if missing:
        raise SystemExit(f"cannot count instructions: {missing}")
    workdir = Path(tempfile.gettempdir()) / f"secure-orca-{prefix}"
    workdir.mkdir(exist_ok=True)
    for old in workdir.glob(f"{prefix}.*"):
        old.unlink()
    marks = build_marks(workdir)
    command = [*instrcount.VALGRIND, f"--callgrind-out-file={workdir}/{prefix}.%p"]
    command += [sys.executable, "-m", module, "--child", str(marks)]
    done = subprocess.run(command, env=instrcount.pinned_env(0), check=True, capture_output=True, timeout=timeout)
    totals = {k: dump_total(p) for k, p in dumps_by_label(workdir, prefix).items() if "," in k}
    return totals, done.stderr.decode()


# ---- in process -------------------------------------------------------------------------------------------


IN_PROCESS_EXTRA = ("pass-through",)  # the demo backend behind a middleware that only forwards


async def _child_inprocess(args: argparse.Namespace) -> None:
    """Runs under valgrind: warm every app, then count windows of M and N requests per (server, variant)."""
    from benchmarks.middleware_cost import PassThrough, _attached, _discard, _receive, build_middleware, make_scope
    from secure_orca.cli.pinned import pin, reset
    from secure_orca.server import demo
    from secure_orca.server.sampler import Sampler

    pin()
    marks = ctypes.CDLL(str(args.marks))
    bench = BenchPKI.create(args.pki)
    sampler = Sampler(0.1)
    sampler.tick()  # one published report, as after start(); no timer runs here
    apps = {"on": build_middleware(bench, sampler, True)[0], "off": build_middleware(bench, sampler, False)[0]}
    chosen = [v for v in variants(bench) if v.key in args.variants]
    runs: list[tuple[str, Any, dict[str, Any]]] = []
    for v in chosen:
        for server in ("on", "off"):
            scope = make_scope(v.identity)  # one connection per (server, client)
            if await _attached(apps[server], scope) != (v.attached and server == "on"):
                raise BenchError(f"in process, {v.key} on {server}: unexpected report outcome")
            runs.append((f"{server}/{v.key}", apps[server], scope))
    if "pass-through" in args.variants:
        runs.append(("pass-through", PassThrough(demo.app), make_scope(bench.front_proxy())))

    async def requests(app: Any, scope: dict[str, Any], count: int) -> None:
        for _ in range(count):
            await app(scope, _receive, _discard)

    for _label, app, scope in runs:
        await requests(app, scope, args.baseline)  # warm: caches, lazy imports, first verification
    marks.marks_start()
    for repeat in range(args.repeats):
        for label, app, scope in runs:
            for count in (args.baseline, args.requests):
                reset()
                marks.marks_zero()
                await requests(app, scope, count)
                marks.marks_dump(f"{label},{count},{repeat}".encode())


def run_inprocess(
    bench: BenchPKI, workdir: Path, *, requests: int, baseline: int, repeats: int, keys: Sequence[str]
) -> dict[str, Any]:
    """Instructions per request of the ASGI app in process, per variant on and off (and a pass-through)."""
    marks = build_marks(workdir)
    prefix = workdir / "inprocess"
    argv = [sys.executable, "-m", "benchmarks.instructions", "--child-inprocess", "--pki", str(bench.dev.root)]
    argv += ["--marks", str(marks), "--requests", str(requests), "--baseline", str(baseline)]
    argv += ["--repeats", str(repeats), "--variants", ",".join(keys)]
    command = [*instrcount.VALGRIND, f"--callgrind-out-file={prefix}.%p", *argv]
    done = subprocess.run(command, env=instrcount.pinned_env(0), capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise BenchError(f"in-process run failed ({done.returncode}): {done.stderr[-2000:]}")
    dumps = dumps_by_label(workdir, prefix.name)
    labels = sorted({label.split(",")[0] for label in dumps if "," in label})
    per_request = {
        label: Counted(
            tuple(
                (dump_total(dumps[f"{label},{requests},{r}"]) - dump_total(dumps[f"{label},{baseline},{r}"]))
                / (requests - baseline)
                for r in range(repeats)
            )
        )
        for label in labels
    }
    return {"requests": requests, "baseline": baseline, "repeats": repeats, "per_request": per_request, "dumps": dumps}


# ---- whole server -----------------------------------------------------------------------------------------


def counted_server(bench: BenchPKI, workdir: Path, *, enabled: bool, layout: int) -> Any:
    """``serve`` with the benchmark flags (``BenchPKI.serve_argv``) under callgrind."""
    serve_args = instrcount.serve_args(bench.serve_argv(enabled=enabled))
    return instrcount.counted_server(serve_args, workdir / f"server-{'on' if enabled else 'off'}", layout=layout)


def _h2load(server: CountedServer, identity: Identity, count: int, workdir: Path) -> None:
    instrcount.requests(server, identity, count, PATH, workdir)


def run_server(
    bench: BenchPKI,
    workdir: Path,
    *,
    requests: int,
    baseline: int,
    repeats: int,
    keys: Sequence[str],
    connections: int,
) -> dict[str, Any]:
    """Per-request instructions of the whole server for each variant on and off, and per new connection.
    Each repeat starts both servers afresh with another memory layout (``secure_orca.cli.pinned``), so the spread
    includes what addresses alone change (CPython's type-attribute cache is indexed by address)."""
    chosen = [v for v in variants(bench) if v.key in keys]
    windows: dict[str, int] = {}
    dumps: dict[str, Path] = {}
    for repeat in range(repeats):
        for server_name, enabled in (("off", False), ("on", True)):
            with counted_server(bench, workdir, enabled=enabled, layout=repeat) as server:
                for v in chosen:  # outcome check and warm-up, not counted
                    if report_attached(server.url, v.identity, bench.dev.cert("ca")) != (v.attached and enabled):
                        raise BenchError(f"server {server_name}, {v.key}: unexpected report outcome")
                    _h2load(server, v.identity, baseline, workdir)
                server.control("--instr=on")
                for v in chosen:
                    for count in (baseline, requests):
                        with server.window(f"{server_name}/{v.key},{count},{repeat}"):
                            _h2load(server, v.identity, count, workdir)
                if enabled and connections > 1:
                    for name, identity in connection_identities(bench).items():
                        with server.window(f"{server_name}/conn-{name},many,{repeat}"):
                            for _ in range(connections):
                                _h2load(server, identity, 1, workdir)
                        with server.window(f"{server_name}/conn-{name},one,{repeat}"):
                            _h2load(server, identity, connections, workdir)
                server.control("--instr=off")
                dumps |= server.dumps()
                windows |= server.totals()

    def per(label: str, long: str, short: str, units: int) -> Counted:
        return instrcount.per_unit(windows, label, long, short, units, repeats)

    per_request = {
        f"{server}/{v.key}": per(f"{server}/{v.key}", str(requests), str(baseline), requests - baseline)
        for server in ("off", "on")
        for v in chosen
    }
    per_connection = {}
    if connections > 1:
        per_connection = {
            name: per(f"on/conn-{name}", "many", "one", connections - 1) for name in connection_identities(bench)
        }
    return {
        "requests": requests,
        "baseline": baseline,
        "repeats": repeats,
        "connections": connections,
        "per_request": per_request,
        "per_connection": per_connection,
        "dumps": dumps,
    }


def connection_identities(bench: BenchPKI) -> dict[str, Identity]:
    """New TLS connections with and without the front-proxy certificate (both send the bare opt-in)."""
    return {"front-proxy-cert": bench.front_proxy(), "no-cert": bench.anonymous()}


# ---- report -----------------------------------------------------------------------------------------------


def _k(value: float) -> str:
    return f"{value / 1000:,.1f} k"


def request_table(result: dict[str, Any], chosen: Sequence[Variant], *, targets: bool) -> str:
    per = result["per_request"]
    rows: list[Sequence[object]] = []
    for v in chosen:
        on, off = per.get(f"on/{v.key}"), per.get(f"off/{v.key}")
        if on is None or off is None:
            continue
        median, low, high = ratio_range(on, off)
        row: list[object] = [
            v.title,
            _k(off.median),
            _k(on.median),
            f"{on.median - off.median:+,.0f}",
            f"{median:.4f} [{low:.4f}, {high:.4f}]",
            f"{100 * max(on.spread, off.spread):.3f}%",
        ]
        if targets:
            goal = f"≤ {v.target:.3f}" if v.target is not None else "1.000 within spread"
            row += [goal, "yes" if meets(v.target, on, off) else "**no**"]
        rows.append(row)
    if "pass-through" in per:
        rows.append(
            ["pass-through middleware, no feature code", "—", _k(per["pass-through"].median), "", "", ""]
            + (["", ""] if targets else [])
        )
    header = ["client", "off: instr/request", "on: instr/request", "on − off", "on ÷ off [min, max]", "spread"]
    return markdown_table(header + (["target", "met"] if targets else []), rows)


def connection_table(result: dict[str, Any]) -> str:
    per = result["per_connection"]
    if not per:
        return ""
    without = per["no-cert"]
    rows = [
        ["without client certificate", _k(without.median), f"{100 * without.spread:.3f}%", "1"],
        [
            "with the front-proxy certificate",
            _k(per["front-proxy-cert"].median),
            f"{100 * per['front-proxy-cert'].spread:.3f}%",
            f"{per['front-proxy-cert'].median / without.median:.3f}",
        ],
    ]
    return markdown_table(["new TLS connection", "instr/connection", "spread", "÷ without"], rows)


def attribution_table(rows: Sequence[tuple[str, float]]) -> str:
    cells = [[f"`{name}`", f"{delta:+,.0f}"] for name, delta in rows]
    return markdown_table(["function (C level)", "on − off, instr/request"], cells)


def render(results: dict[str, Any], chosen: Sequence[Variant]) -> str:
    parts = []
    if "server" in results:
        s = results["server"]
        parts += [
            f"#### Whole server (TLS + HTTP/2 + hypercorn + app), `{PATH}`, h2load -c 1 -m 1\n",
            request_table(s, chosen, targets=True),
            f"\nInstructions per request: (run of {s['requests']} − run of {s['baseline']}) ÷ "
            f"{s['requests'] - s['baseline']}, {s['repeats']} repeats; ratios repeat by repeat, median [min, max]; "
            "spread: (max − min) ÷ median of the per-request counts of either side.\n",
        ]
        if s["per_connection"]:
            parts += [
                "#### Per new TLS connection (feature on)\n",
                connection_table(s),
                f"\n({s['connections']} connections of one request − one connection of {s['connections']} "
                f"requests) ÷ {s['connections'] - 1}, {s['repeats']} repeats.\n",
            ]
        if s.get("connection_attribution"):
            parts += [
                "#### Where a new connection's certificate goes (callgrind, by shared object)\n",
                markdown_table(
                    ["object", "with − without certificate, instr/connection"],
                    [[f"`{name}`", f"{delta:+,.0f}"] for name, delta in s["connection_attribution"]],
                ),
                "",
            ]
        for key, rows in s.get("attribution", {}).items():
            parts += [
                f"#### Where the difference goes, whole server, {key} (callgrind, top entries)\n",
                attribution_table(rows),
                "",
            ]
    if "inprocess" in results:
        p = results["inprocess"]
        parts += [
            "#### ASGI app in process (as `serve` builds it)\n",
            request_table(p, chosen, targets=False),
            f"\n(run of {p['requests']} − run of {p['baseline']}) ÷ {p['requests'] - p['baseline']}, "
            f"{p['repeats']} repeats.\n",
        ]
    return "\n".join(parts)


# ---- command line -----------------------------------------------------------------------------------------

SECTIONS = ("inprocess", "server")


def run_all(args: argparse.Namespace) -> dict[str, Any]:
    reason = instrcount.valgrind_available(marks=True)
    if reason is not None:
        raise BenchError(f"cannot count instructions: {reason}")
    workdir: Path = args.output
    workdir.mkdir(parents=True, exist_ok=True)
    for old in workdir.glob("inprocess.*"):
        old.unlink()
    for old in workdir.glob("server-o*"):
        old.unlink()
    bench = BenchPKI.create(workdir / "pki")
    keys = [v.key for v in variants(bench)]
    results: dict[str, Any] = {}
    started = time.monotonic()
    if "inprocess" in args.only:
        results["inprocess"] = run_inprocess(
            bench,
            workdir,
            requests=args.inprocess_requests,
            baseline=args.inprocess_baseline,
            repeats=args.repeats,
            keys=[*keys, *IN_PROCESS_EXTRA],
        )
    if "server" in args.only:
        s = run_server(
            bench,
            workdir,
            requests=args.requests,
            baseline=args.baseline,
            repeats=args.repeats,
            keys=keys,
            connections=args.connections,
        )
        if args.attribute:
            dumps = s["dumps"]
            if s["per_connection"]:
                cert = (dumps["on/conn-front-proxy-cert,many,0"], dumps["on/conn-front-proxy-cert,one,0"])
                none = (dumps["on/conn-no-cert,many,0"], dumps["on/conn-no-cert,one,0"])
                s["connection_attribution"] = attribute(cert, none, args.connections - 1, 8, object_name)
            s["attribution"] = {
                v.key: attribute(
                    (s["dumps"][f"on/{v.key},{args.requests},0"], s["dumps"][f"on/{v.key},{args.baseline},0"]),
                    (s["dumps"][f"off/{v.key},{args.requests},0"], s["dumps"][f"off/{v.key},{args.baseline},0"]),
                    args.requests - args.baseline,
                )
                for v in variants(bench)
                if v.attached
            }
        results["server"] = s
    results["seconds"] = round(time.monotonic() - started, 1)
    return results


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.instructions", description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", choices=SECTIONS, help="sections to run (default: all)")
    parser.add_argument("--requests", type=int, default=600, help="whole server: the long window (requests)")
    parser.add_argument("--baseline", type=int, default=100, help="whole server: the short window (requests)")
    parser.add_argument("--inprocess-requests", type=int, default=2000)
    parser.add_argument("--inprocess-baseline", type=int, default=400)
    parser.add_argument("--connections", type=int, default=12, help="per-connection windows: K (0: skip)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-attribute", dest="attribute", action="store_false", help="skip callgrind_annotate")
    parser.add_argument("--output", type=Path, default=Path(tempfile.gettempdir()) / "secure-orca-instr")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON")
    # the in-process child, run under valgrind by run_inprocess
    parser.add_argument("--child-inprocess", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--pki", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--marks", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--variants", type=lambda s: s.split(","), default=[], help=argparse.SUPPRESS)
    args = parser.parse_args(list(argv))
    if args.only is None:
        args.only = list(SECTIONS)
    if args.child_inprocess:  # the child's windows come from the generic flags
        return args
    for long, short in ((args.requests, args.baseline), (args.inprocess_requests, args.inprocess_baseline)):
        if not 0 < short < long:
            parser.error("the short window must be positive and shorter than the long one")
    return args


def main(argv: Sequence[str] | None = None, out: Callable[[str], object] = print) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.child_inprocess:
        asyncio.run(_child_inprocess(args))
        return 0
    results = run_all(args)
    bench = BenchPKI.create(args.output / "pki")
    text = render(results, variants(bench))
    (args.output / "instructions.md").write_text(text + "\n")
    if args.json:
        args.json.write_text(json.dumps(jsonable(results), indent=2, default=str) + "\n")
    out(text)
    out(f"\n({results['seconds']} s; dumps and results in {args.output})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
