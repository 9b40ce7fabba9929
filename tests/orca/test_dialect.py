"""The model servers' dialect (orca.dialect): every spelling of the request header, the backend's report read as
Envoy reads it (TEXT, JSON, BIN, ``-bin`` first; anything Envoy refuses is no report), and re-encoding."""

from __future__ import annotations

import base64

import pytest
from xds.data.orca.v3 import orca_load_report_pb2

from secure_orca.orca import dialect
from secure_orca.orca.report import LoadReport, encode_bin, parse_text

VLLM_TEXT = "TEXT named_metrics.kv_cache_usage_perc=0.4, named_metrics.num_requests_waiting=1e-05"
VLLM_JSON = 'JSON {"named_metrics": {"kv_cache_usage_perc": 0.4, "num_requests_waiting": 3.0}}'


def test_every_spelling_of_the_dialect_header_is_known() -> None:
    for name in (
        b"endpoint-load-metrics-format",
        b"endpoint_load_metrics_format",
        b"endpoint-load_metrics-format",
        b"endpoint-load-metrics-format-bin",
        b"endpoint_load_metrics_format_bin",
    ):
        assert name in dialect.DIALECT_SPELLINGS
    assert b"endpoint-load-metrics" not in dialect.DIALECT_SPELLINGS


def test_vllm_reports_are_read_in_both_of_its_formats() -> None:
    text = dialect.parse_value(VLLM_TEXT)
    assert text.named_metrics == {"kv_cache_usage_perc": 0.4, "num_requests_waiting": 1e-05}
    json_report = dialect.parse_value(VLLM_JSON)
    assert json_report.named_metrics == {"kv_cache_usage_perc": 0.4, "num_requests_waiting": 3.0}


def test_json_takes_proto3_names_both_ways_and_bin_is_the_serialized_proto() -> None:
    assert dialect.parse_value('JSON {"cpuUtilization": 0.5}').cpu_utilization == 0.5
    assert dialect.parse_value('JSON {"cpu_utilization": 0.5}').cpu_utilization == 0.5
    report = LoadReport(cpu_utilization=0.25, named_metrics={"kv": 0.5})
    assert dialect.parse_value("BIN " + encode_bin(report)) == report


@pytest.mark.parametrize(
    "value",
    [
        "JSON {not json}",
        'JSON {"cpu_utilization": -1}',
        'JSON {"unknown_field": 1}',
        "BIN !!!",
        "TEXT cpu_utilization=nan",
        "XML <a/>",
        "TEXT " + "named_metrics.a=1, " * 1000,
    ],
)
def test_what_envoy_refuses_is_no_report(value: str) -> None:
    assert dialect.backend_report([(b"endpoint-load-metrics", value.encode())]) is None


def test_the_bin_header_wins_as_in_envoy() -> None:
    proto = orca_load_report_pb2.OrcaLoadReport(cpu_utilization=0.9)
    headers = [
        (b"Endpoint-Load-Metrics", b"TEXT cpu_utilization=0.1"),
        (b"endpoint-load-metrics-bin", base64.b64encode(proto.SerializeToString())),
    ]
    report = dialect.backend_report(headers)
    assert report is not None and report.cpu_utilization == 0.9


def test_reencoded_in_each_caller_format_reads_back_the_same() -> None:
    report = LoadReport(named_metrics={"kv_cache_usage_perc": 0.4}, utilization={"gpu": 0.75})
    for fmt in dialect.CALLER_FORMATS:
        name, value = dialect.encode(report, fmt, 2)
        assert name == b"endpoint-load-metrics"
        assert value.startswith(fmt.encode() + b" ")
        assert dialect.parse_value(value.decode()) == report
    assert parse_text(dialect.encode(report, "TEXT", 2)[1].decode()) == report


def test_merged_keeps_our_scalars_and_carries_the_backends_names() -> None:
    local = LoadReport(cpu_utilization=0.2, named_metrics={"in_flight_requests": 3.0, "kv": 0.1})
    merged = dialect.merged(local, LoadReport(cpu_utilization=0.99, named_metrics={"kv": 0.8}))
    assert merged.cpu_utilization == 0.2
    assert merged.named_metrics == {"in_flight_requests": 3.0, "kv": 0.8}


def test_a_named_metric_becomes_the_application_utilization() -> None:
    report = LoadReport(rps_fractional=5.0, named_metrics={"kv_cache_usage_perc": 0.8})
    assert dialect.with_utilization(report, "kv_cache_usage_perc").application_utilization == 0.8
    assert dialect.with_utilization(report, "absent") is report
