"""The TEXT encoder against Envoy's parser rules, the strict parser rule by rule, and the binary form."""

from __future__ import annotations

import base64
import math

import pytest

from secure_orca.orca.report import LoadReport, OrcaFormatError, encode_bin, encode_proto, encode_text, parse_text


def test_encode_text_known_keys_and_named_metrics() -> None:
    report = LoadReport(cpu_utilization=0.31, mem_utilization=0.42, rps_fractional=12.5, named_metrics={"q": 3})
    assert encode_text(report) == (
        "TEXT cpu_utilization=0.31, mem_utilization=0.42, rps_fractional=12.5, named_metrics.q=3"
    )


def test_encode_text_round_trips_through_parser() -> None:
    report = LoadReport(0.5, 0.25, 1.5, 100.0, 2.0, {"in_flight": 7.0}, {"disk": 0.125})
    assert parse_text(encode_text(report, decimals=3)) == report


def test_utilization_above_one_is_allowed() -> None:
    assert parse_text("TEXT cpu_utilization=1.7").cpu_utilization == 1.7


def test_decimals_quantise() -> None:
    assert encode_text(LoadReport(cpu_utilization=0.123456), decimals=2) == "TEXT cpu_utilization=0.12"
    assert encode_text(LoadReport(cpu_utilization=0.0), decimals=3) == "TEXT cpu_utilization=0"


@pytest.mark.parametrize("value", [math.nan, math.inf, -0.1])
def test_encoder_refuses_values_envoy_rejects(value: float) -> None:
    with pytest.raises(OrcaFormatError):
        encode_text(LoadReport(cpu_utilization=value))


def test_encoder_refuses_bad_named_metric() -> None:
    with pytest.raises(OrcaFormatError):
        encode_text(LoadReport(named_metrics={"a b": 1.0}))


@pytest.mark.parametrize(
    ("value", "rule"),
    [
        ("cpu_utilization=0.3", "unsupported ORCA header format"),
        ("text cpu_utilization=0.3", "unsupported ORCA header format"),
        ("TEXTcpu_utilization=0.3", "unsupported ORCA header format"),
        ("TEXT cpu=0.3,mem=0.8", "unsupported metric name"),  # Envoy Gateway's documented example
        ("TEXT cpu_utilization=0.3, cpu_utilization=0.4", "duplicate"),
        ("TEXT cpu_utilization=", "empty value"),
        ("TEXT cpu_utilization=-1", "non-negative"),
        ("TEXT cpu_utilization=nan", "non-negative"),
        ("TEXT cpu_utilization=inf", "non-negative"),
        ("TEXT cpu_utilization=1e999", "non-negative"),
        ("TEXT cpu_utilization", "key=value"),
        ("TEXT named_metrics.=1", "unsupported metric name"),
        ("TEXT rps=10", "unsupported metric name"),
        ("JSON {}", "only TEXT"),
    ],
)
def test_parser_rejects_per_envoy_rule(value: str, rule: str) -> None:
    with pytest.raises(OrcaFormatError, match=rule):
        parse_text(value)


def test_parser_accepts_spacing_empty_tokens_and_colon() -> None:
    report = parse_text("TEXT  cpu_utilization = 0.3 ,, mem_utilization:0.8,")
    assert (report.cpu_utilization, report.mem_utilization) == (0.3, 0.8)


def test_binary_form_is_protobuf_of_fields() -> None:
    raw = encode_proto(LoadReport(cpu_utilization=0.5, named_metrics={"a": 1.0}))
    # field 1 (double) = 0.5, then field 8 map entry {key "a", value 1.0}
    assert raw[:1] == b"\x09" and raw[9:10] == b"\x42"
    assert base64.b64decode(encode_bin(LoadReport(cpu_utilization=0.5))) == raw[:9]
