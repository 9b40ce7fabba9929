"""The Go peer (benchmarks/gopeer/main.go): Go's net/http doing the same gate on /healthz, or KEP-6315's options as
a kube-apiserver filter would do them (``option``), built with the Go toolchain of the ``peers`` extra
(secure_orca.lab.gobuild: cached per source and Go version) and run as a replica."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from secure_orca import pki
from secure_orca.lab import gobuild
from secure_orca.lab import replicas as launch

SOURCE = Path(__file__).with_name("gopeer") / "main.go"
GO_OPTIONS = ("off", "header-only", "front-proxy", "load-reader", "shared-secret")  # its -endpoint-load-metrics-auth


def binary() -> Path:
    return gobuild.build("gopeer", SOURCE)


def peer_args(dev: pki.DevPKI, option: str | None = None) -> list[str]:
    """The peer's flags: without ``option``, the benchmarks' /healthz gate; with one (``GO_OPTIONS``), the
    kube-shaped filter in that mode, holding every option's trust material as the feature-off replica does."""
    args = ["-cert", str(dev.cert("server")), "-key", str(dev.key("server"))]
    args += ["-requestheader-ca", str(dev.cert("front_proxy_ca")), "-allowed-names", pki.FRONT_PROXY_CN]
    if option is None:
        return args
    if option not in GO_OPTIONS:
        raise ValueError(f"the Go peer has no option {option!r}")
    return [
        *args,
        "-endpoint-load-metrics-auth",
        option,
        "-load-reader-ca",
        str(dev.cert("load_reader_ca")),
        "-load-reader-allowed-names",
        pki.LOAD_READER_CN,
        "-secret-file",
        str(dev.secret),
        "-client-ca",
        str(dev.cert("client_ca")),
    ]


@contextmanager
def go_peer(dev: pki.DevPKI, *, max_procs: int | None = None, option: str | None = None) -> Iterator[launch.Replica]:
    """A running Go peer trusting ``dev``'s CAs (GOMAXPROCS=``max_procs`` when given), in ``option``'s mode."""
    argv = [str(binary()), *peer_args(dev, option)]
    env = {"GOMAXPROCS": str(max_procs)} if max_procs else None
    process = launch.start_process("go-peer", argv, env)
    try:
        match = launch.wait_for(process, launch.READY)
        yield launch.Replica(process, match.group(1), int(match.group(2)))
    finally:
        process.stop()
