"""Prometheus metrics: how an operator knows the feature works (the KEP's empty monitoring section).

Counters on the request path are pre-bound children (one increment, no label lookup), and only requests
that carry the opt-in are counted. Sampler and verifier figures are read at scrape time, costing requests
nothing. Served on an opt-in address, loopback unless told otherwise.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from secure_orca.authz.policy import Decision
from secure_orca.authz.reasons import Reason
from secure_orca.errors import FlagError
from secure_orca.server.sampler import Sampler


class _SamplerCollector(Collector):
    def __init__(self, sampler: Sampler, verifications: Callable[[], int]) -> None:
        self.sampler = sampler
        self.verifications = verifications

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        s = self.sampler
        for name, value, doc in (
            ("secure_orca_sampler_ticks", s.ticks, "Load samples published."),
            ("secure_orca_sampler_errors", s.errors, "Load samples that failed (the last report stayed)."),
            ("secure_orca_sampler_encodes", s.encodes, "Load reports serialized (by the sampler only)."),
            ("secure_orca_sampler_cpu_seconds", s.cpu_seconds, "CPU seconds the sampler's ticks used."),
            ("secure_orca_front_proxy_verifications", self.verifications(), "Client chains verified."),
        ):
            yield CounterMetricFamily(name, doc, value=value)
        gauge = GaugeMetricFamily("secure_orca_load_report_value", "Last sampled values.", labels=["metric"])
        report = s.report
        if report is not None:
            for key, value in report.items():
                gauge.add_metric([key], value)
        yield gauge


class Metrics:
    """The server's metrics in a private registry."""

    def __init__(self, sampler: Sampler, verifications: Callable[[], int]) -> None:
        self.registry = CollectorRegistry()
        reports = Counter(
            "secure_orca_load_reports",
            "Requests with the opt-in header, by result and reason.",
            ["result", "reason"],
            registry=self.registry,
        )
        # Every Reason has its child from the start: a new reason can never raise KeyError on the request path.
        self._by_reason = {r: reports.labels("attached" if r.grants else "refused", r.value) for r in Reason}
        self._stripped = Counter(
            "secure_orca_backend_orca_headers_stripped",
            "ORCA headers removed from application or proxied backend responses.",
            registry=self.registry,
        )
        self._reloads = Counter(
            "secure_orca_credential_reloads",
            "Credential file reloads, by flag and result.",
            ["flag", "result"],
            registry=self.registry,
        )
        self.registry.register(_SamplerCollector(sampler, verifications))

    def on_decision(self, decision: Decision) -> None:
        self._by_reason[decision.reason].inc()

    def on_stripped(self, count: int) -> None:
        self._stripped.inc(count)

    def on_reload(self, flag: str, ok: bool) -> None:
        self._reloads.labels(flag, "success" if ok else "failure").inc()

    def serve(self, address: str) -> int:
        """Serve /metrics on ``address`` in a daemon thread; returns the bound port."""
        host, port = parse_address(address)
        server, _thread = start_http_server(port, addr=host, registry=self.registry)
        return int(server.server_address[1])


def parse_address(text: str) -> tuple[str, int]:
    """``HOST:PORT``, ``[::1]:PORT``, ``:PORT`` or ``PORT``; the host defaults to 127.0.0.1."""
    host, _, port_text = text.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise FlagError(f"invalid address {text!r} (use HOST:PORT, e.g. 127.0.0.1:9090)")
    return host, int(port_text)


