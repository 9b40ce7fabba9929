"""The one builder of h2load command lines (nghttp2's load generator), for the lab, the benchmarks and the tests.

Flags as h2load(1) of nghttp2 1.x defines them: ``-c`` clients (connections), ``-m`` concurrent streams per
client, ``-t`` threads, ``-n`` total requests or ``-D`` a duration (with a unit, here ms), ``--warm-up-time``,
``--rps`` requests per second *per client*, ``-H`` an extra request header, ``--log-file`` one line per request
(tab-separated: start, status, microseconds), ``--h1`` HTTP/1.1 instead of HTTP/2.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path


def argv(
    url: str,
    *,
    clients: int = 1,
    streams: int = 1,
    requests: int | None = None,
    seconds: float | None = None,
    warmup: float | None = None,
    rps: float | None = None,
    threads: int | None = None,
    headers: Iterable[str] = (),
    log_file: Path | None = None,
    h1: bool = False,
    program: str = "h2load",
) -> list[str]:
    """The command line: ``requests`` in total, or for ``seconds`` (rounded to ms) when given; ``rps`` per
    client, rounded to a whole number of at least 1 (h2load takes an integer)."""
    out = [program, "-c", str(clients), "-m", str(streams)]
    out += ["-t", str(threads)] if threads is not None else []
    if seconds is not None:
        out += ["-D", f"{round(seconds * 1000)}ms"]
        out += [f"--warm-up-time={round(warmup * 1000)}ms"] if warmup else []
    else:
        out += ["-n", str(requests or clients)]
    out += [f"--rps={max(1, round(rps))}"] if rps is not None else []
    out += [f"--log-file={log_file}"] if log_file is not None else []
    out += ["--h1"] if h1 else []
    for header in headers:  # "name: value"
        out += ["-H", header]
    return [*out, url]
