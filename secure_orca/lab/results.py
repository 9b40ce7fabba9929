"""What ``secure-orca evaluate`` measured, typed (pure). ``to_json`` gives evaluation.json's layout (field names
are its keys, in its order); ``Evaluation.from_json`` reads it back, so a recorded run can be re-rendered and its
recommendation derived again without measuring."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any, Literal

Grants = Literal["nothing needed", "any identity", "load only", "unknown"]
COST_KEYS = ("throughput_ratio", "p99_ratio")  # wall clock: secondary, shown beside the A/A control
OMIT_NONE = {"omit_none": True}  # field metadata: left out of the JSON when None


def to_json(value: Any) -> Any:
    """JSON-ready form of a result (dataclasses as dicts, in field order)."""
    if is_dataclass(value) and not isinstance(value, type):
        out = {}
        for f in fields(value):
            item = getattr(value, f.name)
            if item is None and f.metadata.get("omit_none"):
                continue
            out[f.name] = to_json(item)
        return out
    if isinstance(value, dict):
        return {key: to_json(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [to_json(item) for item in value]
    return value


@dataclass(frozen=True)
class Settings:
    """How long each measurement runs; --quick shortens every phase (CI)."""

    rounds: int
    duration: float
    connections: int
    streams: int
    handshakes: int
    timing_samples: int
    hpack_duration: float
    hpack_rate: float
    instr_requests: int  # instruction counts: the long window (requests) ...
    instr_baseline: int  # ... minus the short one
    instr_repeats: int  # one memory layout each
    instr_connections: int  # new connections in the per-connection window
    oob_reports: int = 0  # out of band: reports read to count bytes on the wire
    oob_long: int = 0  # instructions per streamed report: the long window (reports) ...
    oob_short: int = 0  # ... minus the short one
    stale_bound: float = 0.0  # staleness: seconds waited at most for the weight to move
    matched_repeats: int = 0  # matched freshness: interleaved repetitions per cell
    matched_periods: tuple[float, ...] = ()  # report periods (in band: sampling interval, attached once per sample)
    matched_lb_rps: float = 0.0  # load-balanced requests/s through Envoy (two replicas) in the staleness runs
    matched_rps: float = 0.0  # requests/s on the one load-balancer connection whose bytes are counted
    matched_seconds: float = 0.0  # seconds of in-band traffic per byte count (per period, at least 5 periods)

    @classmethod
    def make(cls, quick: bool) -> Settings:
        if quick:
            # Every cell, as cheaply as it fills (the suite runs this): one period, half a second per h2load
            # round, and 4 s at most for a weight to halve (in band at 0.1 s it halves in about 0.5 s).
            return cls(rounds=2, duration=0.5, connections=4, streams=10, handshakes=40, timing_samples=60,
                       hpack_duration=1.0, hpack_rate=20.0, instr_requests=120, instr_baseline=40,
                       instr_repeats=1, instr_connections=3, oob_reports=4, oob_long=20, oob_short=5,
                       stale_bound=4.0, matched_repeats=2, matched_periods=(0.1,), matched_lb_rps=40.0,
                       matched_rps=20.0, matched_seconds=1.0)  # fmt: skip
        return cls(rounds=10, duration=2.0, connections=8, streams=10, handshakes=200, timing_samples=400,
                   hpack_duration=8.0, hpack_rate=20.0, instr_requests=600, instr_baseline=100,
                   instr_repeats=3, instr_connections=12, oob_reports=6, oob_long=40, oob_short=10,
                   stale_bound=8.0, matched_repeats=10, matched_periods=(1.0, 0.1), matched_lb_rps=40.0,
                   matched_rps=20.0, matched_seconds=5.0)  # fmt: skip


@dataclass(frozen=True)
class Spread:
    """Median and range of a ratio over rounds (or memory layouts)."""

    median: float
    min: float
    max: float

    @classmethod
    def of(cls, values: Sequence[float], digits: int = 3) -> Spread:
        return cls(round(statistics.median(values), digits), round(min(values), digits), round(max(values), digits))

    def __str__(self) -> str:
        return f"{self.median} [{self.min}, {self.max}]"

    def below(self, other: Spread) -> bool:
        """Every value of this range is below every value of ``other``: the ranges separate."""
        return self.max < other.min


def compare(a: Spread, b: Spread) -> Literal["lower", "higher"] | None:
    """``a`` against ``b`` where their ranges separate; None where they overlap (the figures do not resolve)."""
    return "lower" if a.below(b) else "higher" if b.below(a) else None


@dataclass(frozen=True)
class Machine:
    cpus: int
    cpu: str
    python: str


@dataclass(frozen=True)
class Exposure:
    """``secure-orca probe``'s findings for one option and one path (bypass client, or through Envoy)."""

    verdict: str  # leak, no-leak, inconclusive
    control_ok: bool
    vectors: int
    leaks: int
    leaking_vectors: list[str]
    timing_p_value: float | None
    seconds: float
    grants: Grants  # what else the load balancer's credential grants (selfsubjectreviews)
    envoy_weights: list[float] | None = field(default=None, metadata=OMIT_NONE)  # through Envoy only: sampled
    weights_moved: bool | None = field(default=None, metadata=OMIT_NONE)  # through Envoy: a weight left 1 and moved
    timing_detectable_us: float | None = field(default=None, metadata=OMIT_NONE)  # smallest shift the check caught
    timing_controls: dict[str, float] | None = field(default=None, metadata=OMIT_NONE)  # shift (µs) -> p


@dataclass(frozen=True)
class NotMeasured:
    verdict: str  # why


@dataclass(frozen=True)
class RequestCost:
    """Wall clock, feature on ÷ off, interleaved rounds of h2load."""

    throughput_ratio: Spread
    p50_ratio: Spread
    p99_ratio: Spread
    load: str
    rounds: int
    runs: dict[str, list[float]] = field(default_factory=dict)  # per-round ratios, by COST_KEYS

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> RequestCost:
        spreads = {k: Spread(**d[k]) for k in ("throughput_ratio", "p50_ratio", "p99_ratio")}
        return cls(**spreads, load=d["load"], rounds=d["rounds"], runs=d.get("runs", {}))


T_975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086)  # Student's t, two-sided 95%, by degrees of freedom 1..20  # fmt: skip


@dataclass(frozen=True)
class Interval:
    """The A/A control's 95% prediction interval for one more round's ratio, on the log scale (a ratio's bounds
    are then positive, and x2 and x0.5 are equally far from 1): exp(mean ± t·s·√(1 + 1/n)) of the log-ratios over
    its rounds (two feature-off replicas against each other). A ratio inside it is what two identical replicas
    differ by; a median outside it is printed, anything else is not."""

    low: float
    high: float
    rounds: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Interval:
        n = len(values)
        if n < 2 or min(values) <= 0:
            return cls(0.0, float("inf"), n)  # one round (or a ratio that is not one): nothing resolves
        logs = [math.log(v) for v in values]
        mean, sd = statistics.fmean(logs), statistics.stdev(logs)
        t = T_975[min(n - 1, len(T_975)) - 1] if n - 1 <= len(T_975) else 1.96
        half = t * sd * (1 + 1 / n) ** 0.5
        return cls(float(f"{math.exp(mean - half):.3g}"), float(f"{math.exp(mean + half):.3g}"), n)  # never 0

    def holds(self, value: float) -> bool:
        return self.low <= value <= self.high

    def __str__(self) -> str:
        return f"[{self.low}, {self.high}]"


@dataclass(frozen=True)
class Handshake:
    """New connections/s with the front-proxy certificate ÷ without (None: the option presents none)."""

    connections_per_s_ratio: Spread | None
    connections: int | None = field(default=None, metadata=OMIT_NONE)
    note: str | None = field(default=None, metadata=OMIT_NONE)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Handshake:
        ratio = d["connections_per_s_ratio"]
        return cls(Spread(**ratio) if ratio else None, d.get("connections"), d.get("note"))


@dataclass(frozen=True)
class HpackResponse:
    """Bytes the report adds per response on real HTTP/2 connections."""

    rate_per_connection: float
    uncompressed_bytes: float
    first_send_bytes: float
    marginal_bytes_per_response: float
    literals_per_s: float


@dataclass(frozen=True)
class Staleness:
    """Seconds from a load step on one replica until Envoy's weight for it halved (secure_orca/lab/staleness.py)."""

    path: str  # in-band or out-of-band
    lb_rps: float  # load-balanced requests per second through Envoy (both replicas)
    seconds: float  # the bound when the weight did not move
    moved: bool
    weight_before: float
    weight_after: float
    report_period: float | None = field(default=None, metadata=OMIT_NONE)  # seconds between reports, either path
    recovery: float | None = field(default=None, metadata=OMIT_NONE)  # seconds from the step's end to recovery
    recovered: bool = False  # the weight rose back to RECOVERED of its value before the step within the bound


@dataclass(frozen=True)
class MatchedCell:
    """One path at one report period over interleaved repetitions (secure_orca/lab/matched.py): bytes the reports
    add on the wire per second on one load-balancer connection to the loaded replica, and the seconds from a load
    step (at a randomised time) until Envoy's weight for that replica halved."""

    path: str  # in-band or out-of-band
    period: float  # seconds between reports: in band the sampling interval (attached once per sample)
    bytes_per_s: Spread
    staleness: Spread  # a run whose weight never halved counts as the bound
    moved: int  # runs whose weight halved within the bound
    runs: int
    bytes_runs: list[float]
    staleness_runs: list[float]
    model_bytes_per_s: float | None = field(default=None, metadata=OMIT_NONE)  # in band: the HPACK model
    delivered_runs: list[float] = field(default_factory=list)  # reports delivered per second, per run (wire)
    bytes_per_report_runs: list[float] = field(default_factory=list)  # bytes on the wire per delivered report
    recovery_runs: list[float] = field(default_factory=list)  # seconds from the step's end until the weight rose back
    recovered: int = 0  # runs whose weight rose back within the bound

    @property
    def delivered(self) -> Spread | None:
        return Spread.of(self.delivered_runs, 2) if self.delivered_runs else None

    @property
    def bytes_per_report(self) -> Spread | None:
        return Spread.of(self.bytes_per_report_runs, 1) if self.bytes_per_report_runs else None

    @property
    def recovery(self) -> Spread | None:
        return Spread.of(self.recovery_runs, 2) if self.recovery_runs else None

    @property
    def model_error(self) -> float | None:
        """The model's relative error against the median measured on the wire (None: no model for this cell)."""
        if self.model_bytes_per_s is None or not self.bytes_per_s.median:
            return None
        return round(self.model_bytes_per_s / self.bytes_per_s.median - 1, 3)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> MatchedCell:
        return cls(**{**d, "bytes_per_s": Spread(**d["bytes_per_s"]), "staleness": Spread(**d["staleness"])})


@dataclass(frozen=True)
class RemoteCell:
    """One path in the low-traffic remote-locality case (secure_orca/lab/staleness.py, ``remote``): the seconds
    from a load step on the remote zone's replica until Envoy's weight for it halved."""

    path: str
    period: float
    lb_rps: float  # load-balanced requests/s through Envoy, nearly all of them to the local zone
    staleness: Spread
    moved: int
    runs: int
    staleness_runs: list[float]

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> RemoteCell:
        return cls(**{**d, "staleness": Spread(**d["staleness"])})


@dataclass(frozen=True)
class OutOfBand:
    """Option 4 against in band at matched freshness: the same loaded replica, the same report period."""

    step: str  # the load step of the staleness measurement
    bound: float  # seconds a staleness measurement waits at most
    lb_rps: float  # load-balanced requests/s through Envoy during the staleness runs
    rps: float  # requests/s on the load-balancer connection whose bytes are counted
    repeats: int
    cells: list[MatchedCell]
    remote: list[RemoteCell] = field(default_factory=list)  # the low-traffic remote-locality case

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> OutOfBand:
        cells = [MatchedCell.from_json(c) for c in d["cells"]]
        return cls(**{**d, "cells": cells, "remote": [RemoteCell.from_json(c) for c in d.get("remote", [])]})

    def remote_cell(self, path: str) -> RemoteCell | None:
        return next((c for c in self.remote if c.path == path), None)

    def cell(self, path: str, period: float) -> MatchedCell | None:
        return next((c for c in self.cells if c.path == path and c.period == period), None)

    @property
    def periods(self) -> list[float]:
        return sorted({c.period for c in self.cells}, reverse=True)


@dataclass(frozen=True)
class OptionResult:
    """One row of the matrix."""

    title: str
    burden: dict[str, str]
    bypass: Exposure
    through_lb: Exposure | NotMeasured
    request_cost: RequestCost
    hpack_request_first_bytes: float  # the opt-in's first send on a connection (then indexed): once per connection
    hpack_request_bytes: float  # the opt-in per request after the first on that connection
    handshake: Handshake
    hpack_response: HpackResponse | None = field(metadata=OMIT_NONE)  # None: no response carries a report
    out_of_band: OutOfBand | None = field(default=None, metadata=OMIT_NONE)  # option 4 only

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> OptionResult:
        via = d["through_lb"]
        return cls(
            title=d["title"],
            burden=dict(d["burden"]),
            bypass=Exposure(**d["bypass"]),
            through_lb=Exposure(**via) if "leaks" in via else NotMeasured(**via),
            request_cost=RequestCost.from_json(d["request_cost"]),
            hpack_request_first_bytes=d["hpack_request_first_bytes"],
            hpack_request_bytes=d["hpack_request_bytes"],
            handshake=Handshake.from_json(d["handshake"]),
            hpack_response=HpackResponse(**d["hpack_response"]) if "hpack_response" in d else None,
            out_of_band=OutOfBand.from_json(d["out_of_band"]) if "out_of_band" in d else None,
        )


@dataclass(frozen=True)
class InstrOption:
    """Instructions per request, the option's replica ÷ the feature-off one."""

    request_ratio: Spread
    per_request_on: int
    per_request_off: int
    spread: float


@dataclass(frozen=True)
class InstrConnection:
    """Instructions per new TLS connection, with a load-balancer client certificate ÷ without."""

    ratio: Spread
    with_cert: int
    without: int
    spread: float


@dataclass(frozen=True)
class InstrReport:
    """Instructions per streamed out-of-band report: a window of ``long`` reports minus one of ``short``."""

    per_report: Spread
    long: int
    short: int


@dataclass(frozen=True)
class Instructions:
    path: str
    requests: int
    baseline: int
    repeats: int
    options: dict[str, InstrOption]
    connections: dict[str, InstrConnection]  # by the certificate presented: front-proxy, load-reader
    oob_report: InstrReport | None = field(default=None, metadata=OMIT_NONE)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Instructions:
        options = {
            o: InstrOption(**{**v, "request_ratio": Spread(**v["request_ratio"])}) for o, v in d["options"].items()
        }
        connections = {k: InstrConnection(**{**c, "ratio": Spread(**c["ratio"])}) for k, c in d["connections"].items()}
        r = d.get("oob_report")
        report = InstrReport(**{**r, "per_report": Spread(**r["per_report"])}) if r else None
        return cls(d["path"], d["requests"], d["baseline"], d["repeats"], options, connections, report)


@dataclass(frozen=True)
class InstrMissing:
    missing: str  # why instruction counts were not taken


@dataclass(frozen=True)
class Evaluation:
    """The whole run: evaluation.json."""

    settings: Settings
    envoy: bool
    machine: Machine
    options: dict[str, OptionResult]
    control: RequestCost  # the feature-off replica against itself: the wall clock's noise floor
    instructions: Instructions | InstrMissing
    seconds: float
    recommendation: list[str] = field(default_factory=list)
    recommended_option: str | None = None  # the alpha default the rules chose (None: nothing held)
    beta_path: str | None = None  # out of band when the rules keep it as the beta path (None: they do not)
    reasons: list[str] = field(default_factory=list)  # why, without figures: equal across runs that agree
    provenance: dict[str, str] = field(default_factory=dict)  # commit at start and end, command, started (UTC)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Evaluation:
        counted = d["instructions"]
        return cls(
            settings=Settings(**{**d["settings"], "matched_periods": tuple(d["settings"]["matched_periods"])}),
            envoy=d["envoy"],
            machine=Machine(**d["machine"]),
            options={o: OptionResult.from_json(v) for o, v in d["options"].items()},
            control=RequestCost.from_json(d["control"]),
            instructions=InstrMissing(**counted) if "missing" in counted else Instructions.from_json(counted),
            seconds=d["seconds"],
            recommendation=list(d["recommendation"]),
            recommended_option=d.get("recommended_option"),
            beta_path=d.get("beta_path"),
            reasons=list(d.get("reasons", [])),
            provenance=dict(d.get("provenance", {})),
        )
