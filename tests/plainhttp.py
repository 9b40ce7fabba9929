"""Plain HTTP (loopback ``/metrics`` scrapes, stand-in backends' control routes) through one httpx client per test
process. ``httpx.get`` builds a client per call, and every httpx client loads certifi's CA bundle, even for an
``http://`` URL: about 40 ms of CPU per scrape, paid thousands of times by tests that poll. No connection is kept
alive between calls, so a server that went away, or another on its port, is never reached through an old one.
``metric`` reads one sample of a ``/metrics`` page with prometheus-client's own parser."""

from __future__ import annotations

from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

_client: httpx.Client | None = None


def client() -> httpx.Client:
    global _client
    if _client is None:
        _client = httpx.Client(trust_env=False, limits=httpx.Limits(max_keepalive_connections=0))
    return _client


def get(url: str, **kwargs: Any) -> httpx.Response:
    return client().get(url, **kwargs)


def post(url: str, **kwargs: Any) -> httpx.Response:
    return client().post(url, **kwargs)


def value(text: str, name: str, default: float = 0.0, **labels: str) -> float:
    """The sample ``name`` with exactly ``labels`` in the Prometheus text ``text``; ``default`` where it has none."""
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return float(sample.value)
    return default


def metric(url: str, name: str, default: float = 0.0, **labels: str) -> float:
    """``value`` of the page at ``url`` (a ``/metrics`` endpoint)."""
    return value(get(url, timeout=10).text, name, default, **labels)
