"""A model server's load, read from the endpoint it serves to anyone (pure): vLLM's Prometheus ``/metrics`` and
SGLang's ``GET /v1/loads``, each made a ``LoadReport`` with the named metrics vLLM's own report header carries, so
one ``utilization-metric`` and one Envoy configuration fit either backend.

- vLLM (vllm-project/vllm 005a810bc40faa25b8870fbc8559c3462581eee3, ``vllm/v1/metrics/loggers.py``,
  ``PrometheusStatLogger``): gauges ``vllm:kv_cache_usage_perc`` (``vllm:gpu_cache_usage_perc`` before 0.9, kept
  as a fallback), ``vllm:num_requests_running`` and ``vllm:num_requests_waiting``, one series per engine (labels
  ``model_name``, ``engine``). vLLM's own header (08408b80ee411889401fb304deeac22cf2cdafc6,
  ``vllm/entrypoints/openai/orca_metrics.py``) names them ``kv_cache_usage_perc`` and ``num_requests_waiting``.
- SGLang (sgl-project/sglang 5b49fe622b0218973e43819b1114b3a429d797f9,
  ``python/sglang/srt/entrypoints/v1_loads.py``, PR 16976): ``{"timestamp", "version", "dp_rank_count",
  "loads": [{"dp_rank", "num_running_reqs", "num_waiting_reqs", "token_usage", ...}], "aggregate": {...}}``,
  one entry per data-parallel rank; ``token_usage`` is the pools' highest use ratio (KV cache among them).

Across engines or ranks the KV-cache figure is the highest one (the busiest engine bounds what the server can
take) and the request counts are summed. Anything malformed, negative, not finite or beyond ``MAX_BODY`` is
refused (``OrcaFormatError``): a poll that yields no report is a failed poll, never a guess."""

from __future__ import annotations

import json
import math
import re

from secure_orca.orca.report import LoadReport, OrcaFormatError

VLLM_METRICS = "vllm-metrics"
SGLANG_LOADS = "sglang-loads"
PATHS = {VLLM_METRICS: "/metrics", SGLANG_LOADS: "/v1/loads"}  # the request target each source polls
MAX_BODY = 4 * 1024 * 1024  # bytes of a polled answer read at most (vLLM's /metrics is histograms per engine)

KV_CACHE = "kv_cache_usage_perc"
RUNNING = "num_requests_running"
WAITING = "num_requests_waiting"

_KV_NAMES = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")  # the current name first
_COUNT_NAMES = {"vllm:num_requests_running": RUNNING, "vllm:num_requests_waiting": WAITING}
_WANTED = frozenset((*_KV_NAMES, *_COUNT_NAMES))
_METRIC = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
# labels as Prometheus' clients write them (no blanks): each part matches one way, so a hostile line is linear
_LABELS = re.compile(r'\{(?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*",?)*\}')


def _number(text: str, what: str) -> float:
    """A sample value that a load report can carry: finite and not negative."""
    try:
        value = float(text)
    except ValueError:
        raise OrcaFormatError(f"{what}: not a number") from None
    if not math.isfinite(value) or value < 0:
        raise OrcaFormatError(f"{what}: not a finite, non-negative number")
    return value


def prometheus_samples(text: str, wanted: frozenset[str]) -> dict[str, list[float]]:
    """The values of the ``wanted`` metrics in a Prometheus text exposition (format 0.0.4), per name, in order;
    other lines are skipped unread. A wanted line that is malformed refuses the whole text."""
    found: dict[str, list[float]] = {}
    prefixes = tuple(wanted)  # an unwanted line costs one startswith over the tuple, in C, and no regex
    for line in [line.strip() for line in text.split("\n") if line.lstrip(" \t").startswith(prefixes)]:
        name = _METRIC.match(line)
        if name is None or name.group() not in wanted:
            continue
        rest = line[name.end() :]
        if rest.startswith("{"):
            labels = _LABELS.match(rest)
            if labels is None:
                raise OrcaFormatError(f"{name.group()}: malformed labels")
            rest = rest[labels.end() :]
        fields = rest.split()
        if not rest[:1].isspace() or not 1 <= len(fields) <= 2:  # the value, then an optional timestamp
            raise OrcaFormatError(f"{name.group()}: malformed sample")
        found.setdefault(name.group(), []).append(_number(fields[0], name.group()))
    return found


def parse_vllm_metrics(body: bytes) -> LoadReport:
    """vLLM's ``/metrics`` as a report: ``kv_cache_usage_perc`` (the highest engine's), ``num_requests_running``
    and ``num_requests_waiting`` (summed); refused when it has no KV-cache gauge."""
    text = _text(body)
    samples = prometheus_samples(text, _WANTED)
    kv = next((samples[name] for name in _KV_NAMES if name in samples), None)
    if kv is None:
        raise OrcaFormatError("no vllm:kv_cache_usage_perc gauge")
    named = {KV_CACHE: max(kv)}
    for name, orca_name in _COUNT_NAMES.items():
        if name in samples:
            named[orca_name] = sum(samples[name])
    return _checked(named)


def parse_sglang_loads(body: bytes) -> LoadReport:
    """SGLang's ``/v1/loads`` JSON as a report: ``kv_cache_usage_perc`` (the highest rank's ``token_usage``),
    ``num_requests_running`` and ``num_requests_waiting`` (summed over ranks); refused without a rank."""
    try:
        document = json.loads(_text(body))
    except (ValueError, RecursionError):
        raise OrcaFormatError("/v1/loads: not JSON") from None
    loads = document.get("loads") if isinstance(document, dict) else None
    if not isinstance(loads, list) or not loads or not all(isinstance(rank, dict) for rank in loads):
        raise OrcaFormatError("/v1/loads: no per-rank loads")
    named = {
        KV_CACHE: max(_field(rank, "token_usage") for rank in loads),
        RUNNING: sum(_field(rank, "num_running_reqs") for rank in loads),
        WAITING: sum(_field(rank, "num_waiting_reqs") for rank in loads),
    }
    return _checked(named)


PARSERS = {VLLM_METRICS: parse_vllm_metrics, SGLANG_LOADS: parse_sglang_loads}


def parse(source: str, body: bytes) -> LoadReport:
    """The report a poll of ``source`` (a PATHS key) answered with ``body``; OrcaFormatError when it holds none."""
    return PARSERS[source](body)


def _field(rank: dict[str, object], name: str) -> float:
    value = rank.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise OrcaFormatError(f"/v1/loads: {name} missing or not a number")
    return _number(repr(value), name)


def _text(body: bytes) -> str:
    if len(body) > MAX_BODY:
        raise OrcaFormatError("answer longer than the gateway reads")
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        raise OrcaFormatError("answer is not UTF-8") from None


def _checked(named: dict[str, float]) -> LoadReport:
    report = LoadReport(named_metrics=named)
    report.items()  # Envoy's rules for every value
    return report
