"""Parsing of kube-apiserver-style flag values (pure): durations, feature gates, lists, proxy routes."""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from secure_orca.errors import FlagError

KNOWN_GATES = frozenset({"RequestCostAggregation"})
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """A Go duration (``100ms``, ``1.5s``, ``1m30s``) in seconds; a bare ``0`` is allowed."""
    if text == "0":
        return 0.0
    pos, total = 0, 0.0
    for match in _DURATION.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        pos = match.end()
    if pos != len(text) or not text:
        raise FlagError(f"invalid duration {text!r} (use Go syntax, e.g. 100ms, 1s, 1m30s)")
    return total


def parse_feature_gates(text: str) -> dict[str, bool]:
    """``Name=true,Other=false``; unknown gates and non-boolean values are refused, as kube-apiserver does."""
    gates: dict[str, bool] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep:
            raise FlagError(f"missing bool value for {name}")
        if name not in KNOWN_GATES:
            raise FlagError(f"unrecognized feature gate: {name}")
        lowered = value.strip().lower()
        if lowered not in ("true", "false"):
            raise FlagError(f"invalid value of {name}={value.strip()}, err: not a boolean")
        gates[name] = lowered == "true"
    return gates


def parse_bool(text: str) -> bool:
    """A Go ``strconv.ParseBool`` value, as kube's boolean flags take (``--anonymous-auth=false``)."""
    if text in ("1", "t", "T", "true", "TRUE", "True"):
        return True
    if text in ("0", "f", "F", "false", "FALSE", "False"):
        return False
    raise FlagError(f"invalid boolean value {text!r} (use true or false)")


def parse_header_names(text: str) -> tuple[str, ...]:
    """A comma list of header names or prefixes (kube's StringSlice); an item that is only whitespace is
    refused as kube-apiserver refuses it, the others are trimmed."""
    if not text:
        return ()
    items = text.split(",")
    if any(not item.strip() for item in items):
        raise FlagError("empty value in the list")
    return tuple(item.strip() for item in items)


def parse_list(text: str) -> list[str]:
    """A comma list, whitespace trimmed, empty items dropped."""
    return [item.strip() for item in text.split(",") if item.strip()]


ROUTE_CHOICES = {
    "errors": ("kube", "openai"),  # the body of the gateway's own refusals: kube's Status, or OpenAI's error JSON
    "authorization": ("strip", "pass"),  # whether the client's Authorization reaches the backend
    "report": ("local", "backend", "merged"),  # whose load an entitled caller's report carries
    "backend-format": ("text", "json"),  # the endpoint-load-metrics-format the backend is asked in
    "load-poll": ("vllm-metrics", "sglang-loads"),  # the backend's load endpoint polled for the out-of-band stream
}
ROUTE_DURATIONS = ("first-byte-timeout", "idle-timeout", "total-timeout")  # each a duration or "off"
ROUTE_NAMES = ("utilization-metric",)  # a backend's named metric, as ORCA names them


@dataclass(frozen=True)
class ProxyRoute:
    """Requests whose path starts with ``prefix`` go to ``upstream``. An upstream URL without a path (or ``/``)
    receives the request's path as is; one with a path receives it with ``prefix`` replaced by that path, so
    ``/v1=http://host:8100/v1`` sends ``/v1/models`` to ``/v1/models`` (never ``/v1/v1/models``).
    ``options`` are the route's ``;key=value`` settings, validated (ROUTE_CHOICES, ROUTE_DURATIONS)."""

    prefix: str
    upstream: str
    options: tuple[tuple[str, str], ...] = ()

    def option(self, key: str, default: str) -> str:
        return dict(self.options).get(key, default)


_METRIC_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*")  # ORCA's named_metrics keys (orca.report)


def parse_off_duration(text: str) -> float | None:
    """A duration, or ``off`` (None): a timeout that may be switched off."""
    return None if text == "off" else parse_duration(text)


def parse_proxy(text: str) -> ProxyRoute:
    """``PREFIX=URL[;key=value...]`` (pure): the route, its URL and its options, each checked."""
    spec, *settings = text.split(";")
    prefix, sep, url = spec.partition("=")
    if not sep or not prefix.startswith("/"):
        raise FlagError(f"invalid proxy route {text!r} (use PREFIX=URL, PREFIX starting with /)")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise FlagError(f"invalid upstream URL in {text!r} (http:// or https:// with a host)")
    if parts.query or parts.fragment or "%" in parts.path or {".", ".."} & set(parts.path.split("/")):
        raise FlagError(f"invalid upstream URL in {text!r} (a plain path, no query, fragment or escapes)")
    options: dict[str, str] = {}
    for setting in settings:
        key, eq, choice = (part.strip() for part in setting.partition("="))
        if not eq or key in options:
            raise FlagError(f"invalid route option {setting!r} in {text!r} (key=value, each key once)")
        if key in ROUTE_DURATIONS:
            parse_off_duration(choice)
        elif key in ROUTE_NAMES:
            if not _METRIC_NAME.fullmatch(choice):
                raise FlagError(f"invalid route option {setting!r} (a metric name: letters, digits, _ . -)")
        elif choice not in ROUTE_CHOICES.get(key, (choice,)) or key not in ROUTE_CHOICES:
            known = ", ".join(
                [*ROUTE_DURATIONS, *ROUTE_NAMES, *(f"{k}={'|'.join(v)}" for k, v in ROUTE_CHOICES.items())]
            )
            raise FlagError(f"invalid route option {setting!r} (known: {known})")
        options[key] = choice
    return ProxyRoute(prefix, url.rstrip("/"), tuple(options.items()))


def parse_address(text: str) -> tuple[str, int]:
    """``HOST:PORT``, ``[::1]:PORT``, ``:PORT`` or ``PORT``; the host defaults to 127.0.0.1."""
    host, _, port_text = text.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise FlagError(f"invalid address {text!r} (use HOST:PORT, e.g. 127.0.0.1:9090)")
    return host, int(port_text)
