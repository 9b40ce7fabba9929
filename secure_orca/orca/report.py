"""The ORCA load report: fields of xds.data.orca.v3.OrcaLoadReport, the TEXT and BIN encodings, and a strict
TEXT parser that applies the rules of Envoy's ``orca_parser.cc`` (pure: no I/O)."""

from __future__ import annotations

import base64
import math
import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field

from secure_orca.errors import SecureOrcaError

DEFAULT_DECIMALS = 2  # 0.01 of utilization is finer than any LB weighting resolves; see docs/hpack.md

SCALAR_FIELDS = ("cpu_utilization", "mem_utilization", "application_utilization", "rps_fractional", "eps")
MAP_FIELDS = ("named_metrics", "utilization")
# Field numbers in orca_load_report.proto, for the binary form.
_FIELD_NUMBERS = {
    "cpu_utilization": 1,
    "mem_utilization": 2,
    "request_cost": 4,
    "utilization": 5,
    "rps_fractional": 6,
    "eps": 7,
    "named_metrics": 8,
    "application_utilization": 9,
}
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*")
_NUMBER = re.compile(r"[+]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


class OrcaFormatError(SecureOrcaError, ValueError):
    """A report that Envoy's parser would reject, or that cannot be encoded; the message names the rule."""


@dataclass(frozen=True)
class LoadReport:
    """One load report. Unset scalars are ``None`` and are left out of the encoding."""

    cpu_utilization: float | None = None
    mem_utilization: float | None = None
    application_utilization: float | None = None
    rps_fractional: float | None = None
    eps: float | None = None
    named_metrics: dict[str, float] = field(default_factory=dict)
    utilization: dict[str, float] = field(default_factory=dict)

    @classmethod
    def of(
        cls,
        scalars: Mapping[str, float],
        named_metrics: dict[str, float] | None = None,
        utilization: dict[str, float] | None = None,
    ) -> LoadReport:
        """A report from scalar values keyed by their SCALAR_FIELDS name (other keys are an error)."""
        unknown = set(scalars) - set(SCALAR_FIELDS)
        if unknown:
            raise ValueError(f"not an ORCA scalar field: {sorted(unknown)[0]}")
        return cls(
            cpu_utilization=scalars.get("cpu_utilization"),
            mem_utilization=scalars.get("mem_utilization"),
            application_utilization=scalars.get("application_utilization"),
            rps_fractional=scalars.get("rps_fractional"),
            eps=scalars.get("eps"),
            named_metrics=dict(named_metrics or {}),
            utilization=dict(utilization or {}),
        )

    def items(self) -> list[tuple[str, float]]:
        """The report as TEXT keys and values, in a stable order, each value checked."""
        out: list[tuple[str, float]] = []
        for name in SCALAR_FIELDS:
            value = getattr(self, name)
            if value is not None:
                out.append((name, _check_value(name, value)))
        for prefix in MAP_FIELDS:
            for key, value in sorted(getattr(self, prefix).items()):
                if not _NAME.fullmatch(key):
                    raise OrcaFormatError(f"{prefix} key {key!r} must match {_NAME.pattern}")
                out.append((f"{prefix}.{key}", _check_value(f"{prefix}.{key}", value)))
        return out


def _check_value(name: str, value: float) -> float:
    value = float(value)
    if math.isnan(value) or math.isinf(value):
        raise OrcaFormatError(f"{name}: NaN and infinity are rejected")
    if value < 0:
        raise OrcaFormatError(f"{name}: negative values are rejected")
    return value


def format_number(value: float, decimals: int) -> str:
    """Fixed-point text without trailing zeros or exponent: ``0.310`` -> ``0.31``, ``12.0`` -> ``12``."""
    text = f"{value:.{decimals}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text or "0"


def encode_text(report: LoadReport, decimals: int = DEFAULT_DECIMALS) -> str:
    """The ``endpoint-load-metrics`` value: ``TEXT cpu_utilization=0.31, mem_utilization=0.42, ...``."""
    if decimals < 0 or decimals > 12:
        raise OrcaFormatError("decimals must be between 0 and 12")
    pairs = ", ".join(f"{key}={format_number(value, decimals)}" for key, value in report.items())
    return f"TEXT {pairs}"


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _double_field(number: int, value: float) -> bytes:
    return _varint(number << 3 | 1) + struct.pack("<d", value)


def encode_proto(report: LoadReport) -> bytes:
    """The serialized ``OrcaLoadReport`` protobuf (proto3: zero scalars are omitted, as a proto encoder would)."""
    out = bytearray()
    for name in SCALAR_FIELDS:
        value = getattr(report, name)
        if value:
            out += _double_field(_FIELD_NUMBERS[name], _check_value(name, value))
    for prefix in MAP_FIELDS:
        for key, value in sorted(getattr(report, prefix).items()):
            raw_key = key.encode()
            entry = _varint(1 << 3 | 2) + _varint(len(raw_key)) + raw_key
            entry += _double_field(2, _check_value(f"{prefix}.{key}", value))
            out += _varint(_FIELD_NUMBERS[prefix] << 3 | 2) + _varint(len(entry)) + entry
    return bytes(out)


def encode_bin(report: LoadReport) -> str:
    """The legacy ``endpoint-load-metrics-bin`` value: base64 of the serialized proto, no prefix."""
    return base64.b64encode(encode_proto(report)).decode("ascii")


def parse_text(value: str) -> LoadReport:
    """Parse an ``endpoint-load-metrics`` value with Envoy's rules; raise OrcaFormatError naming the rule."""
    fmt, sep, body = value.partition(" ")
    if not sep or fmt not in ("TEXT", "JSON", "BIN"):
        raise OrcaFormatError("unsupported ORCA header format")
    if fmt != "TEXT":
        raise OrcaFormatError(f"{fmt} reports are not parsed here, only TEXT")
    scalars: dict[str, float] = {}
    maps: dict[str, dict[str, float]] = {prefix: {} for prefix in MAP_FIELDS}
    seen: set[str] = set()
    for raw in body.split(","):
        token = raw.strip()
        if not token:
            continue
        key, sep, text = _split_pair(token)
        if not sep:
            raise OrcaFormatError(f"metric {token!r} is not a key=value pair")
        if key in seen:
            raise OrcaFormatError(f"duplicate metric name {key!r}")
        seen.add(key)
        if not text:
            raise OrcaFormatError(f"empty value for {key!r}")
        if not _NUMBER.fullmatch(text):
            raise OrcaFormatError(f"value of {key!r} is not a non-negative finite number")
        number = float(text)
        if math.isinf(number):
            raise OrcaFormatError(f"value of {key!r} is not a non-negative finite number")
        prefix, dot, name = key.partition(".")
        if key in SCALAR_FIELDS:
            scalars[key] = number
        elif dot and prefix in MAP_FIELDS and name:
            maps[prefix][name] = number
        else:
            raise OrcaFormatError(f"unsupported metric name {key!r}")
    return LoadReport.of(scalars, named_metrics=maps["named_metrics"], utilization=maps["utilization"])


def _split_pair(token: str) -> tuple[str, str, str]:
    """Split on the first ``=`` (or ``:``, which recent Envoy accepts too), trimming both sides."""
    cut = min((i for i in (token.find("="), token.find(":")) if i >= 0), default=-1)
    if cut < 0:
        return token, "", ""
    return token[:cut].strip(), token[cut], token[cut + 1 :].strip()
