"""The probe against the model-server stand-ins, each its own process (issue 39, done when: "the probe gives 'no
leak' against the gateway in front of each stand-in, and 'leak' against the stand-in alone"): a vLLM-like server
(tests/live/vllm_like.py) and a Triton-like one (tests/live/triton_like.py) answer ``endpoint-load-metrics-format``
on their completion endpoints to anyone; in front of them, with the backend as report source, the gateway gives
the report to its load balancer (the probe's control) and to no vector. The probe POSTs a completion body
(``--body``): those endpoints answer nothing else."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

import pytest

from secure_orca import pki
from secure_orca.lab import replicas as launch
from secure_orca.probe import audit as probe
from secure_orca.probe.audit import ProbeConfig
from tests.conftest import fp_flags, probe_config
from tests.live.standin_process import running
from tests.replicas import run_replicas


@dataclass(frozen=True)
class StandIn:
    module: str
    prefix: str  # the gateway's route to it
    path: str  # its completion endpoint
    body: bytes
    answers: tuple[str, ...]  # the spelling vectors it answers alone (over HTTP/1.1, the only protocol it speaks)
    endpoints: tuple[str, ...] = ()  # its load endpoints, which answer anyone (the probe's load-endpoint vectors)


VLLM_BODY = json.dumps({"prompt": "hi", "max_tokens": 1}).encode()
TRITON_BODY = json.dumps({"text_input": "hi", "max_tokens": 1}).encode()
STANDINS = {
    # vLLM lower-cases the value and reads the name with Starlette (any letter case)
    # ... and serves its Prometheus /metrics (KV-cache use, requests waiting) unauthenticated
    "vllm": StandIn(
        "vllm_like", "/v1", "/v1/completions", VLLM_BODY, ("TEXT", "JSON", "text", "json", "case"), ("/metrics",)
    ),
    # Triton compares the value as it is (only "text" and "json"); libevhtp finds the name in any letter case
    "triton": StandIn("triton_like", "/v2", "/v2/models/tensorrt_llm/generate", TRITON_BODY, ("text", "json", "case")),
}


@pytest.fixture(params=sorted(STANDINS))
def standin(request: pytest.FixtureRequest) -> StandIn:
    return STANDINS[request.param]


def test_the_probe_finds_the_leak_of_each_stand_in_alone(dev_pki: pki.DevPKI, standin: StandIn) -> None:
    with running(standin.module, tls=(dev_pki.cert("server"), dev_pki.key("server"))) as url:
        config = ProbeConfig(cacert=dev_pki.cert("ca"), paths=(standin.path,), body=standin.body, timing_samples=0)
        result = probe.probe(url, config)
    leaks = {r.vector.name for r in result.results if r.outcome == "leak"}
    assert result.verdict == "leak" and result.exit_code == 1, result.reason
    wanted = {f"spelling:format-{value}/none/http/1.1 {standin.path}" for value in standin.answers}
    wanted |= {f"load-endpoint:no-opt-in/none/http/1.1 {path}" for path in standin.endpoints}
    assert leaks == wanted, sorted(leaks)
    assert "answered in header endpoint-load-metrics" in result.reason


def test_the_gateway_in_front_of_each_stand_in_leaks_nothing(dev_pki: pki.DevPKI, standin: StandIn) -> None:
    with running(standin.module) as backend:
        route = f"{standin.prefix}={backend}{standin.prefix};report=backend"
        flags = fp_flags(dev_pki, "front-proxy,shared-secret", "--proxy", route)
        with run_replicas([launch.serve_argv(dev_pki, flags)]) as (replica,):
            config = dataclasses.replace(probe_config(dev_pki, (standin.path, "/version")), body=standin.body)
            result = probe.probe(replica.url, config)
    assert result.control_ok, [c.detail for c in result.controls]  # the load balancer got the backend's report
    assert result.verdict == "no-leak" and result.exit_code == 0, result.reason
    spelled = {r.vector.name: r.outcome for r in result.results if r.vector.group == "spelling"}
    assert spelled and all(standin.path in name for name in spelled), sorted(spelled)  # through the proxied path
    assert set(spelled.values()) <= {"no-report", "refused", "not-accepted"}, spelled
