"""The model servers' dialect of ORCA (pure): the request header a caller asks a report with,
``endpoint-load-metrics-format: text|json`` (vLLM PR 24905, Triton PR 7839), the report they answer with, read
as Envoy reads an ``endpoint-load-metrics`` value (``TEXT``, ``JSON`` or ``BIN``, then ``-bin``), and the report
re-encoded in the format the gateway's own caller asked for.

vLLM (vllm-project/vllm 08408b80ee411889401fb304deeac22cf2cdafc6, vllm/entrypoints/openai/orca_metrics.py)
answers ``TEXT named_metrics.kv_cache_usage_perc=0.4, named_metrics.num_requests_waiting=0.0`` or
``JSON {"named_metrics": {...}}``, with Python's float text (``1e-05`` included), to any caller; Envoy's parser
(envoyproxy/envoy, source/common/orca/orca_parser.cc) takes ``BIN <base64>`` and ``JSON <proto3 JSON>`` beside
``TEXT``, and prefers ``endpoint-load-metrics-bin`` when both are present."""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json

from google.protobuf.message import DecodeError
from xds.data.orca.v3 import orca_load_report_pb2

from secure_orca.orca.headers import REPORT, REPORT_BIN, spellings
from secure_orca.orca.report import (
    MAP_FIELDS,
    SCALAR_FIELDS,
    LoadReport,
    OrcaFormatError,
    encode_bin,
    encode_proto,
    encode_text,
    format_number,
    parse_text,
)

DIALECT = "endpoint-load-metrics-format"  # what a model server reads, from anyone
DIALECT_BYTES = DIALECT.encode()
# Every spelling a backend could read as the dialect: case is folded by the caller, ``_`` for ``-`` (WSGI, CGI,
# nginx's underscores_in_headers) and the ``-bin`` suffix of gRPC metadata.
DIALECT_SPELLINGS = spellings(DIALECT_BYTES) | spellings(DIALECT_BYTES + b"-bin")
BACKEND_FORMATS = ("text", "json")
CALLER_FORMATS = ("TEXT", "JSON", "BIN")
MAX_VALUE = 8192  # bytes of a backend's report header read at most


def _from_message(message: orca_load_report_pb2.OrcaLoadReport) -> LoadReport:
    scalars = {name: getattr(message, name) for name in SCALAR_FIELDS if getattr(message, name)}
    maps = {prefix: dict(getattr(message, prefix)) for prefix in MAP_FIELDS}
    report = LoadReport.of(scalars, named_metrics=maps["named_metrics"], utilization=maps["utilization"])
    report.items()  # Envoy's rules: no NaN, no infinity, no negative value, names it can carry
    return report


def parse_value(value: str) -> LoadReport:
    """An ``endpoint-load-metrics`` value in any of Envoy's three formats; OrcaFormatError when Envoy would
    refuse it (or it is longer than MAX_VALUE)."""
    if len(value) > MAX_VALUE:
        raise OrcaFormatError("report longer than the gateway reads")
    fmt, _, body = value.partition(" ")
    if fmt == "TEXT":
        return parse_text(value)
    message = orca_load_report_pb2.OrcaLoadReport()
    if fmt == "JSON":  # protobuf's JSON parser is imported by the first JSON report: a twentieth of serve's start
        from google.protobuf import json_format

        try:
            json_format.Parse(body, message)
        except (json_format.ParseError, ValueError, RecursionError):
            raise OrcaFormatError("JSON report that protobuf's JSON parser refuses") from None
        return _from_message(message)
    if fmt == "BIN":
        return parse_bin(body)
    raise OrcaFormatError("unsupported ORCA header format")


def parse_bin(text: str) -> LoadReport:
    """A base64 serialized ``OrcaLoadReport`` (the ``BIN`` format and the ``-bin`` header)."""
    message = orca_load_report_pb2.OrcaLoadReport()
    try:
        message.ParseFromString(base64.b64decode(text.strip(), validate=True))
    except (binascii.Error, ValueError, DecodeError):
        raise OrcaFormatError("BIN report that is not a base64 OrcaLoadReport") from None
    return _from_message(message)


def backend_report(headers: list[tuple[bytes, bytes]]) -> LoadReport | None:
    """The report a backend's response carries, read as Envoy reads it (``-bin`` first), or None when there is
    none or Envoy would refuse it (a malformed report is no report: never passed on, never guessed)."""
    found = {name.lower(): value for name, value in headers if name.lower() in (_REPORT, _REPORT_BIN)}
    try:
        if _REPORT_BIN in found:
            return parse_bin(found[_REPORT_BIN].decode("ascii"))
        if _REPORT in found:
            return parse_value(found[_REPORT].decode("ascii"))
    except (OrcaFormatError, UnicodeDecodeError, ValueError):
        return None
    return None


_REPORT, _REPORT_BIN = REPORT.encode(), REPORT_BIN.encode()


def encode(report: LoadReport, fmt: str, decimals: int) -> tuple[bytes, bytes]:
    """The report as the header a caller asked for: ``TEXT`` (encode_text), ``JSON`` (proto3 JSON names, the
    values rounded as TEXT rounds them) or ``BIN`` (base64 serialized proto), all under ``endpoint-load-metrics``."""
    if fmt == "JSON":
        body: dict[str, object] = {}
        for key, number in report.items():
            rounded = float(format_number(number, decimals))
            prefix, dot, name = key.partition(".")
            if dot:
                body.setdefault(prefix, {})[name] = rounded  # type: ignore[index]
            else:
                body[key] = rounded
        text = "JSON " + json.dumps(body, separators=(",", ":"), sort_keys=True)
    elif fmt == "BIN":
        encode_proto(report)  # checks every value as the others do
        text = "BIN " + encode_bin(report)
    else:
        text = encode_text(report, decimals)
    return _REPORT, text.encode("ascii")


def with_utilization(report: LoadReport, name: str) -> LoadReport:
    """``report`` with ``application_utilization`` set from its named metric ``name`` (vLLM's
    ``kv_cache_usage_perc``), which Envoy's client-side weighted round robin prefers to ``cpu_utilization``;
    unchanged when the metric is absent."""
    if name not in report.named_metrics:
        return report
    return dataclasses.replace(report, application_utilization=report.named_metrics[name])


def merged(local: LoadReport | None, backend: LoadReport) -> LoadReport:
    """The gateway's own report carrying the backend's named metrics and utilization (the backend's win on a
    name both have); the scalars stay the gateway's."""
    if local is None:
        return LoadReport(named_metrics=dict(backend.named_metrics), utilization=dict(backend.utilization))
    return LoadReport(
        cpu_utilization=local.cpu_utilization,
        mem_utilization=local.mem_utilization,
        application_utilization=local.application_utilization,
        rps_fractional=local.rps_fractional,
        eps=local.eps,
        named_metrics={**local.named_metrics, **backend.named_metrics},
        utilization={**local.utilization, **backend.utilization},
    )
