"""In band against out of band at matched freshness (``secure-orca evaluate``, option 4's table).

Both paths get one report every ``period`` seconds (1 s and 0.1 s): in band the replica samples every period and
attaches each new sample once per connection (``--endpoint-load-metrics-attach once-per-sample``), out of band
the stream reports at that period. Per repetition and period, interleaved, the order of the paths alternating:

- bytes on the wire: one loaded replica per period (``STEP`` load on it throughout) serves both. In band,
  ``hpackcost.wire`` sends ``rps`` requests/s on a connection with the opt-in and as many on one without, and the
  figure is the mean header block with the opt-in minus without, times the achieved rate (frames parsed from the
  bytes received; no model, no replay). Out of band, ``oobcost.stream_bytes`` counts the ciphertext read per
  report on a new stream to the same replica, divided by the period. The HPACK model
  (``hpackcost.model.simulate``, once per interval, at the same rate and period) is printed beside the in-band
  figure with its error against it.
- staleness: ``staleness.staleness`` (two replicas behind Envoy, a load step on one) with the step started at a
  random time, so that neither h2load's schedule nor the sampler's phase is fixed relative to it."""

from __future__ import annotations

import random
import tempfile
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

from secure_orca import pki
from secure_orca.credentials import devpki
from secure_orca.hpackcost import wire as hpack_wire
from secure_orca.hpackcost.model import MITIGATIONS, Scenario, simulate
from secure_orca.lab import oobcost
from secure_orca.lab import replicas as launch
from secure_orca.lab.results import MatchedCell, OutOfBand, Settings, Spread, Staleness
from secure_orca.lab.staleness import STEP_CPU_MS, STEP_LABEL, STEP_RPS, h2load, matched_flags, staleness
from secure_orca.orca.report import DEFAULT_DECIMALS

PATHS = ("in-band", "out-of-band")
DELAY_SPAN = 1.0  # the step starts uniformly within this many seconds (at least one period) after the weight is read


def in_band_bytes_per_s(replica: launch.Replica, dev: pki.DevPKI, rps: float, period: float, seconds: float) -> float:
    """Bytes per second the reports add to one load-balancer connection's responses, on the wire."""
    credentials = hpack_wire.Credentials(dev.cert("ca"), dev.cert("load_reader_client"), dev.key("load_reader_client"))
    config = hpack_wire.MeasureConfig(
        target=hpack_wire.parse_target(replica.url, "/version"),
        credentials=credentials,
        rates=(rps,),
        duration=max(seconds, 5 * period),
        interval=period,
    )
    result = hpack_wire.run_phase(config, rps)
    return result.ab_marginal * result.achieved_rate


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
    wire: dict[tuple[str, float], list[float]] = {(p, t): [] for p in PATHS for t in periods}
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
                        for path in PATHS if rep % 2 == 0 else PATHS[::-1]:
                            if path == "in-band":
                                value = in_band_bytes_per_s(replica, dev, s.matched_rps, period, s.matched_seconds)
                            else:
                                counted = oobcost.stream_bytes(replica.host, replica.port, dev, period, s.oob_reports)
                                value = counted["tls_bytes_per_report"] / period
                            wire[path, period].append(round(value, 1))
                    log(f"matched freshness: bytes, repetition {rep + 1}/{s.matched_repeats}")
        for rep in range(s.matched_repeats):
            for period in periods:
                for path in PATHS if rep % 2 == 0 else PATHS[::-1]:
                    delay = rng.uniform(0, max(DELAY_SPAN, period))
                    run = staleness(dev, path == "out-of-band", s.matched_lb_rps, s.stale_bound, period, delay)
                    stale[path, period].append(run)
            log(f"matched freshness: staleness, repetition {rep + 1}/{s.matched_repeats}")
    cells = []
    for period in periods:
        for path in PATHS:
            runs = stale[path, period]
            seconds = [r.seconds for r in runs]
            cells.append(
                MatchedCell(
                    path=path,
                    period=period,
                    bytes_per_s=Spread.of(wire[path, period], 1),
                    staleness=Spread.of(seconds, 2),
                    moved=sum(r.moved for r in runs),
                    runs=len(runs),
                    bytes_runs=wire[path, period],
                    staleness_runs=seconds,
                    model_bytes_per_s=round(model_bytes_per_s(s.matched_rps, period), 1) if path == "in-band" else None,
                )
            )
    return OutOfBand(STEP_LABEL, s.stale_bound, s.matched_lb_rps, s.matched_rps, s.matched_repeats, cells)
