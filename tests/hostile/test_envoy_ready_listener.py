"""Envoy's readiness listener (deploy's Pods: kubelet's HTTP probe) forwards GET /ready to the loopback admin
interface and nothing else: no other admin page, no admin action, however the path or method is spelled.
Envoy 1.40 runs the listener and the admin cluster exactly as `secure-orca deploy` generates them."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from secure_orca.deploy import manifests as m
from secure_orca.envoy import bootstrap as envoy
from secure_orca.envoy import files
from secure_orca.lab import replicas as launch

pytestmark = [pytest.mark.envoy, pytest.mark.skipif(files.find_envoy() is None, reason="envoy not installed")]


def _request(port: int, method: str, target: str) -> tuple[int, str]:
    """One HTTP/1.1 request, the target sent byte for byte (no client-side normalization); the response read to
    its end as framed (Envoy keeps a closing connection open for its delayed-close timeout)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        conn.sendall(f"{method} {target} HTTP/1.1\r\nHost: lb\r\nContent-Length: 0\r\n\r\n".encode())
        data = b""
        while b"\r\n\r\n" not in data or not _complete(method, data):
            chunk = conn.recv(65536)
            if not chunk:
                break
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), _dechunk(head, body).decode(errors="replace")


def _complete(method: str, data: bytes) -> bool:
    head, _, body = data.partition(b"\r\n\r\n")
    lower = head.lower()
    if method == "HEAD":
        return True
    if b"transfer-encoding: chunked" in lower:
        return body.endswith(b"0\r\n\r\n")
    length = next((int(line.split(b":")[1]) for line in lower.split(b"\r\n") if line.startswith(b"content-length:")), 0)
    return len(body) >= length


def _dechunk(head: bytes, body: bytes) -> bytes:
    if b"transfer-encoding: chunked" not in head.lower():
        return body
    chunks = b""
    while body:
        size, _, rest = body.partition(b"\r\n")
        length = int(size, 16)
        chunks, body = chunks + rest[:length], rest[length + 2 :]
        if length == 0:
            break
    return chunks


def _admin_ready(port: int) -> bool:
    try:
        return _request(port, "GET", "/ready") == (200, "LIVE\n")
    except OSError:
        return False


@pytest.fixture(scope="module")
def ports(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, int]]:
    """(ready listener port, admin port) of a running Envoy."""
    admin_port, ready_port = launch.free_port(), launch.free_port()
    creds = envoy.Credentials(Path("unused"), Path("unused"), Path("unused"))
    config = envoy.LBConfig(upstreams=(envoy.Upstream("127.0.0.1", 1),), credentials=creds, admin_port=admin_port)
    bootstrap = {
        "admin": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": admin_port}}},
        "static_resources": {
            "listeners": [m.ready_listener(ready_port, host="127.0.0.1")],
            "clusters": [m.admin_cluster(config)],
        },
    }
    path = tmp_path_factory.mktemp("ready") / "envoy.json"
    path.write_text(json.dumps(bootstrap))
    binary = files.find_envoy()
    assert binary is not None
    process = launch.start_process("envoy", [binary, "-c", str(path), "--concurrency", "1", "--disable-hot-restart"])
    try:
        deadline = time.monotonic() + 30
        while not _admin_ready(admin_port):
            assert process.popen.poll() is None and time.monotonic() < deadline, process.output()
            time.sleep(0.05)
        yield ready_port, admin_port
    finally:
        process.stop()


def test_ready_is_the_admin_answer(ports: tuple[int, int]) -> None:
    ready, _ = ports
    assert _request(ready, "GET", "/ready") == (200, "LIVE\n")


TARGETS = [
    "/clusters",
    "/config_dump",
    "/stats",
    "/server_info",
    "/certs",
    "/ready/",
    "/READY",
    "//ready",
    "/./ready",
    "/ready/../clusters",
    "/%72eady",
    "/ready%00",
    "/stats?filter=ready",
    "http://lb/clusters",
]
ACTIONS = [
    "/quitquitquit",
    "/healthcheck/fail",
    "/drain_listeners",
    "/logging?level=trace",
    "/reset_counters",
    "/ready",
]


@pytest.mark.parametrize("target", TARGETS)
def test_no_other_admin_page(ports: tuple[int, int], target: str) -> None:
    ready, _ = ports
    status, body = _request(ready, "GET", target)
    assert status in (400, 404), (target, status)
    assert "LIVE" not in body and "cluster" not in body.lower()


@pytest.mark.parametrize("path", ACTIONS)
def test_no_admin_action(ports: tuple[int, int], path: str) -> None:
    ready, admin = ports
    for method in ("POST", "PUT", "HEAD"):
        assert _request(ready, method, path)[0] in (400, 404), (method, path)
    assert _admin_ready(admin)  # nothing reached the admin interface: not drained, not failed, still running
