"""A model of the HPACK cost of ORCA load reports on kube-apiserver responses (pure: no I/O, no clock).

One HTTP/2 connection is simulated in virtual time: responses at a fixed rate, each with the headers
kube-apiserver sends (``:status``, a fresh ``audit-id``, ``cache-control``, ``content-type``, the APF
flow-schema and priority-level UIDs, a varying ``content-length``, a ``date`` that changes each second) plus
the report the sampler published last. Report values follow seeded mean-reverting random walks, so a run is
deterministic. The blocks are produced by ``hpack.Encoder`` (as h2/hypercorn would, 4096-byte table) and the
bytes are attributed with :mod:`secure_orca.hpackcost.walk`: the model doubles as a test of the walker.
"""

from __future__ import annotations

import math
import random
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from email.utils import formatdate

from secure_orca.hpackcost.walk import BlockCost, attribute_connection, replay
from secure_orca.orca.headers import REPORT as HEADER
from secure_orca.orca.headers import REPORT_BIN as HEADER_BIN
from secure_orca.orca.report import LoadReport, encode_bin, encode_text, format_number

EPOCH = 1767225600.0  # 2026-01-01T00:00:00Z, the virtual time of the first response
FLOWSCHEMA_UID = "4d1c43a4-5c11-4e0b-9b5a-2f6a0c3e7d21"
PRIORITY_LEVEL_UID = "b8e1f0a2-93c4-4d5e-8f6a-7b1c2d3e4f50"
WARMUP_CAP = 200  # responses left out of steady-state averages (the table fills within ~60)
KEP_EXAMPLE = LoadReport(cpu_utilization=0.3, mem_utilization=0.8, rps_fractional=10.0)


@dataclass(frozen=True)
class Mitigation:
    """How the server publishes and attaches reports."""

    name: str
    decimals: int | None = None  # quantise to this many decimals (overrides the cell's precision)
    threshold: float = 0.0  # publish a new sample only when a value moves by more than this (relative above 1)
    once_per_interval: bool = False  # attach a report to a connection only when it differs from the last one
    never_indexed: bool = False  # send the report as a never-indexed literal
    binary: bool = False  # send endpoint-load-metrics-bin (base64 proto) instead of TEXT


MITIGATIONS: dict[str, Mitigation] = {
    m.name: m
    for m in (
        Mitigation("none"),
        Mitigation("quantise", decimals=2),
        Mitigation("threshold", threshold=0.05),
        Mitigation("once-per-interval", once_per_interval=True),
        Mitigation("never-indexed", never_indexed=True),
        Mitigation("bin", binary=True),
        Mitigation("combined", decimals=2, threshold=0.05, once_per_interval=True),
    )
}


@dataclass(frozen=True)
class Scenario:
    """One cell of the grid: a connection's response rate, the sampling interval and the report's policy."""

    rate: float  # responses per second on this connection
    interval: float  # sampling interval, seconds
    decimals: int = 3
    mitigation: Mitigation = field(default_factory=lambda: MITIGATIONS["none"])
    duration: float = 60.0  # virtual seconds to simulate, capped by max_responses
    max_responses: int = 10000
    seed: int = 1
    server_rps: float = 300.0  # the server-wide request rate that rps_fractional reports

    @property
    def responses(self) -> int:
        """Number of responses simulated."""
        return max(1, min(self.max_responses, round(self.rate * self.duration)))

    @property
    def precision(self) -> int:
        """Decimals actually sent."""
        return self.decimals if self.mitigation.decimals is None else min(self.decimals, self.mitigation.decimals)


@dataclass(frozen=True)
class CellResult:
    """Figures for one cell; per-response and per-second figures are steady-state (after warm-up)."""

    rate: float
    interval: float
    decimals: int
    mitigation: str
    responses: int
    warmup: int
    uncompressed: float  # name + value octets of the reports sent (mean)
    entry_size: float  # RFC 7541 entry size: uncompressed + 32
    first_send: int | None  # wire bytes of the first report
    marginal: float  # header bytes per response, with the report minus without
    orca_bytes: float  # bytes of the report representation per response
    eviction_cost: float  # marginal - orca_bytes: other fields re-sent because the report evicted them
    literals_per_s: float  # report values sent as literals per second
    values_per_s: float  # responses per second whose report differs from the one before (new values)
    evictions_per_s: float  # all evictions per second on the connection
    orca_evictions_per_s: float  # evictions caused by inserting a report
    bytes_per_s: float  # marginal * rate
    reports_per_s: float  # responses carrying a report per second
    cpu_mae: float  # mean |cpu_utilization the LB holds - latest true sample|
    mean_age: float  # mean age, seconds, of the sample behind the LB's value
    max_age: float
    replay_exact: bool  # the walker's replay reproduced the encoder's blocks


def samples(count: int, interval: float, seed: int, server_rps: float) -> list[LoadReport]:
    """``count`` samples ``interval`` apart: Ornstein-Uhlenbeck walks for CPU and memory, Poisson-like rps."""
    rng = random.Random(f"{seed}:samples")

    def ou(x: float, mean: float, theta: float, sigma: float) -> float:
        decay = math.exp(-theta * interval)
        spread = sigma * math.sqrt((1 - decay * decay) / (2 * theta))
        return mean + (x - mean) * decay + spread * rng.gauss()

    cpu, mem, out = 0.45, 0.6, []
    for _ in range(count):
        cpu = min(max(ou(cpu, 0.45, 0.5, 0.1), 0.0), 1.5)
        mem = min(max(ou(mem, 0.6, 0.05, 0.01), 0.0), 1.0)
        expected = server_rps * interval
        rps = max(0.0, rng.gauss(expected, math.sqrt(expected))) / interval
        out.append(LoadReport(cpu_utilization=cpu, mem_utilization=mem, rps_fractional=rps))
    return out


def quantised(report: LoadReport, decimals: int) -> LoadReport:
    """The report as a receiver sees it after ``decimals``-digit TEXT encoding."""
    values = {k: float(format_number(v, decimals)) for k, v in report.items() if "." not in k}
    return LoadReport.of(values)


def published(reports: Sequence[LoadReport], threshold: float) -> list[int]:
    """For each sample, the index of the sample the server publishes: a new one only if a value moved enough."""
    out: list[int] = []
    for k, report in enumerate(reports):
        if not out:
            out.append(k)
            continue
        base = dict(reports[out[-1]].items())
        moved = any(abs(v - base[key]) > threshold * max(1.0, abs(base[key])) for key, v in report.items())
        out.append(k if moved else out[-1])
    return out


def response_headers(rng: random.Random, t: float) -> list[tuple[str, str]]:
    """The headers of one kube-apiserver response at virtual time ``t`` (Go's order: sorted, then length, date)."""
    status = rng.choices(("200", "201", "404"), (90, 5, 5))[0]
    return [
        (":status", status),
        ("audit-id", str(uuid.UUID(int=rng.getrandbits(128), version=4))),
        ("cache-control", "no-cache, private"),
        ("content-type", "application/json"),
        ("x-kubernetes-pf-flowschema-uid", FLOWSCHEMA_UID),
        ("x-kubernetes-pf-prioritylevel-uid", PRIORITY_LEVEL_UID),
        ("content-length", str(int(rng.lognormvariate(6.5, 1.2)))),
        ("date", formatdate(EPOCH + math.floor(t), usegmt=True)),
    ]


@dataclass(frozen=True)
class _Trace:
    """The header lists of a run, and what the load balancer held after each response."""

    header_lists: list[list[tuple[str, str]]]
    attached: list[bool]
    report_sizes: list[int]  # name + value octets of each report sent
    cpu_error: list[float | None]
    age: list[float | None]


def trace(scenario: Scenario) -> _Trace:
    """Generate the header lists of a scenario (deterministic for its seed)."""
    m, decimals = scenario.mitigation, scenario.precision
    n = scenario.responses
    per_sample = scenario.rate * scenario.interval
    count = math.floor((n - 1) / per_sample + 1e-9) + 1
    truth = samples(count, scenario.interval, scenario.seed, scenario.server_rps)
    sent = [quantised(r, decimals) for r in truth]
    publish = published(truth, m.threshold)
    name = HEADER_BIN if m.binary else HEADER
    values = {k: encode_bin(sent[k]) if m.binary else encode_text(sent[k], decimals) for k in set(publish)}
    rng = random.Random(f"{scenario.seed}:requests")
    out = _Trace([], [], [], [], [])
    held: int | None = None
    for i in range(n):
        t = i / scenario.rate
        k = math.floor(i / per_sample + 1e-9)
        headers = response_headers(rng, t)
        attach = not (m.once_per_interval and held == publish[k])
        if attach:
            held = publish[k]
            headers.insert(4, (name, values[held]))
            out.report_sizes.append(len(name) + len(values[held]))
        out.header_lists.append(headers)
        out.attached.append(attach)
        held_cpu = None if held is None else sent[held].cpu_utilization
        out.cpu_error.append(None if held_cpu is None else abs(held_cpu - (truth[k].cpu_utilization or 0.0)))
        out.age.append(None if held is None else max(0.0, t - held * scenario.interval))
    return out


def _mean(values: Iterable[float | None]) -> float:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else 0.0


def simulate(scenario: Scenario) -> CellResult:
    """Run one cell: encode the responses with ``hpack.Encoder``, attribute the bytes with the walker."""
    run = trace(scenario)
    never = {HEADER, HEADER_BIN} if scenario.mitigation.never_indexed else set()
    attribution = attribute_connection(replay(run.header_lists, never))
    n = scenario.responses
    warmup = min(n // 4, WARMUP_CAP)
    steady: BlockCost = sum(attribution.per_block[warmup:], BlockCost())
    count, seconds = n - warmup, (n - warmup) / scenario.rate
    uncompressed = _mean(run.report_sizes)
    return CellResult(
        rate=scenario.rate,
        interval=scenario.interval,
        decimals=scenario.precision,
        mitigation=scenario.mitigation.name,
        responses=n,
        warmup=warmup,
        uncompressed=uncompressed,
        entry_size=uncompressed + 32,
        first_send=attribution.orca_first_send,
        **steady.rates(count, seconds),
        reports_per_s=sum(run.attached[warmup:]) / seconds,
        cpu_mae=_mean(run.cpu_error[warmup:]),
        mean_age=_mean(run.age[warmup:]),
        max_age=max((a for a in run.age[warmup:] if a is not None), default=0.0),
        replay_exact=attribution.replay_exact,
    )


def grid(
    rates: Sequence[float],
    intervals: Sequence[float],
    decimals: Sequence[int],
    mitigations: Sequence[Mitigation],
    base: Scenario,
) -> list[Scenario]:
    """Scenarios: every rate x interval x decimals without mitigation, and every rate x mitigation at the
    base scenario's interval and precision (the unmitigated cells are not repeated)."""
    none = MITIGATIONS["none"]
    cells = [
        replace(base, rate=r, interval=i, decimals=d, mitigation=none)
        for i in intervals
        for d in decimals
        for r in rates
    ]
    cells += [replace(base, rate=r, mitigation=m) for m in mitigations if m != none for r in rates]
    return list(dict.fromkeys(cells))


def as_dict(result: CellResult) -> dict[str, object]:
    """JSON-ready form of a result."""
    return asdict(result)
