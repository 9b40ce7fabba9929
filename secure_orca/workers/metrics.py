"""One /metrics for a server of several workers: the workers' own registries, summed, under the same names.

Each worker renders its registry (exactly the families of a single process) into its exposition region of the
board once a second. When a worker is reaped, the supervisor folds its counters and histograms into the retired
region, so a restart never makes a server counter go back. A metrics process of its own (forked by the
supervisor, restarted like a worker, never forking itself, so its request threads are safe) serves /metrics:
at each scrape it parses the regions and sums the samples that share a name and labels (the earliest
``*_created``). The sampler's families are the supervisor's, as there is one sampler per server, and
``secure_orca_worker_restarts`` and ``secure_orca_workers`` are added, and the credential reader's reload counts.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable, Iterator, Sequence
from http.server import ThreadingHTTPServer

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import MetricsHandler
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from secure_orca.workers.board import Board, Region

SAMPLER_FAMILIES = frozenset(
    {
        "secure_orca_sampler_ticks",
        "secure_orca_sampler_errors",
        "secure_orca_sampler_encodes",
        "secure_orca_sampler_cpu_seconds",
    }
)
_CUMULATIVE = frozenset({"counter", "histogram", "summary"})


def merge(texts: Iterable[str], kinds: frozenset[str] | None = None) -> list[Metric]:
    """Families of several expositions summed sample by sample (``kinds``: keep only families of those types)."""
    families: dict[str, Metric] = {}
    values: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]] = {}
    for text in texts:
        for family in text_string_to_metric_families(text):
            if kinds is not None and family.type not in kinds:
                continue
            if family.name not in families:
                families[family.name] = Metric(family.name, family.documentation, family.type, family.unit)
                values[family.name] = {}
            earliest = family.name.endswith("_created")
            into = values[family.name]
            for sample in family.samples:
                key = (sample.name, tuple(sorted(sample.labels.items())))
                if key in into:
                    into[key] = min(into[key], sample.value) if earliest else into[key] + sample.value
                else:
                    into[key] = sample.value
    for name, metric in families.items():
        for (sample_name, labels), value in values[name].items():
            metric.add_sample(sample_name, dict(labels), value)
    return list(families.values())


class _Families(Collector):
    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        yield from self.families


def render(families: list[Metric]) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(families))
    return generate_latest(registry)


def retire(board: Board, index: int) -> None:
    """Fold a reaped worker's counters and histograms into the retired region (the supervisor, before the
    worker's regions are cleared)."""
    dead = board.expositions[index].read()
    if dead is None:
        return
    kept = board.retired.read()
    texts = [dead[1].decode(), *([kept[1].decode()] if kept is not None else [])]
    board.retired.publish(render(merge(texts, _CUMULATIVE)))


class ServerCollector(Collector):
    """The server's families: the workers' summed, the retired counts added, the supervisor's own figures."""

    def __init__(self, board: Board, more: Sequence[Region] = ()) -> None:
        self.board = board
        self.more = more  # other processes' expositions (the credential reader's reloads)

    def collect(self) -> Iterator[Metric]:
        regions = [*self.board.expositions, self.board.retired, *self.more]
        texts = [got[1].decode() for got in (region.read() for region in regions) if got is not None]
        for family in merge(texts):
            if family.name not in SAMPLER_FAMILIES:
                yield family
        s = self.board.read_supervisor()
        for name, value, doc in (
            ("secure_orca_sampler_ticks", s.ticks, "Load samples published."),
            ("secure_orca_sampler_errors", s.errors, "Load samples that failed (the last report stayed)."),
            ("secure_orca_sampler_encodes", s.encodes, "Load reports serialized (by the sampler only)."),
            ("secure_orca_sampler_cpu_seconds", s.cpu_seconds, "CPU seconds the sampler's ticks used."),
            ("secure_orca_worker_restarts", s.restarts, "Workers that ended and were started again."),
        ):
            yield CounterMetricFamily(name, doc, value=value)
        live = [self.board.read(index) for index in range(self.board.workers)]
        yield GaugeMetricFamily(
            "secure_orca_workers", "Workers serving now.", value=sum(1 for slot in live if slot and slot.pid)
        )


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, host: str, port: int, handler: type) -> None:
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        super().__init__((host, port), handler)


def metrics_server(board: Board, host: str, port: int, more: Sequence[Region] = ()) -> ThreadingHTTPServer:
    """The /metrics server, bound now (an OSError is the caller's to word); ``serve_forever`` in its process."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ServerCollector(board, more))
    return _Server(host, port, MetricsHandler.factory(registry))
