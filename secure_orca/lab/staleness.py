"""Staleness, measured live with Envoy: how long a load step on one replica takes to move Envoy's weight for it.

Two replicas (load-reader mode) behind Envoy 1.40 with CSWRR, load-balanced traffic at a fixed rate through Envoy,
then a step: direct CPU load on one replica (``/work``, a few heavy requests per second, so the step raises the
replica's utilization far more than its request rate). Envoy's weight for that replica is read from the admin
``/clusters`` every POLL seconds; the staleness is the time from the step's start until the weight is at most half
its value before the step, bounded. In band the replica's reports reach Envoy only on responses to the requests it
routes there (the request rate sets the pace); out of band one StreamCoreMetrics stream per replica brings a
report every period whatever the rate. When the weight halved, the step ends and the recovery is the time until
the weight is back at RECOVERED of its value before the step (bounded alike). Everything else is the same:
replicas, Envoy timing, traffic, step.

What /clusters shows (envoy 1.40, measured here): a host without a valid weight (in blackout, expired, or whose
last report CSWRR refused, e.g. an idle replica's ``rps_fractional`` 0 out of band) gets the median of the valid
weights, and 1 when no host has one. So a weight of 1 is no weight and never counts as moved."""

from __future__ import annotations

import statistics
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

from secure_orca import pki
from secure_orca.envoy import bootstrap as envoy
from secure_orca.lab import launcher as lb
from secure_orca.lab import replicas as launch
from secure_orca.lab.h2load import argv as h2load_argv
from secure_orca.lab.results import Staleness

POLL = 0.05  # seconds between reads of Envoy's weights
WARMUP = 4.0  # seconds of traffic before the step: the blackout period (1 s here) passes, weights settle
BEFORE = 1.0  # seconds over which the weight before the step is read (median)
STEP_CPU_MS, STEP_RPS = 100, 6  # the step: about 0.6 of a core on the loaded replica, 6 requests/s
LB_CPU_MS = 3  # each load-balanced request
OOB_PERIOD = 1.0  # the stream's period: the server's default floor and Envoy's default weight update period
RECOVERED = 0.75  # after the step ends, the weight has recovered at this fraction of its value before the step
NO_WEIGHT = 1.0  # what /clusters shows when CSWRR holds no valid weight for any host (none is ever below it)
STEP_LABEL = f"/work?cpu_ms={STEP_CPU_MS} at {STEP_RPS} rps on one of two replicas"


@contextmanager
def h2load(url: str, rps: float, seconds: float, clients: int = 1) -> Iterator[None]:
    """h2load in the background: ``rps`` requests/s in total for ``seconds``, stopped on exit."""
    argv = h2load_argv(url, clients=clients, rps=rps / clients, seconds=max(1, round(seconds)))
    process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def matched_flags(dev: pki.DevPKI, period: float) -> list[str]:
    """A load-reader replica whose reports come every ``period`` seconds on either path: sampled every period,
    attached in band once per sample to each connection, streamed out of band at that period."""
    ms = f"{round(period * 1000)}ms"
    return lb.replica_flags(dev, "load-reader", "--endpoint-load-metrics-interval", ms,
                            "--endpoint-load-metrics-attach", "once-per-sample",
                            "--endpoint-load-metrics-oob-min-interval", ms)  # fmt: skip


REMOTE_LB_RPS = 4.0  # the remote-locality case: low load-balanced traffic, nearly all of it to the local zone
REMOTE_OWN_RPS = 10.0  # requests/s the remote replica serves its own zone's clients directly (not through Envoy)
CASES = ("step", "remote")  # a load step on one of two replicas; the same step on a remote zone's replica


def staleness(
    dev: pki.DevPKI,
    out_of_band: bool,
    lb_rps: float,
    bound: float,
    period: float = OOB_PERIOD,
    delay: float = 0.0,
    remote: bool = False,
) -> Staleness:
    """One measurement: the seconds until the loaded replica's weight halves (``bound`` if it never did). Both
    paths get a report every ``period`` (``matched_flags``); the step starts ``delay`` seconds after the weight
    before it was read (randomise it: a fixed start would sit at a fixed phase of h2load's schedule and of the
    sampler). ``remote``: the replicas are in two zones behind ``load_aware_locality`` (Envoy in the first), the
    step is on the remote one, which serves REMOTE_OWN_RPS of its own zone's clients directly; Envoy routes
    nearly everything locally and probes the remote zone with remote_probe_fraction of its traffic (3%)."""
    argvs = [launch.serve_argv(dev, matched_flags(dev, period)) for _ in range(2)]
    settings: dict[str, Any] = {"option": "load-reader", "timing": envoy.TEST_TIMING}
    if out_of_band:
        settings["oob_period"] = period
    if remote:
        settings["zones"] = ("local", "remote")
    clients = 1 if lb_rps < 4 else 2
    seconds = WARMUP + BEFORE + delay + 2 * bound + 2
    with lb.deployment(dev, argvs, **settings) as deployed, ExitStack() as own:
        hot = deployed.replicas[1 if remote else 0]
        if remote:
            own.enter_context(h2load(f"{hot.url}/work?cpu_ms={LB_CPU_MS}", REMOTE_OWN_RPS, seconds))
        traffic = f"{deployed.envoy.url}/work?cpu_ms={LB_CPU_MS}"
        with h2load(traffic, lb_rps, seconds, clients):  # step, then recovery
            time.sleep(WARMUP)
            seen = []
            end = time.monotonic() + BEFORE
            while time.monotonic() < end:
                seen.append(deployed.envoy.host(hot.port).weight)
                time.sleep(POLL)
            valid = [w for w in seen if w > NO_WEIGHT]
            before = statistics.median(valid) if valid else 0.0  # 0: no weight to move, never moved
            time.sleep(delay)
            with h2load(f"{hot.url}/work?cpu_ms={STEP_CPU_MS}", STEP_RPS, bound + 1):
                started = time.monotonic()
                moved, weight = False, before
                while (elapsed := time.monotonic() - started) < bound:
                    weight = deployed.envoy.host(hot.port).weight
                    if NO_WEIGHT < weight <= before / 2:
                        moved = True
                        break
                    time.sleep(POLL)
            recovered, recovery = False, bound  # the step ended: how long until the weight rises back
            if moved:
                ended = time.monotonic()
                while (recovery := time.monotonic() - ended) < bound:
                    if deployed.envoy.host(hot.port).weight >= before * RECOVERED:
                        recovered = True
                        break
                    time.sleep(POLL)
    return Staleness(
        path="out-of-band" if out_of_band else "in-band",
        lb_rps=lb_rps,
        report_period=period,
        seconds=round(elapsed if moved else bound, 2),
        moved=moved,
        weight_before=round(before, 1),
        weight_after=round(weight, 1),
        recovery=round(recovery if recovered else bound, 2),
        recovered=recovered,
    )


CONTROL_RPS = 20.0  # the positive control's load-balanced requests/s through Envoy


def weight_control(deployed: lb.Deployment, replica: launch.Replica, seconds: float = 2.0) -> list[float]:
    """A positive control of the reports reaching Envoy: traffic through it past the blackout period, then the
    step on ``replica``; Envoy's weight for it every POLL seconds (needs ``envoy.TEST_TIMING``: the production
    blackout is 10 s). A weight that leaves NO_WEIGHT and moves came from reports."""
    samples = []
    with h2load(f"{deployed.envoy.url}/work?cpu_ms={LB_CPU_MS}", CONTROL_RPS, WARMUP + 2 * seconds + 2):
        time.sleep(WARMUP / 2)
        with ExitStack() as step:
            end, stepped = time.monotonic() + 2 * seconds, False
            while (now := time.monotonic()) < end:
                if now > end - seconds and not stepped:  # the second half under the step
                    step.enter_context(h2load(f"{replica.url}/work?cpu_ms={STEP_CPU_MS}", STEP_RPS, seconds + 1))
                    stepped = True
                samples.append(round(deployed.envoy.host(replica.port).weight, 1))
                time.sleep(POLL * 2)
    return samples


def weights_moved(samples: list[float]) -> bool:
    """The positive control held: a weight other than NO_WEIGHT, and more than one value."""
    return any(w != NO_WEIGHT for w in samples) and len(set(samples)) > 1
