"""The alert rules of docs/operations.md, as written there: checked by promtool, then evaluated by a real
Prometheus (Debian's ``prometheus`` package) scraping a live replica whose load balancer reads out of band.

Ranges are shortened (5m and 10m to 10s, 1h to 30s) and every ``for`` to 0, so that the run takes seconds; the
expressions are otherwise the documented ones. Scenario: an out-of-band reader (the load-reader certificate,
frame by frame over real TLS) and in-band traffic without any opt-in. The documented no-report alert stays quiet
while the old in-band-only expression is true; then the reader goes and the alert fires, with the lost-stream
alert."""

from __future__ import annotations

import re
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from secure_orca import pki
from secure_orca.lab import launcher as lb
from secure_orca.lab import replicas as launch
from secure_orca.orca import oob
from tests import plainhttp
from tests.hostile.h2client import H2Client
from tests.replicas import run_replicas

DOC = Path(__file__).resolve().parents[2] / "docs" / "operations.md"
SHORTER = {"[5m]": "[10s]", "[10m]": "[10s]", "[1h]": "[30s]"}
OLD_ALERT = 'rate(secure_orca_load_reports_total{result="attached"}[10s]) == 0'

pytestmark = pytest.mark.skipif(
    not (shutil.which("prometheus") and shutil.which("promtool")), reason="prometheus and promtool not installed"
)


def documented_rules() -> str:
    found = re.search(r"### Alerts\n.*?```yaml\n(.*?)```", DOC.read_text(), re.S)
    assert found, "no yaml block under '### Alerts' in docs/operations.md"
    return found.group(1)


def shortened(rules: str) -> str:
    document = yaml.safe_load(rules)
    for group in document["groups"]:
        for rule in group["rules"]:
            for long, short in SHORTER.items():
                rule["expr"] = rule["expr"].replace(long, short)
            rule.pop("for", None)
    return yaml.safe_dump(document)


def test_the_documented_rules_pass_promtool(tmp_path: Path) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(documented_rules())
    checked = subprocess.run(["promtool", "check", "rules", str(rules)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def metrics_target(replica: launch.Replica) -> str:
    found = re.search(r"metrics on http://(\S+)/metrics", "".join(replica.process.lines))
    assert found, replica.process.output()
    return found.group(1)


class Prometheus:
    def __init__(self, url: str) -> None:
        self.url = url

    def query(self, expr: str) -> list[dict[str, Any]]:
        reply = plainhttp.get(f"{self.url}/api/v1/query", params={"query": expr}, timeout=5)
        if reply.status_code == 503:  # still starting ("Service Unavailable", not JSON): ``eventually`` retries
            reply.raise_for_status()
        response = reply.json()
        assert response["status"] == "success", response
        return list(response["data"]["result"])

    def firing(self) -> set[str]:
        alerts = plainhttp.get(f"{self.url}/api/v1/alerts", timeout=5).json()["data"]["alerts"]
        return {a["labels"]["alertname"] for a in alerts if a["state"] == "firing"}


@pytest.fixture()
def prometheus_of(tmp_path: Path) -> Iterator[Callable[[launch.Replica], Prometheus]]:
    processes: list[subprocess.Popen[bytes]] = []

    def start(replica: launch.Replica) -> Prometheus:
        rules = tmp_path / "rules.yaml"
        rules.write_text(shortened(documented_rules()))
        config = tmp_path / "prometheus.yml"
        config.write_text(
            yaml.safe_dump(
                {
                    "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                    "rule_files": [str(rules)],
                    "scrape_configs": [
                        {"job_name": "secure-orca", "static_configs": [{"targets": [metrics_target(replica)]}]}
                    ],
                }
            )
        )
        port = free_port()
        argv = ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}"]
        argv.append(f"--web.listen-address=127.0.0.1:{port}")
        processes.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        server = Prometheus(f"http://127.0.0.1:{port}")
        eventually(lambda: bool(server.query("up == 1")), "Prometheus scraping the replica")
        return server

    yield start
    for process in processes:
        process.terminate()
        process.wait(10)


def eventually(check: Callable[[], bool], what: str, timeout: float = 40.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"not seen within {timeout}s: {what}")


class StreamReader:
    """A load balancer reading out of band: one StreamCoreMetrics stream, read (and its window reopened) in a
    thread until ``close``."""

    def __init__(self, replica: launch.Replica, dev: pki.DevPKI) -> None:
        role = "load_reader_client"
        self.client = H2Client.connect(replica, dev.cert("ca"), (dev.cert(role), dev.key(role)))
        stream = self.client.start("POST", oob.PATH, [("content-type", "application/grpc"), ("te", "trailers")])
        self.client.data(stream, oob.request_frame(0.2))
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.client.pump_until, args=(self.stop.is_set,), daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.stop.set()
        self.client.close()
        self.thread.join(15)


def traffic(
    replica: launch.Replica, dev: pki.DevPKI, seconds: float, until: Callable[[], bool] = lambda: False
) -> bool:
    """In-band requests without any opt-in, 5 a second (the server serves; nothing asks for a report), for
    ``seconds`` or until ``until()`` holds (checked every second); returns whether it held."""
    context = ssl.create_default_context(cafile=str(dev.cert("ca")))
    with httpx.Client(verify=context, http2=True, timeout=5) as client:
        deadline = time.monotonic() + seconds
        checked = time.monotonic()
        while time.monotonic() < deadline:
            assert client.get(replica.url + "/healthz").status_code == 200
            time.sleep(0.2)
            if time.monotonic() - checked >= 1:
                checked = time.monotonic()
                if until():
                    return True
    return False


@pytest.mark.starts_first  # about 30 s of Prometheus rule evaluations
def test_the_documented_alerts_fit_an_out_of_band_load_balancer(
    dev_pki: pki.DevPKI, prometheus_of: Callable[[launch.Replica], Prometheus]
) -> None:
    flags = lb.replica_flags(
        dev_pki,
        "load-reader",
        "--endpoint-load-metrics-oob-min-interval",
        "200ms",
        "--metrics-bind-address",
        "127.0.0.1:0",
    )
    with run_replicas([launch.serve_argv(dev_pki, flags)]) as (replica,):
        reader = StreamReader(replica, dev_pki)
        try:
            prometheus = prometheus_of(replica)
            traffic(replica, dev_pki, 12)  # more than the shortened 10 s ranges
            assert prometheus.query("sum(rate(secure_orca_oob_reports_sent_total[10s])) > 0")
            assert prometheus.query(OLD_ALERT), "the old in-band-only alert would not page here"
            assert "SecureOrcaNoLoadReports" not in prometheus.firing()
        finally:
            reader.close()
        # The reader gone, traffic goes on: no report leaves by either path.
        expected = {"SecureOrcaNoLoadReports", "SecureOrcaOutOfBandStreamsLost"}
        assert traffic(replica, dev_pki, 40, lambda: expected <= prometheus.firing()), prometheus.firing()
