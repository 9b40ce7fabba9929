"""The rooms one request walks through: the secure_orca module of each function entered (``sys.setprofile``'s
calls, a coroutine's resumptions included) while the assembled ASGI stack, in process, serves one front-proxy
request with the opt-in, after one warm-up request. Each step from one function to the next is a *stay* (the
same module), a *return* (a module already left) or a new room; a *climb* enters a module of a higher
import-linter layer (pyproject.toml) than the one before. Counted, never timed.
Run: ``python -m benchmarks.request_walk``."""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import tomllib
from collections import Counter
from collections.abc import MutableMapping
from itertools import pairwise
from pathlib import Path
from types import FrameType
from typing import Any

from secure_orca import pki
from secure_orca.cli import serve as serve_cli
from secure_orca.credentials import devpki
from secure_orca.lab import launcher as lb
from secure_orca.lab import replicas as launch
from secure_orca.orca.headers import OPTIN_BYTES
from secure_orca.server.asgi import ASGIApp
from secure_orca.server.assembly import Server
from secure_orca.server.config import build_config

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def layer_of() -> dict[str, int]:
    """Package -> its rank in the import-linter layers contract (0: the top)."""
    contracts = tomllib.loads(PYPROJECT.read_text())["tool"]["importlinter"]["contracts"]
    (layers,) = [c["layers"] for c in contracts if c["type"] == "layers"]
    return {name.strip(): rank for rank, names in enumerate(layers) for name in names.split("|")}


def walk(modules: list[str], ranks: dict[str, int]) -> Counter[str]:
    """Stays, returns, new rooms and climbs of a sequence of module names."""
    rank = {m: next(r for p, r in ranks.items() if m == p or m.startswith(p + ".")) for m in set(modules)}
    counts: Counter[str] = Counter()
    left: set[str] = set()
    for before, after in pairwise(modules):
        if after == before:
            counts["stays"] += 1
            continue
        counts["returns" if after in left else "new rooms"] += 1
        counts["climbs"] += rank[after] < rank[before]
        left.add(before)
    return counts


def assembled(dev: pki.DevPKI, *extra: str) -> Server:
    """The server ``serve`` assembles for the front-proxy option with ``extra`` flags (nothing bound)."""
    flags = argparse.ArgumentParser()
    serve_cli.add_arguments(flags)
    argv = launch.serve_argv(dev, lb.replica_flags(dev, "front-proxy", *extra))
    return Server.assemble(build_config(flags.parse_args(argv[argv.index("serve") + 1 :])))


def request(dev: pki.DevPKI) -> dict[str, Any]:
    """A front-proxy request naming a user, with the opt-in."""
    return {
        "type": "http",
        "http_version": "2",
        "method": "GET",
        "path": "/version",
        "raw_path": b"/version",
        "query_string": b"",
        "headers": [(OPTIN_BYTES, b"TEXT"), (b"x-remote-user", b"jane")],
        "extensions": {"tls": {"client_cert_chain": [dev.cert("front_proxy_client").read_text()]}},
        "client": ("192.0.2.7", 40000),
    }


async def served(app: ASGIApp, scope: dict[str, Any]) -> int:
    """The status of ``scope`` served by ``app``."""
    sent: list[MutableMapping[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return int(sent[0]["status"])


def rooms(server: Server, dev: pki.DevPKI) -> list[str]:
    """The module of each secure_orca function entered while one request is served (after a warm-up)."""
    modules: list[str] = []

    def profile(frame: FrameType, event: str, _: Any) -> None:
        name = frame.f_globals.get("__name__", "")
        if event == "call" and name.startswith("secure_orca."):
            modules.append(name)

    async def main() -> None:
        app, scope = server.entry, request(dev)  # what ``serve`` serves, taken once as it does
        assert await served(app, request(dev)) == 200
        sys.setprofile(profile)
        try:
            status = await served(app, scope)
        finally:
            sys.setprofile(None)
        assert status == 200

    asyncio.run(main())
    return modules


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--show", action="store_true", help="print the sequence of rooms")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as root:
        dev = devpki.generate(Path(root))
        modules = rooms(assembled(dev), dev)
    if args.show:
        print("\n".join(modules))
    counts = walk(modules, layer_of())
    print(
        f"{len(modules)} functions entered in {len(set(modules))} modules: "
        + ", ".join(f"{counts[k]} {k}" for k in ("stays", "returns", "new rooms", "climbs"))
    )


if __name__ == "__main__":
    main()
