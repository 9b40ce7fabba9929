"""Envoy 1.40 in front of two gateways, each proxying one vLLM-like stand-in (its own process) with the backend's
load as report source: the replica whose backend is busier (more of its KV cache in use) gets less traffic.

Each gateway's route is ``report=merged;utilization-metric=kv_cache_usage_perc``: the report carries the gateway's
``rps_fractional`` (client-side weighted round robin needs a positive QPS) and the backend's KV-cache use as
``application_utilization``, which CSWRR prefers to ``cpu_utilization``. Shares come from Envoy's own per-host
``rq_total``; the assertion is on shares with a wide margin, never on time."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from contextlib import ExitStack

import httpx
import pytest

from secure_orca import pki
from secure_orca.envoy import bootstrap as envoy
from secure_orca.lab import launcher as lb
from secure_orca.lab import replicas as launch
from tests.live.test_envoy_live import rq_totals, shares_of
from tests.live.test_vllm_proxy import vllm_like

pytestmark = [
    pytest.mark.envoy,
    pytest.mark.skipif(not lb.envoy_available(), reason="envoy not installed (extra 'envoy')"),
    pytest.mark.timeout(180),
]
ROUTE = "report=merged;utilization-metric=kv_cache_usage_perc"
COMPLETION = {"model": "stand-in/vllm-like", "prompt": "hello", "max_tokens": 1}


def completions(url: str, ca: str, count: int) -> Iterator[int]:
    """``count`` non-streaming completions through Envoy, one at a time: their statuses."""
    with httpx.Client(verify=ssl.create_default_context(cafile=ca), http2=True, timeout=30) as http:
        for _ in range(count):
            yield http.post(f"{url}/v1/completions", json=COMPLETION).status_code


def shares_after_warming(d: lb.Deployment, ca: str) -> tuple[dict[int, float], dict[int, float]]:
    """150 completions through Envoy to warm it (blackout period, first weights), then 200 more: each replica's
    share of those (Envoy's rq_total) and Envoy's weights after them."""
    assert 200 in set(completions(d.envoy.url, ca, 150))
    before = rq_totals(d.envoy)
    assert set(completions(d.envoy.url, ca, 200)) == {200}
    return shares_of(d.envoy, before), {h.port: h.weight for h in d.envoy.clusters()}


def test_a_busier_backend_gets_less_traffic(dev_pki: pki.DevPKI) -> None:
    with ExitStack() as stack:
        busy = stack.enter_context(vllm_like("--busy", "0.8", "--token-interval", "0.001"))
        idle = stack.enter_context(vllm_like("--busy", "0.05", "--token-interval", "0.001"))
        argvs = [
            launch.serve_argv(dev_pki, lb.replica_flags(dev_pki, "front-proxy", "--proxy", f"/v1={backend}/v1;{ROUTE}"))
            for backend in (busy, idle)
        ]
        d = stack.enter_context(lb.deployment(dev_pki, argvs, option="front-proxy", timing=envoy.TEST_TIMING))
        hot, cold = d.replicas
        shares, weights = shares_after_warming(d, str(dev_pki.cert("ca")))
    print(f"\nshare to the busier backend's replica {shares[hot.port]:.3f} (round robin 0.5); envoy weights {weights}")
    assert shares[hot.port] < 0.35, shares
    assert weights[hot.port] < weights[cold.port], weights
