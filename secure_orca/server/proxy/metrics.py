"""Per-route metrics of the proxy, named in kube's style (``apiserver_request_total``,
``apiserver_request_duration_seconds``, ``apiserver_current_inflight_requests``): every label value comes from a
closed set (the configured prefixes, the HTTP status code, an error kind), so no client can add a series."""

from __future__ import annotations

import bisect
from collections.abc import Iterator

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

# kube-apiserver's request duration buckets (k8s.io/apiserver pkg/endpoints/metrics/metrics.go), to 60 s.
BUCKETS = (0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30, 45, 60)
UPSTREAM_ERRORS = ("timeout", "unavailable", "broken")


class RouteMetrics:
    """Counts per route prefix: requests by code, durations, upstream errors by kind, requests in flight."""

    def __init__(self) -> None:
        self.codes: dict[tuple[str, int], int] = {}
        self.buckets: dict[str, list[int]] = {}
        self.sums: dict[str, float] = {}
        self.errors: dict[tuple[str, str], int] = {}
        self.in_flight: dict[str, int] = {}
        self.polls: dict[tuple[str, str], int] = {}  # (route, ok|failed): polls of a backend's load endpoint

    def add(self, prefix: str) -> None:
        self.buckets[prefix] = [0] * (len(BUCKETS) + 1)
        self.sums[prefix] = 0.0
        self.in_flight[prefix] = 0
        for kind in UPSTREAM_ERRORS:
            self.errors[(prefix, kind)] = 0

    def begin(self, prefix: str) -> None:
        self.in_flight[prefix] += 1

    def end(self, prefix: str, code: int, seconds: float) -> None:
        self.in_flight[prefix] -= 1
        self.count(prefix, code)
        self.buckets[prefix][bisect.bisect_left(BUCKETS, seconds)] += 1
        self.sums[prefix] += seconds

    def count(self, prefix: str, code: int) -> None:
        self.codes[(prefix, code)] = self.codes.get((prefix, code), 0) + 1

    def refused(self, prefix: str, code: int) -> None:
        """A refusal before the request went upstream (400, 408 before sending, 429)."""
        if code in (400, 429) or prefix not in self.in_flight:
            self.count(prefix, code)

    def upstream_error(self, prefix: str, kind: str) -> None:
        self.errors[(prefix, kind)] += 1

    def polled(self, prefix: str, ok: bool) -> None:
        """A poll of the route's backend load endpoint (``load-poll``) gave a report, or failed."""
        key = (prefix, "ok" if ok else "failed")
        self.polls[key] = self.polls.get(key, 0) + 1


class RouteCollector(Collector):
    def __init__(self, metrics: RouteMetrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily | HistogramMetricFamily]:
        m = self.metrics
        codes = {(prefix, str(code)): count for (prefix, code), count in m.codes.items()}
        requests = _counter(
            "secure_orca_proxy_request",
            "Proxied requests by route prefix and HTTP status code.",
            ["route", "code"],
            codes,
        )
        duration = HistogramMetricFamily(
            "secure_orca_proxy_request_duration_seconds",
            "Proxied request durations, from sending upstream to the response's end, by route prefix.",
            labels=["route"],
        )
        for prefix, counts in sorted(m.buckets.items()):
            cumulative, running = [], 0
            for bound, count in zip([*map(str, BUCKETS), "+Inf"], counts, strict=True):
                running += count
                cumulative.append((bound, running))
            duration.add_metric([prefix], cumulative, m.sums[prefix])
        errors = _counter(
            "secure_orca_proxy_upstream_errors",
            "Proxied requests whose backend failed, by route prefix and kind (timeout, unavailable, broken).",
            ["route", "kind"],
            m.errors,
        )
        in_flight = GaugeMetricFamily(
            "secure_orca_proxy_current_inflight_requests",
            "Proxied requests in flight now, by route prefix.",
            labels=["route"],
        )
        for prefix, count in sorted(m.in_flight.items()):
            in_flight.add_metric([prefix], count)
        polls = _counter(
            "secure_orca_proxy_load_polls",
            "Polls of a backend's load endpoint for the out-of-band stream, by route prefix and result (ok, failed).",
            ["route", "result"],
            m.polls,
        )
        yield from (requests, duration, errors, in_flight, polls)


def _counter(name: str, doc: str, labels: list[str], counts: dict[tuple[str, str], int]) -> CounterMetricFamily:
    """A counter family with one sample per label pair, in sorted order."""
    family = CounterMetricFamily(name, doc, labels=labels)
    for values, count in sorted(counts.items()):
        family.add_metric(list(values), count)
    return family
