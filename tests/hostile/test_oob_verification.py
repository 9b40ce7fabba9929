"""The out-of-band stream verifies its caller's chain as the in-band path does, in a worker
thread and charged to the caller's address, when it opens and again after a credential reload. The server is
assembled in process from ``serve``'s flags; the stream is driven over ASGI; every chain verification records
the thread it ran on and the address it was charged to (counted, never timed)."""

from __future__ import annotations

import argparse
import asyncio
import threading
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

import pytest

from secure_orca import pki
from secure_orca.cli import serve as serve_cli
from secure_orca.credentials import devpki
from secure_orca.lab import launcher as lb
from secure_orca.lab import replicas as launch
from secure_orca.orca import oob
from secure_orca.server.assembly import Server
from secure_orca.server.config import build_config
from secure_orca.x509.cache import ChainCache

ADDRESS = "192.0.2.33"


def assembled(dev: pki.DevPKI) -> Server:
    parser = argparse.ArgumentParser()
    serve_cli.add_arguments(parser)
    argv = launch.serve_argv(dev, lb.replica_flags(dev, "front-proxy"))
    return Server.assemble(build_config(parser.parse_args(argv[argv.index("serve") + 1 :])))


def test_the_stream_verifies_off_the_loop_charged_to_its_address_reloads_included(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dev = devpki.generate(tmp_path / "pki")
    server = assembled(dev)
    assert server.oob is not None
    calls: list[tuple[int, str | None]] = []  # (thread, address charged) of every verification
    compute = ChainCache.compute

    def recorded(cache: ChainCache, chain: Any, now: Any, address: str | None = None) -> Any:
        calls.append((threading.get_ident(), address))
        return compute(cache, chain, now, address)

    monkeypatch.setattr(ChainCache, "compute", recorded)
    chain = [dev.cert("front_proxy_client").read_text()]
    scope = {
        "type": "http",
        "http_version": "2",
        "method": "POST",
        "path": oob.PATH,
        "headers": [(b"content-type", b"application/grpc"), (b"te", b"trailers")],
        "extensions": {"tls": {"client_cert_chain": chain}},
        "client": (ADDRESS, 40000),
    }

    async def scenario() -> tuple[int, list[dict[str, Any]]]:
        loop_thread = threading.get_ident()
        sent: list[dict[str, Any]] = []
        opened, gone = asyncio.Event(), asyncio.Event()
        messages = [{"type": "http.request", "body": oob.request_frame(1.0), "more_body": False}]

        async def receive() -> dict[str, Any]:
            if messages:
                return messages.pop()
            await gone.wait()
            return {"type": "http.disconnect"}

        async def send(message: MutableMapping[str, Any]) -> None:
            sent.append(dict(message))
            if message["type"] == "http.response.start":
                opened.set()

        async def open_stream() -> None:
            await server.entry(scope, receive, send)

        stream = asyncio.create_task(open_stream())
        await asyncio.wait_for(opened.wait(), 10)
        bundle = dev.cert("front_proxy_ca")  # the same CA and another: a new Authority, the same entitlement
        bundle.write_bytes(bundle.read_bytes() + pki.make_ca("another-front-proxy-ca").cert_pem())
        assert server.reloader.check()
        for _ in range(500):  # the stream re-checks at once (``reloaded``)
            if len(calls) >= 2:
                break
            await asyncio.sleep(0.01)
        gone.set()
        await asyncio.wait_for(stream, 10)
        return loop_thread, sent

    loop_thread, sent = asyncio.run(scenario())
    assert not any(m["type"] == "http.response.trailers" for m in sent), "the reloaded trust withdrew the stream"
    assert len(calls) == 2, "one verification at open, one under the reloaded Authority"
    assert all(thread != loop_thread for thread, _ in calls), "a stream's chain was verified on the event loop"
    assert all(address == ADDRESS for _, address in calls), "a stream's verification was charged to no address"
