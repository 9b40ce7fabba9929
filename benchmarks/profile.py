"""Where the server's time goes under load: the in-process server runs variant (b) (front proxy authorised,
report attached) under cProfile in its own thread, and own time is grouped by component. cProfile inflates
Python call overhead, so read shares, not absolute times."""

from __future__ import annotations

import cProfile
import pstats
import time
from pathlib import Path
from typing import Any

from .common import BenchPKI, Load, inprocess_server, markdown_table, run_h2load

# First match wins; patterns are matched against the profiled function's file path.
COMPONENTS = [
    (
        "feature: middleware, policy, opt-in, chain cache",
        ("secure_orca/server/middleware.py", "secure_orca/authz/", "secure_orca/orca/optin.py", "secure_orca/x509/"),
    ),
    ("server HTTP/2 and TLS glue (secure_orca/server/http/)", ("secure_orca/server/http/",)),
    ("demo backend", ("secure_orca/server/demo.py", "secure_orca/server/asgi.py", "uuid.py", "json/")),
    ("hypercorn", ("hypercorn/",)),
    ("h2 + hpack (pure-Python HTTP/2)", ("/h2/", "/hpack/")),
    ("asyncio + ssl (stdlib event loop, TLS records)", ("asyncio/", "ssl.py", "selectors.py")),
]
TLS_CALLS = "OpenSSL calls (handshakes, record encryption)"
SOCKET_CALLS = "socket and epoll system calls"
OTHER = "other (builtins, the rest)"


def component(filename: str, function: str) -> str:
    """The component a profiled function belongs to; C functions (filename ``~``) by their name."""
    if filename == "~":
        if "_ssl." in function or "SSLObject" in function:
            return TLS_CALLS
        if any(word in function for word in ("socket", "epoll", "select")):
            return SOCKET_CALLS
        return OTHER
    for name, patterns in COMPONENTS:
        if any(p in filename for p in patterns):
            return name
    return OTHER


def run(bench: BenchPKI, shim: Path, workdir: Path, load: Load) -> dict[str, Any]:
    profiler = cProfile.Profile(time.thread_time)  # CPU time of the server thread: waiting in epoll is free
    with inprocess_server(bench.serve_argv(enabled=True), profiler=profiler) as server:
        result = run_h2load(server.url, load, bench.front_proxy(), shim, workdir)
    stats = pstats.Stats(profiler)
    own: dict[str, float] = {}
    for (filename, _line, function), (_cc, _nc, tottime, _ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        key = component(filename, function)
        own[key] = own.get(key, 0.0) + tottime
    total = sum(own.values()) or 1.0
    return {"load": load.label, "requests": result.succeeded, "share": {k: v / total for k, v in own.items()}}


def render(result: dict[str, Any]) -> str:
    order = [name for name, _ in COMPONENTS] + [TLS_CALLS, SOCKET_CALLS, OTHER]
    rows = [[name, f"{result['share'].get(name, 0.0) * 100:.1f}%"] for name in order]
    return (
        f"{markdown_table(['component', 'share of server thread CPU (own time)'], rows)}\n\n"
        f"cProfile of the server thread while h2load ({result['load']}) ran variant (b): {result['requests']} requests."
    )
