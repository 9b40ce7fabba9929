"""The Go peer (benchmarks/gopeer/main.go): Go's net/http doing the same gate on /healthz, built with the Go
toolchain of the ``peers`` extra (secure_orca.lab.gobuild: cached per source and Go version) and run as a replica."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from secure_orca import pki
from secure_orca.lab import gobuild
from secure_orca.lab import replicas as launch

SOURCE = Path(__file__).with_name("gopeer") / "main.go"


@contextmanager
def go_peer(dev: pki.DevPKI, *, max_procs: int | None = None) -> Iterator[launch.Replica]:
    """A running Go peer trusting ``dev``'s front-proxy CA (GOMAXPROCS=``max_procs`` when given)."""
    binary = gobuild.build("gopeer", SOURCE)
    argv = [
        str(binary),
        "-cert",
        str(dev.cert("server")),
        "-key",
        str(dev.key("server")),
        "-requestheader-ca",
        str(dev.cert("front_proxy_ca")),
        "-allowed-names",
        pki.FRONT_PROXY_CN,
    ]
    env = {"GOMAXPROCS": str(max_procs)} if max_procs else None
    process = launch.start_process("go-peer", argv, env)
    try:
        match = launch.wait_for(process, launch.READY)
        yield launch.Replica(process, match.group(1), int(match.group(2)))
    finally:
        process.stop()
