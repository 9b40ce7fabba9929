"""The side-by-side evaluation of the KEP-6315 options (the main job); `secure-orca evaluate` runs it.

This module runs it: replicas, probes, wall-clock and HPACK measurements. The results are typed in
``lab.results``, counted in instructions by ``lab.instrcost``, rendered by ``lab.markdown``, and the
recommendation is written by ``lab.recommend``."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import hpack
from hpack import NeverIndexedHeaderTuple

from secure_orca import pki
from secure_orca.credentials import devpki
from secure_orca.envoy import bootstrap as envoy
from secure_orca.hpackcost import wire as hpack_wire
from secure_orca.kep_options import Mode, option_named
from secure_orca.lab import instrcount, loadgen, matched
from secure_orca.lab import launcher as lb
from secure_orca.lab import replicas as launch
from secure_orca.lab.instrcost import instruction_cost, off_flags
from secure_orca.lab.markdown import render_markdown
from secure_orca.lab.options import BURDEN, OPTIONS, OUT_OF_BAND, TITLES, auth_mode
from secure_orca.lab.recommend import beta_path, recommend, recommended_option, run_reasons
from secure_orca.lab.results import (
    Evaluation,
    Exposure,
    Grants,
    Handshake,
    HpackResponse,
    InstrMissing,
    Instructions,
    Machine,
    NotMeasured,
    OptionResult,
    RequestCost,
    Settings,
    Spread,
    to_json,
)
from secure_orca.lab.staleness import OOB_PERIOD, weight_control, weights_moved
from secure_orca.orca.headers import OPTIN as OPTIN_HEADER
from secure_orca.orca.optin import header_value
from secure_orca.probe.audit import ProbeConfig, probe
from secure_orca.probe.verdict import ProbeResult

CLIENT_ROLES = {Mode.FRONT_PROXY: "front_proxy_client", Mode.LOAD_READER: "load_reader_client"}  # dev PKI names
THROUGH_LB_AT_ONCE = 3  # Envoy deployments probed side by side (each a replica and an Envoy)


def log(message: str) -> None:
    print(f"[evaluate] {message}", file=sys.stderr, flush=True)


def lb_identity(dev: pki.DevPKI, option: str) -> loadgen.Identity:
    """What the load balancer sends upstream under ``option`` (with both, it presents the certificate)."""
    chosen = option_named(option)
    optin = None if chosen.out_of_band else "TEXT"  # out of band, requests carry no opt-in: reports come on the stream
    if chosen.certificate is not None:
        role = CLIENT_ROLES[chosen.certificate]
        return loadgen.Identity("lb", dev.cert(role), dev.key(role), optin)
    if chosen.secret:
        return loadgen.Identity("lb", optin=header_value(secret=secret_of(dev)))
    return loadgen.Identity("lb", optin=optin)


def secret_of(dev: pki.DevPKI) -> str:
    return dev.secret.read_text().split()[0]


def probe_config(dev: pki.DevPKI, option: str, samples: int, control_url: str | None = None) -> ProbeConfig:
    chosen = option_named(option)
    role = CLIENT_ROLES[chosen.certificate] if chosen.certificate is not None else None
    return ProbeConfig(
        cacert=dev.cert("ca"),
        lb_cert=dev.cert(role) if role else None,
        lb_key=dev.key(role) if role else None,
        lb_load_reader=chosen.modes == (Mode.LOAD_READER,),
        lb_secret=secret_of(dev) if chosen.secret else None,
        client_cert=dev.cert("user"),
        client_key=dev.key("user"),
        client_ca_cert=dev.cert("client_ca"),  # the shared-CA vector: users of --client-ca-file named like the LB
        client_ca_key=dev.key("client_ca"),
        timing_samples=samples if chosen.secret else 0,
        control_url=control_url,
        seed=6315,
        lb_header_only=chosen.header_only,
    )


def summarize_probe(result: ProbeResult, envoy_weights: list[float] | None = None) -> Exposure:
    counts = result.counts()
    leaks = [r.vector.name for r in result.results if r.outcome == "leak"]
    timing = result.timing
    return Exposure(
        verdict=result.verdict,
        control_ok=result.control_ok,
        vectors=len(result.results),
        leaks=counts.get("leak", 0),
        leaking_vectors=leaks[:10],
        timing_p_value=round(timing.test.p_value, 4) if timing else None,
        seconds=round(result.seconds, 1),
        grants=grants(result),
        envoy_weights=envoy_weights,
        timing_detectable_us=timing.detectable_us if timing else None,
        timing_controls={f"{k:g}": round(p, 6) for k, p in timing.controls.items()} if timing else None,
    )


def grants(result: ProbeResult) -> Grants:
    """What else the load balancer's credential grants, read back from selfsubjectreviews: the identity its
    certificate names (the identity control), else, for a secret, whatever the forged identities of the vectors
    without a certificate got (a secret is all such a client holds)."""
    if result.lb_grants_identity is not None:
        return "any identity" if result.lb_grants_identity else "load only"
    if not result.controls:
        return "unknown"
    if any(c.vector.variant == "TEXT" and c.vector.identity == "none" for c in result.controls):
        return "nothing needed"  # the bare opt-in is the whole credential (option 1)
    forged = [r.impersonation for r in result.results if r.impersonation is not None and r.vector.identity == "none"]
    if not forged or "unknown" in forged:
        return "unknown"
    return "any identity" if "leak" in forged else "load only"


def request_cost(
    off: launch.Replica, on: launch.Replica, identity: loadgen.Identity, settings: Settings, workdir: Path
) -> RequestCost:
    """h2load with the load balancer's identity against the feature-off and the feature-on replica, interleaved
    in rounds; ratios on/off per round."""
    load = loadgen.Load(settings.connections, settings.streams, duration=settings.duration, warmup=0.5)
    rps: list[float] = []
    p50: list[float] = []
    p99: list[float] = []
    for index in range(settings.rounds):
        pair = [("off", off), ("on", on)]
        results = {name: loadgen.run_h2load(r.url + "/version", load, identity, workdir)
                   for name, r in (pair if index % 2 == 0 else pair[::-1])}  # fmt: skip
        rps.append(results["on"].rps / results["off"].rps)
        p50.append(results["on"].p50_ms / results["off"].p50_ms)
        p99.append(results["on"].p99_ms / results["off"].p99_ms)
    runs = {"throughput_ratio": [round(r, 4) for r in rps], "p99_ratio": [round(r, 4) for r in p99]}
    return RequestCost(Spread.of(rps), Spread.of(p50), Spread.of(p99), load.label, settings.rounds, runs)


HANDSHAKE_BATCH = 25  # connections opened at once: below hypercorn's listen backlog, so none waits on a SYN retry


def handshake_cost(replica: launch.Replica, dev: pki.DevPKI, settings: Settings, workdir: Path) -> Handshake:
    """New connections/s (one request each) presenting the front-proxy certificate, against none: batches of
    HANDSHAKE_BATCH new connections, alternating, summed per round."""
    load = loadgen.Load(clients=HANDSHAKE_BATCH, streams=1, requests=HANDSHAKE_BATCH)
    with_cert = loadgen.Identity("lb", dev.cert("front_proxy_client"), dev.key("front_proxy_client"), "TEXT")
    without = loadgen.Identity("none", optin="TEXT")
    batches = max(1, settings.handshakes // HANDSHAKE_BATCH)
    ratios = []
    for _ in range(settings.rounds):
        seconds = {"lb": 0.0, "none": 0.0}
        for batch in range(batches):
            for identity in (with_cert, without) if batch % 2 == 0 else (without, with_cert):
                seconds[identity.name] += loadgen.run_h2load(replica.url + "/healthz", load, identity, workdir).elapsed
        ratios.append(seconds["none"] / seconds["lb"])  # connections/s with ÷ without
    return Handshake(Spread.of(ratios), connections=batches * HANDSHAKE_BATCH * 2)


def response_hpack(replica: launch.Replica, dev: pki.DevPKI, settings: Settings) -> HpackResponse:
    """Bytes the report adds per response on real HTTP/2 connections (one rate, secs of traffic)."""
    fp = dev.cert("front_proxy_client"), dev.key("front_proxy_client")
    credentials = hpack_wire.Credentials(dev.cert("ca"), *fp)
    config = hpack_wire.MeasureConfig(
        target=hpack_wire.parse_target(replica.url, "/version"),
        credentials=credentials,
        rates=(settings.hpack_rate,),
        duration=settings.hpack_duration,
    )
    (result,) = hpack_wire.measure(config)
    return HpackResponse(
        rate_per_connection=settings.hpack_rate,
        uncompressed_bytes=round(result.uncompressed, 1),
        first_send_bytes=round(result.first_send or 0.0, 1),
        marginal_bytes_per_response=round(result.marginal, 2),
        literals_per_s=round(result.literals_per_s, 2),
    )


def request_hpack(value: str | None, requests: int = 100) -> tuple[float, float]:
    """HPACK bytes the opt-in header adds to a load balancer's requests on one connection (replayed through the
    hpack encoder h2 uses): once per connection (its first send), and per request after it (the mean over the
    ``requests`` - 1 that follow). A value that holds a secret is sent never-indexed (RFC 7541 §7.1.3, as the
    probe sends it), so it is a literal on every request; the bare opt-in is indexed after its first send."""
    base = [(":method", "GET"), (":scheme", "https"), (":authority", "kube-apiserver:6443"), (":path", "/api/v1/pods"),
            ("user-agent", "kubectl/v1.38.0"), ("accept", "application/json")]  # fmt: skip
    with_encoder, without_encoder = hpack.Encoder(), hpack.Encoder()
    extra = []
    for _ in range(requests):
        plain = len(without_encoder.encode(base))
        headers: list[hpack.HeaderTuple] = [hpack.HeaderTuple(n, v) for n, v in base]
        if value is not None:
            kind = NeverIndexedHeaderTuple if "secret=" in value else hpack.HeaderTuple
            headers.append(kind(OPTIN_HEADER, value))
        extra.append(len(with_encoder.encode(headers)) - plain)
    return float(extra[0]), round(sum(extra[1:]) / (requests - 1), 2)


@contextmanager
def replicas_for(dev: pki.DevPKI) -> Iterator[dict[str, launch.Replica]]:
    """One replica per option and two with the feature off (same trust material everywhere): "off", the baseline
    of every ratio, and "off2", a separate process for the A/A control. Connections are
    not rotated (as in the benchmarks): a load run of about 1000 requests per connection would otherwise cross
    the default --max-requests-per-connection depending on the machine's speed, and h2load counts the streams a
    GOAWAY refuses as failed requests, which ends the run."""
    names = ["off", "off2", *OPTIONS]
    keep = ["--max-requests-per-connection", str(2**31)]
    flags = [off_flags(dev), off_flags(dev), *(lb.replica_flags(dev, auth_mode(o)) for o in OPTIONS)]
    argvs = [launch.serve_argv(dev, [*f, *keep]) for f in flags]
    with launch.replicas(argvs) as started:
        yield dict(zip(names, started, strict=True))


def through_lb(dev: pki.DevPKI, option: str) -> Exposure:
    """Envoy in front of one replica of ``option``: the probe goes through Envoy; its positive control goes to
    the replica directly (Envoy strips the reports it would otherwise see). Option 4's Envoy reads the reports
    out of band (``envoy-config --out-of-band``) and sends no opt-in. Then the positive control of the path:
    Envoy's weight for the replica, read from its admin /clusters while traffic and a load step run (blackout
    1 s, weights updated every 0.1 s), must leave 1 and move."""
    argv = launch.serve_argv(dev, lb.replica_flags(dev, auth_mode(option)))
    oob: dict[str, Any] = {"oob_period": OOB_PERIOD} if option == OUT_OF_BAND else {}
    with lb.deployment(dev, [argv], option=auth_mode(option), timing=envoy.TEST_TIMING, **oob) as deployed:
        replica = deployed.replicas[0]
        result = probe(deployed.envoy.url, probe_config(dev, option, 0, control_url=replica.url))
        weights = weight_control(deployed, replica)
    return replace(summarize_probe(result, envoy_weights=weights), weights_moved=weights_moved(weights))


def evaluate(output: Path, quick: bool, use_envoy: bool, count_instructions: bool = True) -> Evaluation:
    """Measure every option (see cli/evaluate.py), write evaluation.json and evaluation.md to ``output``.
    ``count_instructions=False`` leaves callgrind out (the instruction columns then say why)."""
    settings = Settings.make(quick)
    started, made = time.monotonic(), provenance(time.gmtime())  # the commit that runs, before it can move
    bypass: dict[str, Exposure] = {}
    via: dict[str, Exposure | NotMeasured] = {}
    costs: dict[str, RequestCost] = {}
    request_bytes: dict[str, tuple[float, float]] = {}
    instructions: Instructions | InstrMissing
    with ExitStack() as stack:
        root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="secure-orca-eval-")))
        dev = devpki.generate(root / "pki")
        log(f"development PKI in {root} (removed at the end); starting {len(OPTIONS) + 2} replicas (2 feature off)")
        reps = stack.enter_context(replicas_for(dev))
        if use_envoy:  # verdicts, not timings: the deployments run side by side, before anything is timed
            log(f"probing through Envoy: {len(OPTIONS)} deployments, {THROUGH_LB_AT_ONCE} at a time")
            with ThreadPoolExecutor(THROUGH_LB_AT_ONCE, thread_name_prefix="through-lb") as pool:
                via.update(zip(OPTIONS, pool.map(lambda option: through_lb(dev, option), OPTIONS), strict=True))
        else:
            via.update((o, NotMeasured("not measured: envoy not installed (pip install 'secure-orca[envoy]')"))
                       for o in OPTIONS)  # fmt: skip
        for option in OPTIONS:
            log(f"{TITLES[option]}: probing as a client that bypasses the load balancer")
            config = probe_config(dev, option, settings.timing_samples)
            bypass[option] = summarize_probe(probe(reps[option].url, config))
            log(f"{TITLES[option]}: request cost against the feature-off replica ({settings.rounds} rounds)")
            costs[option] = request_cost(reps["off"], reps[option], lb_identity(dev, option), settings, root)
            request_bytes[option] = request_hpack(lb_identity(dev, option).optin)
        log(f"A/A control: two feature-off replicas against each other ({settings.rounds} rounds)")
        none = loadgen.Identity("lb", dev.cert("front_proxy_client"), dev.key("front_proxy_client"), "TEXT")
        control = request_cost(reps["off"], reps["off2"], none, settings, root)
        log("TLS handshake cost of the front-proxy certificate")
        handshake = handshake_cost(reps["front-proxy"], dev, replace(settings, rounds=min(settings.rounds, 3)), root)
        log("HPACK bytes of the report on real connections")
        response = response_hpack(reps["front-proxy"], dev, settings)
        out_of_band = None
        if use_envoy:
            log(f"{TITLES[OUT_OF_BAND]} against in band at matched freshness ({settings.matched_repeats} repetitions)")
            out_of_band = matched.measure(settings, log)
        missing = instrcount.valgrind_available() if count_instructions else "--no-instructions was given"
        if missing is None:
            log(f"instruction counts under callgrind ({settings.instr_repeats} layouts, /healthz)")
            identities = {o: lb_identity(dev, o) for o in OPTIONS}
            instructions = instruction_cost(dev, identities, settings, root)
        else:
            log(f"instruction counts skipped: {missing}")
            instructions = InstrMissing(missing)
    no_handshake = Handshake(None, note="no client certificate")
    options = {
        o: OptionResult(
            title=TITLES[o],
            burden=BURDEN[o],
            bypass=bypass[o],
            through_lb=via[o],
            request_cost=costs[o],
            hpack_request_first_bytes=request_bytes[o][0],
            hpack_request_bytes=request_bytes[o][1],
            handshake=handshake if option_named(o).certificate == Mode.FRONT_PROXY else no_handshake,
            hpack_response=None if o == OUT_OF_BAND else response,
            out_of_band=out_of_band if o == OUT_OF_BAND else None,
        )
        for o in OPTIONS
    }
    made["commit_end"] = commit()  # the commit after the run: equal to the one at start, or the run moved
    results = Evaluation(settings, use_envoy, machine(), options, control, instructions,
                         seconds=round(time.monotonic() - started, 1), provenance=made)  # fmt: skip
    results = replace(results, recommendation=recommend(results), recommended_option=recommended_option(results),
                      beta_path=beta_path(results), reasons=run_reasons(results))  # fmt: skip
    write(results, output)
    return results


def write(results: Evaluation, output: Path) -> None:
    """evaluation.json and evaluation.md in ``output``."""
    output.mkdir(parents=True, exist_ok=True)
    (output / "evaluation.json").write_text(json.dumps(to_json(results), indent=2) + "\n")
    (output / "evaluation.md").write_text(render_markdown(results))


def git(*args: str) -> str:
    """``git`` in this checkout ("" when it fails or there is none)."""
    here = Path(__file__).resolve().parents[2]
    try:
        done = subprocess.run(["git", "-C", str(here), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def commit() -> str:
    """The commit checked out, with ``+dirty`` when the work tree differs from it."""
    head = git("rev-parse", "HEAD") or "unknown (not a git checkout)"
    return head + "+dirty" if git("status", "--porcelain", "--untracked-files=no") else head


def provenance(at: time.struct_time) -> dict[str, str]:
    """The commit measured at start (``evaluate`` adds the one at the end), the command and when it began."""
    command = " ".join(["secure-orca", *sys.argv[1:]]) if sys.argv else "secure-orca evaluate"
    return {"commit": commit(), "command": command, "started": time.strftime("%Y-%m-%d %H:%M UTC", at)}


def lab_changed_since(measured: str) -> list[str]:
    """Files under secure_orca/lab/ that changed between the commit ``measured`` and HEAD (a document made at
    ``measured`` no longer describes the code that would make it). Raises LookupError when git does not know it."""
    base = measured.removesuffix("+dirty")
    if not git("rev-parse", "--verify", "--quiet", f"{base}^{{commit}}"):
        raise LookupError(f"commit {measured} is not in this checkout (fetch the full history)")
    changed = git("diff", "--name-only", base, "HEAD", "--", "secure_orca/lab")
    return changed.splitlines() if changed else []


def clean_run(made: dict[str, str]) -> str | None:
    """Why a run cannot be published (None: it started and ended at the same clean commit)."""
    start, end = made.get("commit", ""), made.get("commit_end", "")
    if "+dirty" in start or "+dirty" in end or start.startswith("unknown"):
        return f"the work tree was not a clean commit (start {start}, end {end})"
    if start != end:
        return f"the commit moved during the run ({start} at start, {end} at the end)"
    return None


def machine() -> Machine:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor())  # fmt: skip
    return Machine(cpus=len(os.sched_getaffinity(0)), cpu=model, python=platform.python_version())
