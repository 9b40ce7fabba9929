"""What ``secure-orca evaluate`` measured, typed (pure). ``to_json`` gives evaluation.json's layout (field names
are its keys, in its order); ``Evaluation.from_json`` reads it back, so a recorded run can be re-rendered and its
recommendation derived again without measuring."""

from __future__ import annotations

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
    stale_rates: tuple[float, ...] = ()  # staleness: load-balanced requests/s through Envoy
    stale_bound: float = 0.0  # staleness: seconds waited at most for the weight to move

    @classmethod
    def make(cls, quick: bool) -> Settings:
        if quick:
            return cls(rounds=1, duration=1.0, connections=4, streams=10, handshakes=40, timing_samples=60,
                       hpack_duration=2.0, hpack_rate=20.0, instr_requests=120, instr_baseline=40,
                       instr_repeats=1, instr_connections=3, oob_reports=10, oob_long=20, oob_short=5,
                       stale_rates=(2.0,), stale_bound=8.0)  # fmt: skip
        return cls(rounds=3, duration=4.0, connections=8, streams=10, handshakes=200, timing_samples=400,
                   hpack_duration=8.0, hpack_rate=20.0, instr_requests=600, instr_baseline=100,
                   instr_repeats=3, instr_connections=12, oob_reports=50, oob_long=40, oob_short=10,
                   stale_rates=(2.0, 20.0), stale_bound=15.0)  # fmt: skip


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
    envoy_weights: list[float] | None = field(default=None, metadata=OMIT_NONE)  # through Envoy only


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

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> RequestCost:
        spreads = {k: Spread(**d[k]) for k in ("throughput_ratio", "p50_ratio", "p99_ratio")}
        return cls(**spreads, load=d["load"], rounds=d["rounds"])


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
    report_period: float | None = field(default=None, metadata=OMIT_NONE)  # out of band: the stream's period


@dataclass(frozen=True)
class WireRate:
    """Bytes per second on one load-balancer connection at one request rate: the in-band report's HPACK bytes
    (modelled) against the stream's (measured per report, divided by the period)."""

    rps: float
    in_band_bytes_per_s: float
    out_of_band_bytes_per_s: float


@dataclass(frozen=True)
class OutOfBand:
    """Option 4's own figures: the stream on the wire, and staleness in band against out of band."""

    period: float  # the stream's report period (Envoy's oob_reporting_period)
    tls_bytes_per_report: float  # ciphertext read per report, TLS records included
    grpc_bytes_per_report: float
    wire: list[WireRate]
    step: str  # the load step of the staleness measurement
    bound: float  # seconds a staleness measurement waits at most
    staleness: list[Staleness]

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> OutOfBand:
        wire = [WireRate(**w) for w in d["wire"]]
        return cls(**{**d, "wire": wire, "staleness": [Staleness(**s) for s in d["staleness"]]})


@dataclass(frozen=True)
class OptionResult:
    """One row of the matrix."""

    title: str
    burden: dict[str, str]
    bypass: Exposure
    through_lb: Exposure | NotMeasured
    request_cost: RequestCost
    hpack_request_bytes: float
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
    """Instructions per new TLS connection, with the front-proxy certificate ÷ without."""

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
    connection: InstrConnection
    oob_report: InstrReport | None = field(default=None, metadata=OMIT_NONE)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Instructions:
        options = {
            o: InstrOption(**{**v, "request_ratio": Spread(**v["request_ratio"])}) for o, v in d["options"].items()
        }
        c = d["connection"]
        connection = InstrConnection(**{**c, "ratio": Spread(**c["ratio"])})
        r = d.get("oob_report")
        report = InstrReport(**{**r, "per_report": Spread(**r["per_report"])}) if r else None
        return cls(d["path"], d["requests"], d["baseline"], d["repeats"], options, connection, report)


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

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Evaluation:
        counted = d["instructions"]
        return cls(
            settings=Settings(**{**d["settings"], "stale_rates": tuple(d["settings"].get("stale_rates", ()))}),
            envoy=d["envoy"],
            machine=Machine(**d["machine"]),
            options={o: OptionResult.from_json(v) for o, v in d["options"].items()},
            control=RequestCost.from_json(d["control"]),
            instructions=InstrMissing(**counted) if "missing" in counted else Instructions.from_json(counted),
            seconds=d["seconds"],
            recommendation=list(d["recommendation"]),
        )
