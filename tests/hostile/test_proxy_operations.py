"""Operating the proxy in front of model servers (issue 39), each failing before: /readyz follows the backends when
asked to, errors in the OpenAI dialect on an OpenAI route, ``Authorization`` passed to a backend only where the route
says so, ``X-Forwarded-For``/``Forwarded`` set by the gateway and believed only from the front proxy, and per-route
metrics."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from secure_orca import pki
from secure_orca.lab import replicas as launch
from tests import plainhttp, proxied
from tests.replicas import run_replicas

from ..conftest import ClientCert, fp_flags
from .backends import Recorded, recording_backend


@dataclass
class Rig:
    replica: launch.Replica
    recorded: Recorded
    dev_pki: pki.DevPKI
    front_proxy: ClientCert
    metrics_port: int

    def client(self, cert: ClientCert | None = None) -> httpx.Client:
        return proxied.client(self.dev_pki.cert("ca"), "h2", cert)

    def last_headers(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for name, value in self.recorded.headers[-1]:
            out.setdefault(name.lower(), []).append(value)
        return out


@pytest.fixture(scope="module")
def rig(dev_pki: pki.DevPKI, client_certs: dict[str, ClientCert]) -> Iterator[Rig]:
    nothing_there = f"http://127.0.0.1:{launch.free_port()}"
    metrics_port = launch.free_port()
    with recording_backend() as (url, recorded):
        flags = [
            *fp_flags(dev_pki),
            "--proxy",
            f"/pass={url};authorization=pass",
            "--proxy",
            f"/strip={url}",
            "--proxy",
            f"/openai={url}/v1;errors=openai",
            "--proxy",
            f"/openai-down={nothing_there};errors=openai",
            "--proxy-readiness",
            "require",
            "--metrics-bind-address",
            f"127.0.0.1:{metrics_port}",
        ]
        with run_replicas([launch.serve_argv(dev_pki, flags)]) as (replica,):
            yield Rig(replica, recorded, dev_pki, client_certs["front-proxy"], metrics_port)


def test_readyz_fails_while_a_backend_is_down(rig: Rig) -> None:
    with rig.client() as http:
        response = http.get(f"{rig.replica.url}/readyz")
    assert response.status_code == 503
    assert response.text == "[-]backend /openai-down failed: unreachable\nreadyz check failed\n"


def test_readyz_is_ok_when_every_backend_answers(rig: Rig, dev_pki: pki.DevPKI) -> None:
    with recording_backend() as (url, _):
        flags = [*fp_flags(dev_pki), "--proxy", f"/up={url}", "--proxy-readiness", "require"]
        with run_replicas([launch.serve_argv(dev_pki, flags)]) as (replica,):
            context = ssl.create_default_context(cafile=str(dev_pki.cert("ca")))
            with httpx.Client(verify=context, timeout=10) as http:
                assert http.get(f"{replica.url}/readyz").status_code == 200


def test_errors_on_an_openai_route_are_openai_errors(rig: Rig) -> None:
    with rig.client() as http:
        down = http.post(f"{rig.replica.url}/openai-down/v1/completions", json={"prompt": "x"})
        bad = http.get(f"{rig.replica.url}/openai/a%2Fb")
        kube = http.get(f"{rig.replica.url}/strip/a%2Fb")
    assert down.status_code == 502
    assert down.json()["error"]["type"] == "BadGatewayError" and down.json()["error"]["code"] == 502
    assert bad.status_code == 400 and bad.json()["error"]["type"] == "BadRequestError"
    assert kube.status_code == 400 and kube.json()["kind"] == "Status"


def test_authorization_reaches_the_backend_only_where_the_route_passes_it(rig: Rig) -> None:
    token = {"authorization": "Bearer sk-backend-api-key"}
    with rig.client() as http:
        assert http.get(f"{rig.replica.url}/pass/v1/models", headers=token).status_code == 200
        passed = rig.last_headers().get("authorization")
        assert http.get(f"{rig.replica.url}/strip/v1/models", headers=token).status_code == 200
        stripped = rig.last_headers().get("authorization")
    assert passed == ["Bearer sk-backend-api-key"]
    assert stripped is None


def test_forwarded_headers_are_the_gateways_unless_the_front_proxy_sent_them(rig: Rig) -> None:
    spoofed = {"x-forwarded-for": "6.6.6.6", "forwarded": "for=6.6.6.6", "X_Forwarded_For": "7.7.7.7"}
    with rig.client() as http:
        http.get(f"{rig.replica.url}/strip/x", headers=spoofed)
    anonymous = rig.last_headers()
    with rig.client(rig.front_proxy) as http:
        http.get(f"{rig.replica.url}/strip/x", headers={**spoofed, "x-remote-user": "envoy-lb"})
    proxied = rig.last_headers()
    assert anonymous["x-forwarded-for"] == ["127.0.0.1"]
    assert anonymous["forwarded"][0].startswith("for=127.0.0.1;proto=https")
    assert proxied["x-forwarded-for"] == ["6.6.6.6, 127.0.0.1"]
    assert proxied["forwarded"][0].startswith("for=6.6.6.6, for=127.0.0.1;proto=https")
    assert "x_forwarded_for" not in anonymous and "x_forwarded_for" not in proxied


def test_metrics_per_route(rig: Rig) -> None:
    with rig.client() as http:
        http.get(f"{rig.replica.url}/strip/m")
        http.get(f"{rig.replica.url}/openai-down/m")
    text = plainhttp.get(f"http://127.0.0.1:{rig.metrics_port}/metrics").text
    assert 'secure_orca_proxy_request_total{code="200",route="/strip"}' in text
    assert 'secure_orca_proxy_upstream_errors_total{kind="unavailable",route="/openai-down"}' in text
    assert 'secure_orca_proxy_request_duration_seconds_bucket{le="+Inf",route="/strip"}' in text
    assert 'secure_orca_proxy_current_inflight_requests{route="/strip"} 0.0' in text
