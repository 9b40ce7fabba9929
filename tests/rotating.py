"""A live server whose credential files a test rotates (the ``rig`` fixture, shared by tests/conftest.py),
with the atomic replacement a Kubernetes volume makes and a bounded wait for what the reload shows."""

from __future__ import annotations

import re
import shutil
import ssl
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from secure_orca import pki
from secure_orca.lab import replicas as launch
from tests import plainhttp
from tests.replicas import run_replicas

OPT_IN = "endpoint-load-metrics-request"
RELOAD = "0.1s"


def eventually(check: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    """Poll until ``check`` holds (bounded); the reload interval is 100 ms."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"not seen within {timeout}s: {what}")


@dataclass
class Rig:
    replica: launch.Replica
    root: Path
    ca: Path
    metrics_url: str

    def client(self, cert: Path | None = None, key: Path | None = None) -> httpx.Client:
        context = ssl.create_default_context(cafile=str(self.ca))
        if cert is not None:
            context.load_cert_chain(cert, key)
        return httpx.Client(verify=context, http2=True, timeout=10)

    def report(self, http: httpx.Client, value: str = "TEXT") -> bool:
        response = http.get(self.replica.url + "/version", headers={OPT_IN: value, "x-remote-user": "proxied-user"})
        granted = "endpoint-load-metrics" in response.headers
        # A certificate that is not (or no longer) the front proxy's and no client certificate: 401, as in kube.
        assert response.status_code in ((200,) if granted else (200, 401))
        return granted

    def metrics(self) -> str:
        return plainhttp.get(self.metrics_url, timeout=5).text

    def log(self) -> str:
        return "".join(self.replica.process.lines)


def replace(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Atomic replacement, as a Kubernetes volume or a rotation script does it."""
    tmp = path.with_name(path.name + ".new")
    tmp.write_bytes(data)
    tmp.chmod(mode)
    tmp.replace(path)


@pytest.fixture()
def rig(dev_pki: pki.DevPKI, tmp_path: Path) -> Iterator[Rig]:
    root = tmp_path / "live"
    shutil.copytree(dev_pki.root, root)
    live = pki.DevPKI(root)
    names = root / "allowed-names"
    names.write_text(f"# front proxies\n{pki.FRONT_PROXY_CN}\n")
    flags = [
        "--feature-gates",
        "RequestCostAggregation=true",
        "--enable-endpoint-load-metrics",
        "--endpoint-load-metrics-auth",
        "front-proxy,shared-secret",
        "--requestheader-client-ca-file",
        str(live.cert("front_proxy_ca")),
        "--requestheader-allowed-names-file",
        str(names),
        "--endpoint-load-metrics-secret-file",
        str(live.secret),
        "--credential-reload-interval",
        RELOAD,
        "--metrics-bind-address",
        "127.0.0.1:0",
    ]
    with run_replicas([launch.serve_argv(live, flags)]) as (replica,):
        match = re.search(r"metrics on (http://\S+/metrics)", "".join(replica.process.lines))
        assert match, replica.process.output()
        yield Rig(replica, root, live.cert("ca"), match.group(1))
