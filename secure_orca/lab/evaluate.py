"""The side-by-side evaluation of the KEP-6315 options (the main job); `secure-orca evaluate` runs it."""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hpack

from secure_orca import pki
from secure_orca.envoy import launcher as lb
from secure_orca.hpackcost import wire as hpack_wire
from secure_orca.lab import instrcount, loadgen
from secure_orca.lab import replicas as launch
from secure_orca.lab.recommend import Figures, Grants, derive
from secure_orca.orca.headers import OPTIN as OPTIN_HEADER
from secure_orca.orca.optin import header_value
from secure_orca.probe.audit import ProbeConfig, ProbeResult, probe

OPTIONS = ("header-only", "front-proxy", "load-reader", "shared-secret", "front-proxy,shared-secret")
TITLES = {
    "header-only": "1. header only",
    "front-proxy": "2. front-proxy client certificate",
    "load-reader": "2b. load-reader client certificate",
    "shared-secret": "3. shared secret",
    "front-proxy,shared-secret": "2 or 3 (either grants)",
}
BURDEN = {
    "header-only": {
        "server": "feature gate + --enable-endpoint-load-metrics",
        "load balancer": "set the opt-in header; strip ORCA headers",
        "rotate": "nothing",
        "if misconfigured": "any client that reaches a replica directly reads its load",
    },
    "front-proxy": {
        "server": "--requestheader-client-ca-file, --requestheader-allowed-names (kube-apiserver already has both)",
        "load balancer": "present the front-proxy client certificate upstream; set the opt-in; strip ORCA headers",
        "rotate": "front-proxy certificate (kubeadm: yearly) and CA, with overlap; reloaded live",
        "if misconfigured": "no reports (refusal counted by reason); never a leak",
    },
    "load-reader": {
        "server": "--endpoint-load-metrics-client-ca-file, --endpoint-load-metrics-allowed-names (a CA and a "
        "certificate kube-apiserver does not have today)",
        "load balancer": "present the load-reader certificate upstream; set the opt-in; strip ORCA and identity "
        "headers; pass tokens on (it asserts no identity, so it fronts token users only)",
        "rotate": "load-reader certificate and CA, with overlap; reloaded live",
        "if misconfigured": "no reports (refusal counted by reason); never a leak, never an identity",
    },
    "shared-secret": {
        "server": "--endpoint-load-metrics-secret-file (0600)",
        "load balancer": "put the secret in the opt-in header (SDS file); strip ORCA headers",
        "rotate": "the secret on both sides: add new, switch LB, remove old; reloaded live",
        "if misconfigured": "no reports; a leaked secret grants reports to anyone until rotated",
    },
    "front-proxy,shared-secret": {
        "server": "both of the above",
        "load balancer": "either credential",
        "rotate": "whichever is in use (both while migrating)",
        "if misconfigured": "as the weaker of the two: a leaked secret grants",
    },
}


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

    @classmethod
    def make(cls, quick: bool) -> Settings:
        if quick:
            return cls(rounds=1, duration=1.0, connections=4, streams=10, handshakes=40, timing_samples=60,
                       hpack_duration=2.0, hpack_rate=20.0, instr_requests=120, instr_baseline=40,
                       instr_repeats=1, instr_connections=3)  # fmt: skip
        return cls(rounds=3, duration=4.0, connections=8, streams=10, handshakes=200, timing_samples=400,
                   hpack_duration=8.0, hpack_rate=20.0, instr_requests=600, instr_baseline=100,
                   instr_repeats=3, instr_connections=12)  # fmt: skip


def log(message: str) -> None:
    print(f"[evaluate] {message}", file=sys.stderr, flush=True)


def lb_identity(dev: pki.DevPKI, option: str) -> loadgen.Identity:
    """What the load balancer sends upstream under ``option`` (with both, it presents the certificate)."""
    if "front-proxy" in option:
        return loadgen.Identity("lb", dev.cert("front_proxy_client"), dev.key("front_proxy_client"), "TEXT")
    if option == "load-reader":
        return loadgen.Identity("lb", dev.cert("load_reader_client"), dev.key("load_reader_client"), "TEXT")
    if option == "shared-secret":
        return loadgen.Identity("lb", optin=header_value(secret=secret_of(dev)))
    return loadgen.Identity("lb", optin="TEXT")


def secret_of(dev: pki.DevPKI) -> str:
    return dev.secret.read_text().split()[0]


def probe_config(dev: pki.DevPKI, option: str, samples: int, control_url: str | None = None) -> ProbeConfig:
    role = None
    if "front-proxy" in option:
        role = "front_proxy_client"
    elif option == "load-reader":
        role = "load_reader_client"
    return ProbeConfig(
        cacert=dev.cert("ca"),
        lb_cert=dev.cert(role) if role else None,
        lb_key=dev.key(role) if role else None,
        lb_load_reader=option == "load-reader",
        lb_secret=secret_of(dev) if "shared-secret" in option else None,
        client_cert=dev.cert("user"),
        client_key=dev.key("user"),
        timing_samples=samples if "shared-secret" in option else 0,
        control_url=control_url,
        seed=6315,
        lb_header_only=option == "header-only",
    )


def summarize_probe(result: ProbeResult) -> dict[str, Any]:
    counts = result.counts()
    leaks = [r.vector.name for r in result.results if r.outcome == "leak"]
    timing = result.timing
    return {
        "verdict": result.verdict,
        "control_ok": result.control_ok,
        "vectors": len(result.results),
        "leaks": counts.get("leak", 0),
        "leaking_vectors": leaks[:10],
        "timing_p_value": round(timing.test.p_value, 4) if timing else None,
        "seconds": round(result.seconds, 1),
        "grants": grants(result),
    }


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


def ratio_spread(values: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3), "max": round(max(values), 3)}


def request_cost(
    off: launch.Replica, on: launch.Replica, identity: loadgen.Identity, settings: Settings, workdir: Path
) -> dict[str, Any]:
    """h2load with the load balancer's identity against the feature-off and the feature-on replica, interleaved
    in rounds; ratios on/off per round."""
    load = loadgen.Load(settings.connections, settings.streams, duration=settings.duration, warmup=0.5)
    rps, p50, p99 = [], [], []
    for index in range(settings.rounds):
        pair = [("off", off), ("on", on)]
        results = {name: loadgen.run_h2load(r.url + "/version", load, identity, workdir)
                   for name, r in (pair if index % 2 == 0 else pair[::-1])}  # fmt: skip
        rps.append(results["on"].rps / results["off"].rps)
        p50.append(results["on"].p50_ms / results["off"].p50_ms)
        p99.append(results["on"].p99_ms / results["off"].p99_ms)
    return {"throughput_ratio": ratio_spread(rps), "p50_ratio": ratio_spread(p50), "p99_ratio": ratio_spread(p99),
            "load": load.label, "rounds": settings.rounds}  # fmt: skip


HANDSHAKE_BATCH = 25  # connections opened at once: below hypercorn's listen backlog, so none waits on a SYN retry


def handshake_cost(replica: launch.Replica, dev: pki.DevPKI, settings: Settings, workdir: Path) -> dict[str, Any]:
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
    return {"connections_per_s_ratio": ratio_spread(ratios), "connections": batches * HANDSHAKE_BATCH * 2}


def response_hpack(replica: launch.Replica, dev: pki.DevPKI, settings: Settings) -> dict[str, Any]:
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
    return {
        "rate_per_connection": settings.hpack_rate,
        "uncompressed_bytes": round(result.uncompressed, 1),
        "first_send_bytes": round(result.first_send or 0.0, 1),
        "marginal_bytes_per_response": round(result.marginal, 2),
        "literals_per_s": round(result.literals_per_s, 2),
    }


def request_hpack(value: str | None, requests: int = 100) -> float:
    """Mean HPACK bytes the opt-in header adds to a load balancer's requests on one connection (replayed
    through the hpack encoder h2 uses: the value is indexed after its first send)."""
    base = [(":method", "GET"), (":scheme", "https"), (":authority", "kube-apiserver:6443"), (":path", "/api/v1/pods"),
            ("user-agent", "kubectl/v1.38.0"), ("accept", "application/json")]  # fmt: skip
    with_encoder, without_encoder = hpack.Encoder(), hpack.Encoder()
    extra = 0
    for _ in range(requests):
        plain = len(without_encoder.encode(base))
        headers = [*base, (OPTIN_HEADER, value)] if value is not None else base
        extra += len(with_encoder.encode(headers)) - plain
    return round(extra / requests, 2)


INSTR_PATH = "/healthz"  # the cheapest route: the feature's share of a request is largest there


def off_flags(dev: pki.DevPKI) -> list[str]:
    """The baseline replica: the same trust material as every option, the feature not enabled."""
    every = "front-proxy,shared-secret,load-reader"  # every credential completes its handshake here too
    return [f for f in lb.replica_flags(dev, every) if f != "--enable-endpoint-load-metrics"]


def instruction_cost(dev: pki.DevPKI, settings: Settings, workdir: Path) -> dict[str, Any]:
    """Instructions per request (callgrind, secure_orca.lab.instrcount) of each option's replica against the
    feature-off one, with the load balancer's identity, and per new TLS connection with the front-proxy
    certificate against none. Deterministic: repeats differ only by memory layout."""
    s = settings
    identities = {o: lb_identity(dev, o) for o in OPTIONS}
    no_cert = loadgen.Identity("lb", optin="TEXT")
    totals: dict[str, int] = {}
    for repeat in range(s.instr_repeats):
        for name, flags in [("off", off_flags(dev)), *((o, lb.replica_flags(dev, o)) for o in OPTIONS)]:
            clients = identities if name == "off" else {name: identities[name]}
            args = instrcount.serve_args(launch.serve_argv(dev, flags))
            server_key = "off" if name == "off" else str(OPTIONS.index(name))  # labels: no commas of option names
            prefix = workdir / f"instr-{server_key}"
            with instrcount.counted_server(args, prefix, layout=repeat) as server:
                for client in clients.values():  # warm-up (and the chain's one verification), not counted
                    instrcount.requests(server, client, s.instr_baseline, INSTR_PATH, workdir)
                server.control("--instr=on")
                for option, client in clients.items():
                    for count in (s.instr_baseline, s.instr_requests):
                        with server.window(f"{server_key}/{OPTIONS.index(option)},{count},{repeat}"):
                            instrcount.requests(server, client, count, INSTR_PATH, workdir)
                if name == "front-proxy":
                    for label, client in (("cert", identities[name]), ("none", no_cert)):
                        with server.window(f"conn/{label},many,{repeat}"):
                            for _ in range(s.instr_connections):
                                instrcount.requests(server, client, 1, INSTR_PATH, workdir)
                        with server.window(f"conn/{label},one,{repeat}"):
                            instrcount.requests(server, client, s.instr_connections, INSTR_PATH, workdir)
                server.control("--instr=off")
                totals |= server.totals()
    window = (str(s.instr_requests), str(s.instr_baseline), s.instr_requests - s.instr_baseline, s.instr_repeats)
    out: dict[str, Any] = {"path": INSTR_PATH, "requests": s.instr_requests, "baseline": s.instr_baseline,
                           "repeats": s.instr_repeats, "options": {}}  # fmt: skip
    for option in OPTIONS:
        index = OPTIONS.index(option)
        on = instrcount.per_unit(totals, f"{index}/{index}", *window)
        off = instrcount.per_unit(totals, f"off/{index}", *window)
        median, low, high = instrcount.ratio_range(on, off)
        out["options"][option] = {
            "request_ratio": {"median": round(median, 4), "min": round(low, 4), "max": round(high, 4)},
            "per_request_on": round(on.median),
            "per_request_off": round(off.median),
            "spread": round(max(on.spread, off.spread), 5),
        }
    units = s.instr_connections - 1
    cert, none = (instrcount.per_unit(totals, f"conn/{k}", "many", "one", units, s.instr_repeats)
                  for k in ("cert", "none"))  # fmt: skip
    median, low, high = instrcount.ratio_range(cert, none)
    out["connection"] = {
        "ratio": {"median": round(median, 3), "min": round(low, 3), "max": round(high, 3)},
        "with_cert": round(cert.median),
        "without": round(none.median),
        "spread": round(max(cert.spread, none.spread), 5),
    }
    return out


@contextmanager
def replicas_for(dev: pki.DevPKI) -> Iterator[dict[str, launch.Replica]]:
    """One replica per option and one with the feature off (same trust material everywhere). Connections are
    not rotated (as in the benchmarks): a load run of about 1000 requests per connection would otherwise cross
    the default --max-requests-per-connection depending on the machine's speed, and h2load counts the streams a
    GOAWAY refuses as failed requests, which ends the run."""
    names = ["off", *OPTIONS]
    keep = ["--max-requests-per-connection", str(2**31)]
    flags = [off_flags(dev), *(lb.replica_flags(dev, o) for o in OPTIONS)]
    argvs = [launch.serve_argv(dev, [*f, *keep]) for f in flags]
    with launch.replicas(argvs) as started:
        yield dict(zip(names, started, strict=True))


def through_lb(dev: pki.DevPKI, option: str, settings: Settings) -> dict[str, Any]:
    """Envoy in front of one replica of ``option``: the probe goes through Envoy; its positive control goes to
    the replica directly (Envoy strips the reports it would otherwise see)."""
    argv = launch.serve_argv(dev, lb.replica_flags(dev, option))
    with lb.deployment(dev, [argv], option=option) as deployed:
        replica = deployed.replicas[0]
        result = probe(deployed.envoy.url, probe_config(dev, option, 0, control_url=replica.url))
        weights = [h.weight for h in deployed.envoy.clusters()]
    return {**summarize_probe(result), "envoy_weights": weights}


def evaluate(output: Path, quick: bool, use_envoy: bool) -> dict[str, Any]:
    settings = Settings.make(quick)
    started = time.monotonic()
    results: dict[str, Any] = {
        "settings": settings.__dict__,
        "envoy": use_envoy,
        "machine": machine(),
        "options": {o: {"title": TITLES[o], "burden": BURDEN[o]} for o in OPTIONS},
    }
    with ExitStack() as stack:
        root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="secure-orca-eval-")))
        dev = pki.generate(root / "pki")
        log(f"development PKI in {root} (removed at the end); starting 5 replicas")
        reps = stack.enter_context(replicas_for(dev))
        for option in OPTIONS:
            cell = results["options"][option]
            log(f"{TITLES[option]}: probing as a client that bypasses the load balancer")
            cell["bypass"] = summarize_probe(
                probe(reps[option].url, probe_config(dev, option, settings.timing_samples))
            )
            if use_envoy:
                log(f"{TITLES[option]}: probing through Envoy")
                cell["through_lb"] = through_lb(dev, option, settings)
            else:
                cell["through_lb"] = {"verdict": "not measured: envoy not installed (pip install 'secure-orca[envoy]')"}
            log(f"{TITLES[option]}: request cost against the feature-off replica ({settings.rounds} rounds)")
            cell["request_cost"] = request_cost(reps["off"], reps[option], lb_identity(dev, option), settings, root)
            value = lb_identity(dev, option).optin
            cell["hpack_request_bytes"] = request_hpack(value)
        log("A/A control: the feature-off replica against itself (the noise floor of the cost ratios)")
        none = loadgen.Identity("lb", dev.cert("front_proxy_client"), dev.key("front_proxy_client"), "TEXT")
        results["control"] = request_cost(reps["off"], reps["off"], none, settings, root)
        log("TLS handshake cost of the front-proxy certificate")
        handshake = handshake_cost(reps["front-proxy"], dev, settings, root)
        log("HPACK bytes of the report on real connections")
        response = response_hpack(reps["front-proxy"], dev, settings)
        missing = instrcount.valgrind_available()
        if missing is None:
            log(f"instruction counts under callgrind ({settings.instr_repeats} layouts, /healthz)")
            results["instructions"] = instruction_cost(dev, settings, root)
        else:
            log(f"instruction counts skipped: {missing}")
            results["instructions"] = {"missing": missing}
    for option in OPTIONS:
        cell = results["options"][option]
        cell["handshake"] = handshake if "front-proxy" in option else {"connections_per_s_ratio": None,
                                                                       "note": "no client certificate"}  # fmt: skip
        cell["hpack_response"] = response
    results["seconds"] = round(time.monotonic() - started, 1)
    results["recommendation"] = recommend(results)
    output.mkdir(parents=True, exist_ok=True)
    (output / "evaluation.json").write_text(json.dumps(results, indent=2) + "\n")
    (output / "evaluation.md").write_text(render_markdown(results))
    return results


def machine() -> dict[str, Any]:
    import os
    import platform

    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor())  # fmt: skip
    return {"cpus": len(os.sched_getaffinity(0)), "cpu": model, "python": platform.python_version()}


def _median(cell: dict[str, Any], *keys: str) -> float | None:
    value: Any = cell
    for key in keys:
        value = value.get(key) if isinstance(value, dict) else None
    return value.get("median") if isinstance(value, dict) else value


def fmt(value: Any) -> str:
    return "n/a" if value is None else f"{value}"


def instruction_cells(results: dict[str, Any], option: str) -> list[str]:
    """Instructions per request ÷ feature off, and per new connection ÷ without a certificate (median [min, max]
    over memory layouts)."""
    counted = results.get("instructions", {})
    if "options" not in counted:
        return ["not measured", "not measured"]
    r = counted["options"][option]["request_ratio"]
    c = counted["connection"]["ratio"]
    conn = f"{c['median']} [{c['min']}, {c['max']}]" if "front-proxy" in option else "n/a"
    return [f"{r['median']} [{r['min']}, {r['max']}]", conn]


def matrix_rows(results: dict[str, Any]) -> list[list[str]]:
    control = results["control"]
    rows = [["0. feature off, A/A control", "-", "-", "-", "-", *(fmt(control[k]["median"]) for k in COST_KEYS),
             *["-"] * 3]]  # fmt: skip
    for option in OPTIONS:
        cell = results["options"][option]
        bypass, via = cell["bypass"], cell["through_lb"]
        rows.append([
            cell["title"],
            f"{bypass['verdict']} ({bypass['leaks']}/{bypass['vectors']} vectors leak)",
            via["verdict"] if "leaks" not in via else f"{via['verdict']} ({via['leaks']}/{via['vectors']})",
            *instruction_cells(results, option),
            *(fmt(_median(cell, "request_cost", k)) for k in COST_KEYS),
            fmt(cell["hpack_response"]["marginal_bytes_per_response"]),
            fmt(cell["hpack_request_bytes"]),
            fmt(bypass["timing_p_value"]),
            bypass.get("grants", "unknown"),
        ])  # fmt: skip
    return rows


COST_KEYS = ("throughput_ratio", "p99_ratio")  # wall clock: secondary, beside the A/A control
HEADER = ["option", "bypass client", "through the LB", "instructions/request ÷ off",
          "instructions/new connection ÷ no certificate", "wall clock: req/s ÷ off", "wall clock: p99 ÷ off",
          "HPACK B/resp", "HPACK B/req", "secret timing p", "what else the credential grants"]  # fmt: skip


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def recommend(results: dict[str, Any]) -> list[str]:
    """A recommendation that follows from the measured figures (each sentence cites them)."""
    opts = results["options"]
    fp, secret = opts["front-proxy"], opts["shared-secret"]
    out = []
    safe = [o for o in ("front-proxy", "shared-secret") if opts[o]["bypass"]["verdict"] == "no-leak"]
    counted = results.get("instructions", {})
    if safe:
        names = " and ".join(TITLES[o].split(".")[0] for o in safe)
        if "options" in counted:
            costs = "; ".join(
                f"{TITLES[o]}: x{r['median']} [{r['min']}, {r['max']}] "
                f"({counted['options'][o]['per_request_on'] - counted['options'][o]['per_request_off']:+,} "
                "instructions)"
                for o in safe
                for r in [counted["options"][o]["request_ratio"]]
            )
            cost = (
                f"Per request, counted in instructions under callgrind on {counted['path']} (deterministic; the "
                f"range is over {counted['repeats']} memory layouts) against the feature off: {costs}."
            )
        else:
            cost = f"Instruction counts were not taken ({counted.get('missing')}), so this run states no cost."
        control = results["control"]
        spread = [control[k][edge] for k in COST_KEYS for edge in ("min", "max")]
        out.append(
            f"Options {names} leaked nothing to the bypass client. {cost} The wall-clock ratios (secondary) "
            f"cannot resolve this: the A/A control, the feature-off replica against itself, spans {min(spread)} to "
            f"{max(spread)}."
        )
    connection = counted.get("connection")
    if connection is not None:
        c = connection["ratio"]
        out.append(
            f"A new TLS connection presenting the front-proxy certificate costs x{c['median']} [{c['min']}, "
            f"{c['max']}] the instructions of one without ({connection['with_cert']:,} against "
            f"{connection['without']:,}); the chain is verified once per chain, not per request, and load balancers "
            "hold connections open, so this is paid rarely."
        )
    extra = secret["hpack_request_bytes"] - fp["hpack_request_bytes"]
    out.append(
        f"The shared secret travels in every request header ({secret['hpack_request_bytes']} HPACK bytes per "
        f"request against {fp['hpack_request_bytes']} for the bare opt-in, +{round(extra, 2)}), lives in load "
        f"balancer configuration and logs, and grants to anyone who learns it until rotated; the timing check of "
        f"its comparison gave p = {secret['bypass']['timing_p_value']} (no evidence of a timing leak at p < 0.001)."
    )
    return out + derive(figures(results))


def figures(results: dict[str, Any]) -> list[Figures]:
    """The measured matrix as the recommendation rules read it (lab.recommend)."""
    counted = results.get("instructions", {}).get("options", {})
    out = []
    for option in OPTIONS:
        cell = results["options"][option]
        bypass = cell["bypass"]
        measured = counted.get(option)
        out.append(
            Figures(
                option=option,
                title=cell["title"],
                bypass_leaks=bypass["leaks"],
                bypass_vectors=bypass["vectors"],
                bypass_verdict=bypass["verdict"],
                grants=bypass.get("grants", "unknown"),
                lb_secret="shared-secret" in option,
                lb_certificate=option in ("front-proxy", "load-reader", "front-proxy,shared-secret"),
                cost=measured["request_ratio"]["median"] if measured else None,
                cost_bound=round(1 + 2 * measured["spread"], 4) if measured else 1.0,
                through_lb_verdict=cell["through_lb"]["verdict"],
            )
        )
    return out


def render_markdown(results: dict[str, Any]) -> str:
    m = results["machine"]
    s = results["settings"]
    burden_rows = [[results["options"][o]["title"], *BURDEN[o].values()] for o in OPTIONS]
    parts = [
        "# KEP-6315: the three options, measured\n",
        f"Machine: {m['cpus']} CPUs ({m['cpu']}), Python {m['python']}; Envoy in front: "
        f"{'yes' if results['envoy'] else 'no'}; {s['rounds']} interleaved rounds of {s['duration']} s, "
        f"h2load c={s['connections']} m={s['streams']}; total {results['seconds']} s.\n",
        "## Matrix\n",
        table(HEADER, matrix_rows(results)),
        "\nCost is counted in instructions (callgrind, `secure_orca/lab/instrcount.py`): per request, the "
        "option's replica against the feature-off one with the load balancer's identity on /healthz, a run of "
        f"{s['instr_requests']} requests minus a run of {s['instr_baseline']}; per new TLS connection, with the "
        "front-proxy certificate against none. Median [min, max] over memory layouts (one per repeat); counts are "
        "otherwise deterministic. The wall-clock columns are secondary: feature-on / feature-off from the same "
        "run (median of rounds), with row 0 measuring the feature-off replica against itself in the same way; "
        "ratios that differ from 1 by no more than row 0 does are noise, not cost. Exposure verdicts are "
        "`secure-orca probe`'s: `leak`, `no-leak` (with a positive control that did get a report), "
        "`inconclusive`.\n",
        "## Operational burden\n",
        table(["option", *BURDEN["header-only"].keys()], burden_rows),
        "\n## Recommendation\n",
        *[f"- {line}" for line in results["recommendation"]],
        "",
    ]
    return "\n".join(parts)




