"""Envoy 1.40 in front of two gateways, each proxying one model-server stand-in (its own process), with the
backend's load reaching Envoy **out of band only**: each gateway polls its backend's load endpoint (vLLM's
``/metrics`` or SGLang's ``/v1/loads``: ``load-poll``) and streams it on StreamCoreMetrics; no request carries an
opt-in and no response a report. The replica whose backend is busier gets less traffic.

The route is ``report=merged;utilization-metric=kv_cache_usage_perc``: the streamed report carries the gateway's
``rps_fractional`` (CSWRR needs a positive QPS) and the backend's KV-cache use as ``application_utilization``.
Shares come from Envoy's own per-host ``rq_total``; the assertion is on shares with a wide margin, never on time."""

from __future__ import annotations

from contextlib import ExitStack

import httpx
import pytest

from secure_orca import pki
from secure_orca.envoy import bootstrap as envoy
from secure_orca.lab import launcher as lb
from secure_orca.lab import replicas as launch
from tests.live.standin_process import running
from tests.live.test_envoy_live import oob_stats
from tests.live.test_vllm_envoy import shares_after_warming
from tests.replicas import deployment

pytestmark = [
    pytest.mark.envoy,
    pytest.mark.skipif(not lb.envoy_available(), reason="envoy not installed (extra 'envoy')"),
    pytest.mark.timeout(180),
]
OOB_PERIOD = 0.2  # Envoy's oob_reporting_period; the gateways' floor (and so their poll period) matches
STANDINS = {"vllm-metrics": "vllm_like", "sglang-loads": "sglang_like"}


@pytest.mark.parametrize("source", sorted(STANDINS))
def test_a_busier_backend_gets_less_traffic_out_of_band(dev_pki: pki.DevPKI, source: str) -> None:
    route = f"report=merged;load-poll={source};utilization-metric=kv_cache_usage_perc"
    with ExitStack() as stack:
        busy = stack.enter_context(running(STANDINS[source], "--busy", "0.8", "--token-interval", "0.001"))
        idle = stack.enter_context(running(STANDINS[source], "--busy", "0.05", "--token-interval", "0.001"))
        argvs = [
            launch.serve_argv(
                dev_pki,
                lb.replica_flags(
                    dev_pki,
                    "front-proxy",
                    "--proxy",
                    f"/v1={b}/v1;{route}",
                    "--endpoint-load-metrics-oob-min-interval",
                    "200ms",
                ),
            )
            for b in (busy, idle)
        ]
        timing = envoy.TEST_TIMING
        deployed = deployment(dev_pki, argvs, option="front-proxy", oob_period=OOB_PERIOD, timing=timing)
        d = stack.enter_context(deployed)
        hot, cold = d.replicas
        shares, weights = shares_after_warming(d, str(dev_pki.cert("ca")))
        stats = oob_stats(d.envoy)
        with httpx.Client(timeout=10) as http:
            direct = http.get(f"{busy}/v1/models")  # the backend itself is up and reachable only directly here
    print(
        f"\n{source}: share to the busier backend's replica {shares[hot.port]:.3f} (round robin 0.5); "
        f"envoy weights {weights}; lb_orca_oob {stats}"
    )
    assert direct.status_code == 200
    assert stats["active_sessions"] == 2 and stats["reports_received"] > 0
    assert shares[hot.port] < 0.35, shares
    # a snapshot, as in test_vllm_envoy.py: the busier replica gets so few requests that its last report may have
    # expired (weight_expiration_period) and Envoy then gives it the median weight, the other's (seen once under
    # load: share 0.175, weights equal); the shares above are the traffic itself
    assert weights[hot.port] <= weights[cold.port], weights
