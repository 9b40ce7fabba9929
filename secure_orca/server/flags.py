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


@dataclass(frozen=True)
class ProxyRoute:
    """Requests whose path starts with ``prefix`` go to ``upstream`` (the prefix is kept)."""

    prefix: str
    upstream: str


def parse_proxy(text: str) -> ProxyRoute:
    prefix, sep, url = text.partition("=")
    if not sep or not prefix.startswith("/"):
        raise FlagError(f"invalid proxy route {text!r} (use PREFIX=URL, PREFIX starting with /)")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise FlagError(f"invalid upstream URL in {text!r} (http:// or https:// with a host)")
    return ProxyRoute(prefix, url.rstrip("/"))
