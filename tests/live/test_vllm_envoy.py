"""Envoy 1.40 in front of two gateways, each proxying one model-server stand-in (its own process: vLLM-like, then
Triton-like) with the backend's load as report source: the replica whose backend is busier (more of its KV cache
in use) gets less traffic.

Each gateway's route is ``report=merged;utilization-metric=<metric>``: the report carries the gateway's
``rps_fractional`` (client-side weighted round robin needs a positive QPS) and the backend's KV-cache use
(vLLM's ``kv_cache_usage_perc``, Triton's ``kv_cache_utilization``) as
``application_utilization``, which CSWRR prefers to ``cpu_utilization``. Shares come from Envoy's own per-host
``rq_total``; the assertion is on shares with a wide margin, never on time."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass

import httpx
import pytest

from secure_orca import pki
from secure_orca.envoy import bootstrap as envoy
from secure_orca.lab import launcher as lb
from secure_orca.lab import replicas as launch
from tests.live.standin_process import running
from tests.live.test_envoy_live import rq_totals, shares_of
from tests.replicas import deployment

pytestmark = [
    pytest.mark.envoy,
    pytest.mark.skipif(not lb.envoy_available(), reason="envoy not installed (extra 'envoy')"),
    pytest.mark.timeout(180),
]


@dataclass(frozen=True)
class Backend:
    module: str
    prefix: str
    path: str
    body: dict[str, object]
    metric: str  # the backend's KV-cache named metric, carried as application_utilization
    busy: tuple[str, str]  # --busy of the busier and of the idler stand-in


BACKENDS = {
    "vllm": Backend(
        "vllm_like",
        "/v1",
        "/v1/completions",
        {"model": "stand-in/vllm-like", "prompt": "hello", "max_tokens": 1},
        "kv_cache_usage_perc",
        ("0.8", "0.05"),
    ),
    # Triton's busy share is in KV-cache blocks, of 512
    "triton": Backend(
        "triton_like",
        "/v2",
        "/v2/models/tensorrt_llm/generate",
        {"text_input": "hello", "max_tokens": 1},
        "kv_cache_utilization",
        ("410", "26"),
    ),
}


def completions(url: str, ca: str, count: int, backend: Backend) -> Iterator[int]:
    """``count`` non-streaming completions through Envoy, one at a time: their statuses."""
    with httpx.Client(verify=ssl.create_default_context(cafile=ca), http2=True, timeout=30) as http:
        for _ in range(count):
            yield http.post(f"{url}{backend.path}", json=backend.body).status_code


def shares_after_warming(
    d: lb.Deployment, ca: str, backend: Backend = BACKENDS["vllm"]
) -> tuple[dict[int, float], dict[int, float]]:
    """150 completions through Envoy to warm it (blackout period, first weights), then 200 more: each replica's
    share of those (Envoy's rq_total) and Envoy's weights after them."""
    assert 200 in set(completions(d.envoy.url, ca, 150, backend))
    before = rq_totals(d.envoy)
    assert set(completions(d.envoy.url, ca, 200, backend)) == {200}
    return shares_of(d.envoy, before), {h.port: h.weight for h in d.envoy.clusters()}


# Envoy's opt-in asks for each format it parses; the gateway re-encodes the merged report in it (Envoy's parser,
# not ours, reads JSON and BIN here)
@pytest.mark.parametrize(("name", "fmt"), [("vllm", "TEXT"), ("triton", "TEXT"), ("vllm", "JSON"), ("triton", "BIN")])
def test_a_busier_backend_gets_less_traffic(dev_pki: pki.DevPKI, name: str, fmt: str) -> None:
    backend = BACKENDS[name]
    route = f"report=merged;utilization-metric={backend.metric}"
    with ExitStack() as stack:
        busy, idle = (
            stack.enter_context(running(backend.module, "--busy", b, "--token-interval", "0.001")) for b in backend.busy
        )
        argvs = [
            launch.serve_argv(
                dev_pki,
                lb.replica_flags(dev_pki, "front-proxy", "--proxy", f"{backend.prefix}={url}{backend.prefix};{route}"),
            )
            for url in (busy, idle)
        ]
        d = stack.enter_context(
            deployment(dev_pki, argvs, option="front-proxy", timing=envoy.TEST_TIMING, report_format=fmt)
        )
        hot, cold = d.replicas
        shares, weights = shares_after_warming(d, str(dev_pki.cert("ca")), backend)
    print(f"\n{name} {fmt}: share to the busier replica {shares[hot.port]:.3f} (round robin 0.5); weights {weights}")
    assert shares[hot.port] < 0.35, shares
    # a snapshot: the busier replica gets so few requests that its last report may have expired (Envoy's
    # weight_expiration_period), and a host without a valid weight gets the median, the other's (seen on the
    # base commit too); the shares above are the traffic itself
    assert weights[hot.port] <= weights[cold.port], weights
