"""Prometheus metrics: how an operator knows the feature works (the KEP's empty monitoring section).

Counters on the request path are pre-bound children (one increment, no label lookup), and only requests
that carry the opt-in are counted. Sampler and verifier figures are read at scrape time, costing requests
nothing. Served on an opt-in address, loopback unless told otherwise. The load values themselves are never
exported: they are what the policy guards, and /metrics has no authentication.

kube's authentication metrics mirror kubernetes/apiserver ``pkg/endpoints/filters/metrics.go`` at
24a394e516bfda066d7e2221d7d92c052de27c54 (``recordAuthenticationMetrics``): ``authentication_attempts``
(counter, ``result``: success, failure, error), ``authentication_duration_seconds`` (histogram, ``result``,
``ExponentialBuckets(0.001, 2, 15)``) and ``authenticated_user_requests`` (counter, ``username`` compressed by
``compressUsername``). prometheus-client writes a counter's samples with ``_total`` appended, as Go's client
does in the OpenMetrics format.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from secure_orca.authn.authenticator import Outcome
from secure_orca.authz.policy import Decision
from secure_orca.authz.reasons import Reason
from secure_orca.authz.streams import Kind
from secure_orca.server.audit.log import AuditLog
from secure_orca.server.flags import parse_address
from secure_orca.server.hpack.headers import REFUSED_BLOCKS
from secure_orca.server.http.handshake import GIVE_UP_CAUSES, HandshakeStats
from secure_orca.server.oob import OobService
from secure_orca.server.sampler import Sampler

# kube's ExponentialBuckets(0.001, 2, 15): 1 ms to 16.384 s
AUTHENTICATION_BUCKETS = tuple(0.001 * 2**i for i in range(15))
AUTHENTICATION_RESULTS = ("success", "failure", "error")
_KNOWN_USERS = frozenset({"admin", "client", "kube_proxy", "kubelet", "system:serviceaccount:kube-system:default"})


def compress_username(name: str) -> str:
    """kube's ``compressUsername``: a few known identities by name, ``email_id`` for anything with an @,
    ``other`` for the rest (bounded cardinality, and no user name on /metrics)."""
    if name in _KNOWN_USERS:
        return name
    return "email_id" if "@" in name else "other"


def authentication_result(outcome: Outcome) -> str:
    """kube's label: ``error`` when an authenticator refused a credential, ``failure`` when none accepted."""
    if outcome.user is not None:
        return "success"
    return "error" if outcome.error is not None else "failure"


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


class _HeaderBlockCollector(Collector):
    """Inbound HTTP/2 header blocks refused before or while decoding (``hpack.headers.REFUSED_BLOCKS``), each
    ending its connection; every reason from the start."""

    def collect(self) -> Iterator[CounterMetricFamily]:
        refused = CounterMetricFamily(
            "secure_orca_h2_header_blocks_refused",
            "HTTP/2 header blocks refused, ending their connection with GOAWAY, by reason.",
            labels=["reason"],
        )
        for reason, count in sorted(REFUSED_BLOCKS.items()):
            refused.add_metric([reason], count)
        yield refused


class _AuditCollector(Collector):
    def __init__(self, audit: AuditLog) -> None:
        self.audit = audit

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        a = self.audit
        yield CounterMetricFamily("secure_orca_audit_events_written", "Audit events written.", value=a.written)
        yield CounterMetricFamily(
            "secure_orca_audit_events_dropped",
            "Audit events dropped: the queue was full (batch mode), or a request waiting for room went away.",
            value=a.dropped,
        )
        yield CounterMetricFamily(
            "secure_orca_audit_write_errors", "Audit events lost to write errors (a full disk).", value=a.write_errors
        )
        yield GaugeMetricFamily("secure_orca_audit_queue_length", "Audit events waiting.", value=len(a.queue))
        yield GaugeMetricFamily(
            "secure_orca_audit_queue_bytes",
            "Bytes charged for the audit events queued or being written.",
            value=a.queued_bytes,
        )
        yield GaugeMetricFamily(
            "secure_orca_audit_requests_waiting",
            "Requests awaiting room in the audit queue (blocking modes).",
            value=a.waiting,
        )


class _OobCollector(Collector):
    """The out-of-band stream (server/oob.py), by identity kind, never by name: every label value comes from a
    closed set (``Kind``, ``End``, gRPC status names, refusal reasons), so no client can add a series."""

    def __init__(self, oob: OobService) -> None:
        self.oob = oob

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        stats, slots = self.oob.stats, self.oob.slots
        open_streams = GaugeMetricFamily(
            "secure_orca_oob_streams_open", "Out-of-band streams open now, by identity kind.", labels=["kind"]
        )
        opened = CounterMetricFamily(
            "secure_orca_oob_streams_opened", "Out-of-band streams opened (served), by identity kind.", labels=["kind"]
        )
        reports = CounterMetricFamily(
            "secure_orca_oob_reports_sent", "Out-of-band report messages sent, by identity kind.", labels=["kind"]
        )
        skipped = CounterMetricFamily(
            "secure_orca_oob_reports_skipped",
            "Out-of-band reports not sent because the stream's previous report was still unsent (a slow reader).",
            labels=["kind"],
        )
        for kind in Kind:  # every kind from the start: rate() over a path that is not used yet is 0, not absent
            open_streams.add_metric([kind.value], slots.open(kind))
            opened.add_metric([kind.value], stats.opened[kind])
            reports.add_metric([kind.value], stats.reports[kind])
            skipped.add_metric([kind.value], stats.skipped[kind])
        yield from (open_streams, opened, reports, skipped)
        refused = CounterMetricFamily(
            "secure_orca_oob_stream_refusals",
            "Out-of-band streams refused, by identity kind (none: not entitled), status and reason.",
            labels=["kind", "status", "reason"],
        )
        for (kind_label, status, reason), count in sorted(stats.refused.items()):
            refused.add_metric([kind_label, status, reason], count)
        yield refused
        ended = CounterMetricFamily(
            "secure_orca_oob_streams_ended",
            "Out-of-band streams ended after they were served, by identity kind and cause.",
            labels=["kind", "cause"],
        )
        resets = CounterMetricFamily(
            "secure_orca_oob_stream_resets",
            "Out-of-band streams the server reset (RST_STREAM: bytes were unsent, or the write deadline passed), "
            "by identity kind and cause.",
            labels=["kind", "cause"],
        )
        for family, counts in ((ended, stats.ended), (resets, stats.resets)):
            for (kind, cause), count in sorted(counts.items()):
                family.add_metric([kind.value, cause.value], count)
        yield from (ended, resets)


class _HandshakeCollector(Collector):
    """Connections below HTTP (server/http/accept.py): pending handshakes, and those given up, by cause."""

    def __init__(self, stats: HandshakeStats) -> None:
        self.stats = stats

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        yield GaugeMetricFamily(
            "secure_orca_tls_handshakes_pending",
            "Connections accepted whose TLS handshake has not completed.",
            value=self.stats.pending(),
        )
        given_up = CounterMetricFamily(
            "secure_orca_tls_handshakes_given_up",
            "Connections closed before their TLS handshake completed, by cause (a cap, descriptors, a deadline).",
            labels=["cause"],
        )
        for cause in GIVE_UP_CAUSES:
            given_up.add_metric([cause], self.stats.given_up[cause])
        yield given_up


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
        self.registry.register(_HeaderBlockCollector())
        attempts = Counter(
            "authentication_attempts", "Counter of authenticated attempts.", ["result"], registry=self.registry
        )
        duration = Histogram(
            "authentication_duration_seconds",
            "Authentication duration in seconds broken out by result.",
            ["result"],
            buckets=AUTHENTICATION_BUCKETS,
            registry=self.registry,
        )
        self._users = Counter(
            "authenticated_user_requests",
            "Counter of authenticated requests broken out by username.",
            ["username"],
            registry=self.registry,
        )
        self._attempts = {r: attempts.labels(r) for r in AUTHENTICATION_RESULTS}
        self._duration = {r: duration.labels(r) for r in AUTHENTICATION_RESULTS}

    def watch_audit(self, audit: AuditLog) -> None:
        self.registry.register(_AuditCollector(audit))

    def watch_oob(self, oob: OobService) -> None:
        self.registry.register(_OobCollector(oob))

    def watch_handshakes(self, stats: HandshakeStats) -> None:
        self.registry.register(_HandshakeCollector(stats))

    def on_authentication(self, outcome: Outcome, seconds: float) -> None:
        result = authentication_result(outcome)
        self._attempts[result].inc()
        self._duration[result].observe(seconds)
        if outcome.user is not None:
            self._users.labels(compress_username(outcome.user.name)).inc()

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
