"""A backend's own load report, for the entitled only (``--proxy ...;report=backend|merged``), over HTTP/2 and
HTTP/1.1, against a backend that answers ``endpoint-load-metrics-format`` to anyone as vLLM does.

Before issue 39 an unentitled client's ``endpoint-load-metrics-format`` reached the backend (which did the work
of reporting; its report was then stripped), and an entitled load reader got the gateway's report, never the
backend's. Now the dialect header reaches a backend only from the proxy, only for a granted request, in no
client's spelling."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from secure_orca import pki
from secure_orca.lab import replicas as launch
from secure_orca.orca.dialect import DIALECT_SPELLINGS
from secure_orca.orca.headers import OPTIN
from secure_orca.orca.report import parse_text
from tests import proxied
from tests.replicas import run_replicas

from ..conftest import ClientCert, fp_flags
from .backends import KV_CACHE, Recorded, reporting_backend

PROTOCOLS = ["h2", "http1.1"]
SPELLINGS = [
    "endpoint-load-metrics-format",
    "Endpoint-Load-Metrics-Format",
    "endpoint_load_metrics_format",
    "endpoint-load_metrics-format",
    "endpoint-load-metrics-format-bin",
    "ENDPOINT_LOAD_METRICS_FORMAT_BIN",
]


@dataclass
class Rig:
    replica: launch.Replica
    recorded: Recorded
    dev_pki: pki.DevPKI
    front_proxy: ClientCert

    def client(self, protocol: str, entitled: bool) -> httpx.Client:
        """The front proxy's certificate when ``entitled`` (option 2 grants its opt-in)."""
        return proxied.client(self.dev_pki.cert("ca"), protocol, self.front_proxy if entitled else None)

    def dialect_seen(self, since: int) -> list[list[tuple[str, str]]]:
        """Every dialect header the backend received since ``since``, per request."""
        return [
            [(n, v) for n, v in headers if n.lower().encode() in DIALECT_SPELLINGS]
            for headers in self.recorded.headers[since:]
        ]


@pytest.fixture(scope="module")
def rig(dev_pki: pki.DevPKI, client_certs: dict[str, ClientCert]) -> Iterator[Rig]:
    with reporting_backend() as (url, recorded):
        flags = [
            *fp_flags(dev_pki),
            "--proxy",
            f"/backend={url};report=backend",
            "--proxy",
            f"/json={url};report=backend;backend-format=json",
            "--proxy",
            f"/merged={url};report=merged",
            "--proxy",
            f"/local={url}",
        ]
        with run_replicas([launch.serve_argv(dev_pki, flags)]) as (replica,):
            yield Rig(replica, recorded, dev_pki, client_certs["front-proxy"])


LB = {OPTIN: "TEXT", "x-remote-user": "envoy-lb"}


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("route", ["/backend", "/json"])
def test_an_entitled_reader_gets_the_backends_report(rig: Rig, protocol: str, route: str) -> None:
    before = len(rig.recorded.headers)
    with rig.client(protocol, entitled=True) as http:
        response = http.get(f"{rig.replica.url}{route}/v1/models", headers=LB)
    assert response.status_code == 200
    report = parse_text(response.headers["endpoint-load-metrics"])
    assert report.named_metrics == {"kv_cache_usage_perc": KV_CACHE, "num_requests_waiting": 2.0}
    assert report.cpu_utilization is None  # the backend's report, not the gateway's
    asked = "json" if route == "/json" else "text"
    assert rig.dialect_seen(before) == [[("endpoint-load-metrics-format", asked)]]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_merged_carries_the_backends_metrics_in_our_report(rig: Rig, protocol: str) -> None:
    with rig.client(protocol, entitled=True) as http:
        response = http.get(f"{rig.replica.url}/merged/v1/models", headers=LB)
    report = parse_text(response.headers["endpoint-load-metrics"])
    assert report.named_metrics["kv_cache_usage_perc"] == KV_CACHE
    assert "in_flight_requests" in report.named_metrics and report.cpu_utilization is not None


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("route", ["/backend", "/local", "/merged"])
@pytest.mark.parametrize("spelling", SPELLINGS)
def test_no_dialect_header_from_a_client_reaches_the_backend(
    rig: Rig, protocol: str, route: str, spelling: str
) -> None:
    before = len(rig.recorded.headers)
    with rig.client(protocol, entitled=False) as http:
        response = http.get(f"{rig.replica.url}{route}/v1/models", headers={spelling: "text", OPTIN: "TEXT"})
    assert response.status_code == 200
    assert "endpoint-load-metrics" not in response.headers
    assert rig.dialect_seen(before) == [[]]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_an_entitled_clients_own_dialect_header_is_replaced(rig: Rig, protocol: str) -> None:
    before = len(rig.recorded.headers)
    with rig.client(protocol, entitled=True) as http:
        http.get(f"{rig.replica.url}/backend/v1/models", headers={**LB, "Endpoint_Load_Metrics_Format": "json"})
        http.get(f"{rig.replica.url}/local/v1/models", headers={**LB, "endpoint-load-metrics-format": "json"})
    assert rig.dialect_seen(before) == [[("endpoint-load-metrics-format", "text")], []]


def test_a_report_envoy_would_refuse_is_no_report(rig: Rig) -> None:
    with rig.client("h2", entitled=True) as http:
        response = http.get(f"{rig.replica.url}/backend/garbage", headers=LB)
    assert response.status_code == 200
    assert "endpoint-load-metrics" not in response.headers


def test_out_of_band_carries_the_last_backend_report_only_while_fresh(
    dev_pki: pki.DevPKI, client_certs: dict[str, ClientCert]
) -> None:
    """The out-of-band stream serves the gateway's report with the last backend report seen in band, for at most
    ``--proxy-report-max-age``; after that, the gateway's alone (a stale backend figure is never served as fresh)."""
    from tests import oobcalls

    fp = client_certs["front-proxy"]
    with reporting_backend() as (url, _):
        flags = [*fp_flags(dev_pki), "--proxy", f"/backend={url};report=backend", "--proxy-report-max-age", "2s"]
        with (
            run_replicas([launch.serve_argv(dev_pki, flags)]) as (replica,),
            oobcalls.channel(replica, dev_pki, fp.cert, fp.key) as channel,
        ):
            reports = iter(oobcalls.stream_core_metrics(channel)(oobcalls.ask(0.5), timeout=30))
            before = next(reports)  # no backend report seen yet
            with proxied.client(dev_pki.cert("ca"), "h2", fp) as http:
                assert http.get(f"{replica.url}/backend/v1/models", headers=LB).status_code == 200
            seen = [next(reports) for _ in range(8)]  # 1 s apart (the stream's floor), long past 2 s
    assert "kv_cache_usage_perc" not in before.named_metrics
    carrying = ["kv_cache_usage_perc" in report.named_metrics for report in seen]
    assert carrying[0] and not carrying[-1], carrying
    assert carrying == sorted(carrying, reverse=True), carrying  # fresh, then never again once stale
    assert seen[0].named_metrics["kv_cache_usage_perc"] == KV_CACHE
    assert "in_flight_requests" in seen[0].named_metrics  # the gateway's own report carries it
