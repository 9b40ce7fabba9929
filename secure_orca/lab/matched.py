"""In band against out of band at matched freshness (``secure-orca evaluate``, option 4's table).

Both paths get one report every ``period`` seconds (1 s and 0.1 s): in band the replica samples every period and
attaches each new sample once per connection (``--endpoint-load-metrics-attach once-per-sample``), out of band
the stream reports at that period. Per repetition and period, interleaved, the order of the paths alternating:

- bytes on the wire: one loaded replica per period (``STEP`` load on it throughout) serves both. In band,
  ``hpackcost.wire`` sends ``rps`` requests/s on a connection with the opt-in and as many on one without, and the
  figure is the mean header block with the opt-in minus without, times the achieved rate (frames parsed from the
  bytes received; no model, no replay); the responses that carried a report are the reports delivered. Out of
  band, ``oobcost.stream_bytes`` counts the ciphertext and the reports that arrived on a new stream to the same
  replica over as many seconds. Both are kept per run: bytes per second, reports delivered per second and bytes
  per delivered report (what arrived, never a nominal period). The HPACK model
  (``hpackcost.model.simulate``, once per interval, at the same rate and period) is printed beside the in-band
  figure with its error against it.
- staleness: ``staleness.staleness`` (two replicas behind Envoy, a load step on one) with the step started at a
  random time, so that neither h2load's schedule nor the sampler's phase is fixed relative to it; then the
  recovery once the step ends;
- the low-traffic remote locality: the same step on the remote zone's replica behind ``load_aware_locality``
  at REMOTE_LB_RPS load-balanced requests/s (Envoy probes the remote zone with 3% of them), at the shortest
  period, where in band a report comes only with a probe request."""

from __future__ import annotations

import random
import tempfile
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from secure_orca import pki
from secure_orca.credentials import devpki
from secure_orca.hpackcost import wire as hpack_wire
from secure_orca.hpackcost.model import MITIGATIONS, Scenario, simulate
from secure_orca.lab import oobcost
from secure_orca.lab import replicas as launch
from secure_orca.lab.results import MatchedCell, OutOfBand, RemoteCell, Settings, Spread, Staleness
from secure_orca.lab.staleness import (
    REMOTE_LB_RPS,
    STEP_CPU_MS,
    STEP_LABEL,
    STEP_RPS,
    h2load,
    matched_flags,
    staleness,
)
from secure_orca.orca.report import DEFAULT_DECIMALS

PATHS = ("in-band", "out-of-band")
DELAY_SPAN = 1.0  # the step starts uniformly within this many seconds (at least one period) after the weight is read


@dataclass(frozen=True)
class Wire:
    """One path's run on one connection: what arrived, per second and per delivered report."""

    bytes_per_s: float
    delivered_per_s: float  # reports that reached the client per second
    bytes_per_report: float


def in_band_wire(replica: launch.Replica, dev: pki.DevPKI, rps: float, period: float, seconds: float) -> Wire:
    """The bytes the reports add to one load-balancer connection's responses, on the wire, and the responses that
    carried a report (parsed from the bytes received), per second and per delivered report."""
    credentials = hpack_wire.Credentials(dev.cert("ca"), dev.cert("load_reader_client"), dev.key("load_reader_client"))
    config = hpack_wire.MeasureConfig(
        target=hpack_wire.parse_target(replica.url, "/version"),
        credentials=credentials,
        rates=(rps,),
        duration=max(seconds, 5 * period),
        interval=period,
    )
    result = hpack_wire.run_phase(config, rps)
    elapsed = result.responses / result.achieved_rate  # seconds of responses on the opted-in connection
    added = result.ab_marginal * result.responses  # header bytes the reports added over them
    return Wire(added / elapsed, result.reported / elapsed, added / max(result.reported, 1))


def out_of_band_wire(replica: launch.Replica, dev: pki.DevPKI, period: float, reports: int) -> Wire:
    """Ciphertext a StreamCoreMetrics stream at ``period`` brings, TLS records included, over the reports that
    arrived after the first one."""
    counted = oobcost.stream_bytes(replica.host, replica.port, dev, period, reports)
    return Wire(counted["tls_bytes_per_s"], counted["reports_per_s"], counted["tls_bytes_per_report"])


def model_bytes_per_s(rps: float, period: float) -> float:
    """The HPACK model's figure for the same connection: once per interval, the server's default precision."""
    scenario = Scenario(
        rate=rps, interval=period, decimals=DEFAULT_DECIMALS, mitigation=MITIGATIONS["once-per-interval"]
    )
    return simulate(scenario).bytes_per_s


def measure(settings: Settings, log: Callable[[str], None], seed: int = 6315) -> OutOfBand:
    """Every cell over ``settings.matched_repeats`` interleaved repetitions."""
    s = settings
    rng = random.Random(seed)
    periods = s.matched_periods
    wire: dict[tuple[str, float], list[Wire]] = {(p, t): [] for p in PATHS for t in periods}
    stale: dict[tuple[str, float], list[Staleness]] = {(p, t): [] for p in PATHS for t in periods}
    with tempfile.TemporaryDirectory(prefix="secure-orca-matched-") as tmp:
        dev = devpki.generate(Path(tmp) / "pki")
        argvs = [launch.serve_argv(dev, matched_flags(dev, period)) for period in periods]
        with launch.replicas(argvs) as started:
            loaded = dict(zip(periods, started, strict=True))
            step_seconds = s.matched_repeats * len(periods) * (2 * s.matched_seconds + (s.oob_reports + 2) + 30)
            with ExitStack() as loads:  # the step's load on each replica throughout
                for replica in started:
                    loads.enter_context(h2load(f"{replica.url}/work?cpu_ms={STEP_CPU_MS}", STEP_RPS, step_seconds))
                for rep in range(s.matched_repeats):
                    for period in periods:
                        replica = loaded[period]
                        reports = max(s.oob_reports, round(s.matched_seconds / period))  # as long as in band
                        for path in PATHS if rep % 2 == 0 else PATHS[::-1]:
                            if path == "in-band":
                                got = in_band_wire(replica, dev, s.matched_rps, period, s.matched_seconds)
                            else:
                                got = out_of_band_wire(replica, dev, period, reports)
                            wire[path, period].append(got)
                    log(f"matched freshness: bytes, repetition {rep + 1}/{s.matched_repeats}")
        for rep in range(s.matched_repeats):
            for period in periods:
                for path in PATHS if rep % 2 == 0 else PATHS[::-1]:
                    delay = rng.uniform(0, max(DELAY_SPAN, period))
                    run = staleness(dev, path == "out-of-band", s.matched_lb_rps, s.stale_bound, period, delay)
                    stale[path, period].append(run)
            log(f"matched freshness: staleness, repetition {rep + 1}/{s.matched_repeats}")
        remote: dict[str, list[Staleness]] = {p: [] for p in PATHS}
        fastest = min(periods)
        for rep in range(s.matched_repeats):
            for path in PATHS if rep % 2 == 0 else PATHS[::-1]:
                delay = rng.uniform(0, max(DELAY_SPAN, fastest))
                run = staleness(dev, path == "out-of-band", REMOTE_LB_RPS, s.stale_bound, fastest, delay, remote=True)
                remote[path].append(run)
            log(f"remote locality at low traffic: staleness, repetition {rep + 1}/{s.matched_repeats}")
    cells = []
    for period in periods:
        for path in PATHS:
            runs = stale[path, period]
            seconds = [r.seconds for r in runs]
            bytes_runs = [round(w.bytes_per_s, 1) for w in wire[path, period]]
            cells.append(
                MatchedCell(
                    path=path,
                    period=period,
                    bytes_per_s=Spread.of(bytes_runs, 1),
                    staleness=Spread.of(seconds, 2),
                    moved=sum(r.moved for r in runs),
                    runs=len(runs),
                    bytes_runs=bytes_runs,
                    staleness_runs=seconds,
                    model_bytes_per_s=round(model_bytes_per_s(s.matched_rps, period), 1) if path == "in-band" else None,
                    delivered_runs=[round(w.delivered_per_s, 2) for w in wire[path, period]],
                    bytes_per_report_runs=[round(w.bytes_per_report, 1) for w in wire[path, period]],
                    recovery_runs=[r.recovery if r.recovery is not None else s.stale_bound for r in runs],
                    recovered=sum(r.recovered for r in runs),
                )
            )
    remote_cells = [
        RemoteCell(path, min(periods), REMOTE_LB_RPS, Spread.of([r.seconds for r in runs], 2),
                   sum(r.moved for r in runs), len(runs), [r.seconds for r in runs])
        for path, runs in remote.items()
    ]  # fmt: skip
    return OutOfBand(STEP_LABEL, s.stale_bound, s.matched_lb_rps, s.matched_rps, s.matched_repeats, cells,
                     remote_cells)  # fmt: skip
