"""A backend's load endpoint read as a report (orca.polled, pure): vLLM's /metrics and SGLang's /v1/loads, every
malformed or hostile answer refused."""

from __future__ import annotations

import json
import time

import pytest

from secure_orca.orca import polled
from secure_orca.orca.report import OrcaFormatError

# as vLLM's PrometheusStatLogger writes it (prometheus_client's exposition), two engines
VLLM = b"""# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="1",model_name="m"} 2.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 1.0
vllm:num_requests_waiting{engine="1",model_name="m"} 0.0
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.9
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="m \\"quoted\\" {x}"} 0.5
vllm:kv_cache_usage_perc_other{engine="0"} 7
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{le="+Inf",engine="0",model_name="m"} 4.0
"""


def sglang(*ranks: dict[str, object]) -> bytes:
    """SGLang's /v1/loads answer (v1_loads.py's get_loads) for ``ranks``."""
    loads = [{"dp_rank": i, "num_total_reqs": 0, **rank} for i, rank in enumerate(ranks)]
    return json.dumps(
        {
            "timestamp": "2026-12-05T00:00:00+00:00",
            "version": "0.5",
            "dp_rank_count": len(loads),
            "loads": loads,
            "aggregate": {"total_running_reqs": 0},
        }
    ).encode()


def rank(running: object = 1, waiting: object = 0, usage: object = 0.5) -> dict[str, object]:
    return {"num_running_reqs": running, "num_waiting_reqs": waiting, "token_usage": usage, "utilization": 0.1}


def test_vllm_metrics_the_busiest_engine_and_the_summed_queues() -> None:
    report = polled.parse(polled.VLLM_METRICS, VLLM)
    expected = {"kv_cache_usage_perc": 0.5, "num_requests_running": 5.0, "num_requests_waiting": 1.0}
    assert report.named_metrics == expected


def test_vllm_metrics_before_0_9_named_the_gauge_gpu_cache_usage_perc() -> None:
    old = b'vllm:gpu_cache_usage_perc{model_name="m"} 0.75\nvllm:num_requests_waiting{model_name="m"} 2 1700000000\n'
    assert polled.parse(polled.VLLM_METRICS, old).named_metrics == {
        "kv_cache_usage_perc": 0.75,
        "num_requests_waiting": 2.0,
    }


@pytest.mark.parametrize(
    "body",
    [
        b"",  # nothing
        b"vllm:num_requests_waiting 1\n",  # no KV-cache gauge
        b"vllm:kv_cache_usage_perc NaN\n",
        b"vllm:kv_cache_usage_perc +Inf\n",
        b"vllm:kv_cache_usage_perc -0.5\n",
        b"vllm:kv_cache_usage_perc zero\n",
        b"vllm:kv_cache_usage_perc\n",  # no value
        b"vllm:kv_cache_usage_perc 0.5 1 2\n",  # too many fields
        b"vllm:kv_cache_usage_perc{engine=0} 0.5\n",  # unquoted label
        b'vllm:kv_cache_usage_perc{engine="0" 0.5\n',  # unclosed
        b'vllm:kv_cache_usage_perc{engine="0"}0.5\n',  # no blank before the value
        b"vllm:kv_cache_usage_perc 0.5\n\xff\n",  # not UTF-8
        b"vllm:kv_cache_usage_perc 0.5\n" + b"#" * polled.MAX_BODY,  # too long
    ],
)
def test_vllm_metrics_refused(body: bytes) -> None:
    with pytest.raises(OrcaFormatError):
        polled.parse(polled.VLLM_METRICS, body)


def test_a_hostile_label_line_is_read_in_linear_time() -> None:
    """A label block that never closes, of a megabyte: refused at once (no backtracking regular expression)."""
    line = b'vllm:kv_cache_usage_perc{a="' + b"\\\\" * 500_000 + b'",b' + b"=" * 100_000 + b" 1\n"
    started = time.process_time()
    with pytest.raises(OrcaFormatError):
        polled.parse(polled.VLLM_METRICS, line)
    assert time.process_time() - started < 5.0  # quadratic would take hours; bound generous for a shared machine


def test_sglang_loads_the_busiest_rank_and_the_summed_queues() -> None:
    body = sglang(rank(3, 1, 0.25), rank(2, 4, 0.75))
    assert polled.parse(polled.SGLANG_LOADS, body).named_metrics == {
        "kv_cache_usage_perc": 0.75,
        "num_requests_running": 5.0,
        "num_requests_waiting": 5.0,
    }


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"[]",
        b'{"loads": []}',  # no rank
        b'{"loads": {"0": {}}}',
        b'{"loads": [1]}',
        sglang(rank(usage="0.5")),  # a string
        sglang(rank(usage=True)),  # a bool is no number
        sglang(rank(running=None)),
        sglang(rank(waiting=-1)),
        b'{"loads": [{"num_running_reqs": 1, "num_waiting_reqs": 0, "token_usage": NaN}]}',
        b'{"loads": [{"num_running_reqs": 1, "num_waiting_reqs": 0, "token_usage": Infinity}]}',
        sglang(rank()) + b" " * polled.MAX_BODY,
        b"[" * 100_000,  # deep nesting
    ],
)
def test_sglang_loads_refused(body: bytes) -> None:
    with pytest.raises(OrcaFormatError):
        polled.parse(polled.SGLANG_LOADS, body)
