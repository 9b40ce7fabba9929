"""What the live tests of ``serve --workers`` share: the server's flags, clients, and connections held on each
worker (procfs tells which worker accepted a connection)."""

from __future__ import annotations

import shutil
import ssl
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from secure_orca import pki
from secure_orca.lab import launcher as lb
from secure_orca.lab import replicas as launch
from secure_orca.lab.sockets import children, connections, listening
from secure_orca.orca.headers import OPTIN, REPORT
from tests.replicas import run_replicas

WORKERS = 2


def argv(dev: pki.DevPKI, *extra: str, option: str = "front-proxy,load-reader") -> list[str]:
    flags = lb.replica_flags(dev, option, "--workers", str(WORKERS), *extra)
    return launch.serve_argv(dev, flags)


def client(dev: pki.DevPKI, role: str | None = "front_proxy_client") -> httpx.Client:
    """An HTTP/2 client presenting ``role``'s certificate (None: none)."""
    context = ssl.create_default_context(cafile=str(dev.cert("ca")))
    if role is not None:
        context.load_cert_chain(dev.cert(role), dev.key(role))
    return httpx.Client(verify=context, http2=True, timeout=20, headers={"X-Remote-User": "lb"})


def report(http: httpx.Client, url: str, path: str = "/healthz") -> str:
    response = http.get(url + path, headers={OPTIN: "TEXT"})
    assert response.status_code == 200, response.text
    return response.headers[REPORT]


def workers_of(replica: launch.Replica) -> list[int]:
    """The supervisor's children that hold the listening socket: its workers."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        pids = listening(children(replica.process.popen.pid), replica.port)
        if len(pids) == WORKERS:
            return pids
        time.sleep(0.05)
    raise AssertionError(f"not {WORKERS} workers: {children(replica.process.popen.pid)}")


def spread(
    replica: launch.Replica,
    dev: pki.DevPKI,
    per_worker: int,
    opened: Callable[[], httpx.Client] | None = None,
    touch: Callable[[httpx.Client], object] | None = None,
) -> dict[int, list[httpx.Client]]:
    """Open connections (``opened``, by default the front proxy's) one at a time, each used once (``touch``, by
    default a report on /healthz), until each worker holds ``per_worker`` of them."""
    pids = workers_of(replica)
    held: dict[int, list[httpx.Client]] = {pid: [] for pid in pids}
    for _ in range(60):
        if all(len(clients) >= per_worker for clients in held.values()):
            return held
        before = connections(pids, replica.port)
        http = opened() if opened is not None else client(dev)
        touch(http) if touch is not None else report(http, replica.url)
        after = connections(pids, replica.port)
        (owner,) = [pid for pid in pids if after[pid] > before[pid]]
        if len(held[owner]) < per_worker:
            held[owner].append(http)
        else:
            http.close()
    raise AssertionError(f"60 new connections did not reach every worker: {connections(pids, replica.port)}")


def close(held: dict[int, list[httpx.Client]]) -> None:
    for clients in held.values():
        for http in clients:
            http.close()


OPENS = Path(__file__).with_name("opens.py")


@dataclass
class Live:
    """A ``serve --workers 2`` whose every credential file is a copy under ``root``."""

    replica: launch.Replica
    dev: pki.DevPKI
    record: Path  # pid and path of every open() under ``root``

    @property
    def root(self) -> Path:
        return self.dev.root

    def log(self) -> str:
        return "".join(self.replica.process.lines)

    def opened(self) -> dict[int, int]:
        """How many credential files each process opened so far."""
        counts: dict[int, int] = {}
        for line in self.record.read_text().splitlines():
            pid = int(line.split(" ", 1)[0])
            counts[pid] = counts.get(pid, 0) + 1
        return counts

    def anonymous(self) -> httpx.Client:
        return client(self.dev, None)

    def held(self, secret: str) -> dict[int, list[httpx.Client]]:
        """One connection held on each worker, each granted a report with ``secret``."""

        def touch(http: httpx.Client) -> None:
            assert granted(http, self.replica.url, secret)

        return spread(self.replica, self.dev, 1, self.anonymous, touch)


def granted(http: httpx.Client, url: str, secret: str) -> bool:
    response = http.get(url + "/healthz", headers={OPTIN: f"TEXT; secret={secret}"})
    assert response.status_code == 200, response.text
    return REPORT in response.headers


def rotate(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Atomic replacement, as a Kubernetes volume does it."""
    new = path.with_name(path.name + ".new")
    new.write_bytes(data)
    new.chmod(mode)
    new.replace(path)


def eventually(check: Callable[[], bool], what: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"not seen within {timeout}s: {what}"
        time.sleep(0.05)


@contextmanager
def live(dev_pki: pki.DevPKI, tmp_path: Path, *extra: str) -> Iterator[Live]:
    root = tmp_path / "credentials"
    shutil.copytree(dev_pki.root, root)
    dev = pki.DevPKI(root)
    record = tmp_path / "opens.log"
    command = argv(dev, "--credential-reload-interval", "100ms", *extra, option="front-proxy,load-reader,shared-secret")
    assert command[1:3] == ["-m", "secure_orca"]
    command[1:3] = [str(OPENS), str(record), str(root)]
    with run_replicas([command]) as (replica,):
        yield Live(replica, dev, record)
