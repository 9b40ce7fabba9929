"""What reading one polled answer costs the gateway, in instructions (callgrind), without a server:
``orca.polled.parse`` on a vLLM-shaped ``/metrics`` and on SGLang's ``/v1/loads`` (issue 39 item 4).

    python -m benchmarks.poll_parse_cost

The vLLM body is built here in the shape ``PrometheusStatLogger`` writes (vllm-project/vllm
005a810bc40faa25b8870fbc8559c3462581eee3, ``vllm/v1/metrics/loggers.py``): its gauges, counters and histograms
with their bucket bounds, per engine, plus prometheus_client's process and GC families; a real server's body
differs in values and in a few families, not in shape. Per parse: a window of N parses minus a window of M (the
collector off, a collection before each window), over N - M. The poll's HTTP exchange is not counted.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable

LONG, SHORT = 40, 10  # parses per window
TOKENS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000)
SECONDS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
HISTOGRAMS = {
    "vllm:request_prompt_tokens": TOKENS,
    "vllm:request_generation_tokens": TOKENS,
    "vllm:iteration_tokens_total": (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384),
    "vllm:request_max_num_generation_tokens": TOKENS,
    "vllm:request_params_n": (1, 2, 5, 10, 20),
    "vllm:request_params_max_tokens": TOKENS,
    "vllm:time_to_first_token_seconds": SECONDS,
    "vllm:time_per_output_token_seconds": SECONDS,
    "vllm:e2e_request_latency_seconds": SECONDS,
    "vllm:request_queue_time_seconds": SECONDS,
    "vllm:request_inference_time_seconds": SECONDS,
    "vllm:request_prefill_time_seconds": SECONDS,
    "vllm:request_decode_time_seconds": SECONDS,
}
GAUGES = (
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:gpu_cache_usage_perc",
    "vllm:kv_cache_usage_perc",
)
COUNTERS = (
    "vllm:prefix_cache_queries",
    "vllm:prefix_cache_hits",
    "vllm:num_preemptions",
    "vllm:prompt_tokens",
    "vllm:generation_tokens",
)


def vllm_metrics(engines: int = 1) -> bytes:
    """A ``/metrics`` body in vLLM's shape for ``engines`` engines."""
    lines = []
    for name in ("python_gc_objects_collected", "python_gc_collections", "process_cpu_seconds"):
        lines += [f"# TYPE {name} counter", *(f'{name}_total{{generation="{g}"}} {g * 17}.0' for g in range(3))]
    for engine in range(engines):
        labels = f'engine="{engine}",model_name="meta-llama/Llama-3.1-8B-Instruct"'
        lines += [line for name in GAUGES for line in (f"# TYPE {name} gauge", f"{name}{{{labels}}} 0.25")]
        for name in COUNTERS:
            lines += [
                f"# TYPE {name} counter",
                f"{name}_total{{{labels}}} 12345.0",
                f"{name}_created{{{labels}}} 1.7e+09",
            ]
        for name, bounds in HISTOGRAMS.items():
            lines.append(f"# TYPE {name} histogram")
            lines += [f'{name}_bucket{{{labels},le="{bound}"}} 7.0' for bound in (*bounds, "+Inf")]
            lines += [f"{name}_count{{{labels}}} 7.0", f"{name}_sum{{{labels}}} 3.5"]
    return ("\n".join(lines) + "\n").encode()


def sglang_loads(ranks: int = 1) -> bytes:
    """A ``/v1/loads`` body in SGLang's shape (v1_loads.py ``get_loads``) for ``ranks`` data-parallel ranks."""
    load = {
        "num_running_reqs": 3,
        "num_waiting_reqs": 1,
        "num_used_tokens": 4096,
        "max_total_num_tokens": 65536,
        "token_usage": 0.0625,
        "gen_throughput": 812.5,
        "cache_hit_rate": 0.4,
        "utilization": 0.3,
        "max_running_requests": 256,
        "num_total_reqs": 4,
    }
    loads = [{"dp_rank": rank, **load} for rank in range(ranks)]
    aggregate = {
        "total_running_reqs": 3 * ranks,
        "total_waiting_reqs": ranks,
        "total_reqs": 4 * ranks,
        "avg_token_usage": 0.0625,
        "avg_throughput": 812.5,
        "avg_utilization": 0.3,
    }
    return json.dumps(
        {
            "timestamp": "2026-12-05T00:00:00+00:00",
            "version": "0.5.0",
            "dp_rank_count": ranks,
            "loads": loads,
            "aggregate": aggregate,
        }
    ).encode()


def cases() -> dict[str, tuple[str, bytes]]:
    from secure_orca.orca import polled

    return {
        "vLLM /metrics, 1 engine": (polled.VLLM_METRICS, vllm_metrics(1)),
        "vLLM /metrics, 8 engines": (polled.VLLM_METRICS, vllm_metrics(8)),
        "SGLang /v1/loads, 1 rank": (polled.SGLANG_LOADS, sglang_loads(1)),
        "SGLang /v1/loads, 8 ranks": (polled.SGLANG_LOADS, sglang_loads(8)),
    }


def _child(marks_path: str) -> None:
    """Under callgrind: each case's answer parsed in a window of SHORT and one of LONG (the collector off, since a
    collection inside one window and not the other would be counted as the parse's)."""
    import gc

    from secure_orca.orca import polled

    from .instructions import count_windows

    def parsing(source: str, body: bytes) -> Callable[[], object]:
        named = polled.parse(source, body).named_metrics
        print(f"{len(body):,} bytes; " + ", ".join(f"{k}={v:g}" for k, v in named.items()), file=sys.stderr)
        return lambda: polled.parse(source, body)

    calls = {name: parsing(source, body) for name, (source, body) in cases().items()}
    gc.disable()
    count_windows(marks_path, calls, (SHORT, LONG), gc.collect)


def table(totals: dict[str, int], shown: list[str]) -> str:
    """The markdown table of instructions per parse, each case with what its child printed about it."""
    rows = ["| answer | size, report | instructions per parse |", "|---|---|---|"]
    for name, what in zip(cases(), shown, strict=True):
        per = (totals[f"{name},{LONG}"] - totals[f"{name},{SHORT}"]) / (LONG - SHORT)
        rows.append(f"| {name} | {what} | {per:,.0f} |")
    rows.append(
        f"\n(window of {LONG} parses − window of {SHORT}) ÷ {LONG - SHORT}, in process; one parse per poll "
        "period for the whole server."
    )
    return "\n".join(rows)


def main() -> int:
    if sys.argv[1:2] == ["--child"]:
        _child(sys.argv[2])
    else:
        from .instructions import windows_of_child

        totals, stderr = windows_of_child("benchmarks.poll_parse_cost", "pollparse", 3000)
        print(table(totals, [line for line in stderr.splitlines() if " bytes; " in line]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
