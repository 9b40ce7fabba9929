"""The report in the format the entitled caller asked for (issue 39: "re-encoded in the format the caller asked for
(TEXT, JSON or binary, as Envoy parses them)"): ``endpoint-load-metrics-request: JSON`` or ``BIN`` used to be refused
(``unsupported-format``). Each answer is read with protobuf's own parsers (``json_format.Parse``,
``ParseFromString``: code we did not write), for the gateway's own report and for a backend's. Nobody else gets a
report in any format, and a format Envoy would not parse gets none either."""

from __future__ import annotations

import base64
from collections.abc import Iterator

import httpx
import pytest
from google.protobuf import json_format
from xds.data.orca.v3 import orca_load_report_pb2

from secure_orca import pki
from secure_orca.lab import replicas as launch
from secure_orca.orca.headers import OPTIN
from tests import proxied
from tests.replicas import run_replicas

from ..conftest import ClientCert, fp_flags
from .backends import KV_CACHE, Recorded, reporting_backend

LB = {"x-remote-user": "envoy-lb"}


@pytest.fixture(scope="module")
def rig(dev_pki: pki.DevPKI) -> Iterator[tuple[launch.Replica, Recorded]]:
    with reporting_backend() as (url, recorded):
        flags = [*fp_flags(dev_pki), "--proxy", f"/model={url};report=backend"]
        with run_replicas([launch.serve_argv(dev_pki, flags)]) as (replica,):
            yield replica, recorded


def parsed(value: str) -> orca_load_report_pb2.OrcaLoadReport:
    """An ``endpoint-load-metrics`` value as Envoy's parser splits it, read by protobuf's parsers."""
    fmt, _, body = value.partition(" ")
    message = orca_load_report_pb2.OrcaLoadReport()
    if fmt == "JSON":
        json_format.Parse(body, message)
    elif fmt == "BIN":
        message.ParseFromString(base64.b64decode(body, validate=True))
    else:
        raise AssertionError(f"not JSON or BIN: {value[:20]!r}")
    return message


def get(
    rig: tuple[launch.Replica, Recorded],
    ca: pki.DevPKI,
    path: str,
    optin: str,
    cert: ClientCert | None,
    protocol: str = "h2",
) -> httpx.Response:
    with proxied.client(ca.cert("ca"), protocol, cert) as http:
        return http.get(f"{rig[0].url}{path}", headers={OPTIN: optin, **LB})


@pytest.mark.parametrize("fmt", ["JSON", "BIN"])
@pytest.mark.parametrize("protocol", ["h2", "http1.1"])
def test_the_gateways_own_report_in_the_format_asked(rig, dev_pki, client_certs, fmt: str, protocol: str) -> None:
    response = get(rig, dev_pki, "/version", fmt, client_certs["front-proxy"], protocol)
    assert response.status_code == 200
    value = response.headers["endpoint-load-metrics"]
    assert value.startswith(fmt + " ") and "endpoint-load-metrics-bin" not in response.headers
    report = parsed(value)
    assert "in_flight_requests" in report.named_metrics and report.rps_fractional >= 0


@pytest.mark.parametrize("fmt", ["JSON", "BIN"])
def test_a_backends_report_in_the_format_asked(rig, dev_pki, client_certs, fmt: str) -> None:
    response = get(rig, dev_pki, "/model/v1/models", fmt, client_certs["front-proxy"])
    report = parsed(response.headers["endpoint-load-metrics"])
    assert report.named_metrics["kv_cache_usage_perc"] == pytest.approx(KV_CACHE)
    asked = [v for n, v in rig[1].headers[-1] if n.lower() == "endpoint-load-metrics-format"]
    assert asked == ["text"]  # the backend is asked in its dialect; the caller's format is the gateway's to make


@pytest.mark.parametrize("fmt", ["TEXT", "JSON", "BIN"])
@pytest.mark.parametrize("path", ["/version", "/model/v1/models"])
def test_nobody_else_gets_a_report_in_any_format(rig, dev_pki, fmt: str, path: str) -> None:
    response = get(rig, dev_pki, path, fmt, None)
    assert response.status_code == 200
    assert not [n for n in response.headers if n.startswith("endpoint-load-metrics")], response.headers
    if path.startswith("/model"):  # and the backend was not asked in its dialect
        assert not [n for n, _ in rig[1].headers[-1] if n.lower().startswith("endpoint-load-metrics")]


@pytest.mark.parametrize("value", ["Json", "json", "bin", "BIN2", "XML", "TEXT JSON", "JSON, BIN", "JSON;BIN"])
def test_a_format_envoy_does_not_parse_gets_no_report_even_when_entitled(rig, dev_pki, client_certs, value) -> None:
    response = get(rig, dev_pki, "/version", value, client_certs["front-proxy"])
    assert response.status_code == 200
    assert not [n for n in response.headers if n.startswith("endpoint-load-metrics")], response.headers
