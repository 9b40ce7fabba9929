"""The evaluation's cost column in instructions: each option's replica against the feature-off one under
callgrind (``secure_orca.lab.instrcount``), per request with the load balancer's identity, and per new TLS
connection with the front-proxy certificate against none, and per streamed out-of-band report
(``oobcost.report_instructions``, one memory layout per repeat)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from secure_orca import pki
from secure_orca.lab import instrcount, loadgen, oobcost
from secure_orca.lab import launcher as lb
from secure_orca.lab import replicas as launch
from secure_orca.lab.options import OPTIONS, auth_mode
from secure_orca.lab.results import InstrConnection, InstrOption, InstrReport, Instructions, Settings, Spread

CERTIFICATES = ("front-proxy", "load-reader")  # the client certificates a load balancer presents (2, 2b and 4)
INSTR_PATH = "/healthz"  # the cheapest route: the feature's share of a request is largest there


def off_flags(dev: pki.DevPKI) -> list[str]:
    """The baseline replica: the same trust material as every option, the feature not enabled."""
    every = "front-proxy,shared-secret,load-reader"  # every credential completes its handshake here too
    return [f for f in lb.replica_flags(dev, every) if f != "--enable-endpoint-load-metrics"]


def _spread(ratio: tuple[float, float, float], digits: int) -> Spread:
    median, low, high = ratio
    return Spread(round(median, digits), round(low, digits), round(high, digits))


def instruction_cost(
    dev: pki.DevPKI, identities: Mapping[str, loadgen.Identity], settings: Settings, workdir: Path
) -> Instructions:
    """Instructions per request of each option's replica against the feature-off one, with the load
    balancer's identity (``identities``, by option), and per new TLS connection with each load-balancer client
    certificate (front-proxy, load-reader) against none. Deterministic: repeats differ only by memory layout."""
    s = settings
    no_cert = loadgen.Identity("lb", optin="TEXT")
    totals: dict[str, int] = {}
    for repeat in range(s.instr_repeats):
        for name, flags in [("off", off_flags(dev)), *((o, lb.replica_flags(dev, auth_mode(o))) for o in OPTIONS)]:
            clients = dict(identities) if name == "off" else {name: identities[name]}
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
                if name in CERTIFICATES:
                    for label, client in (("cert", identities[name]), ("none", no_cert)):
                        with server.window(f"conn{server_key}/{label},many,{repeat}"):
                            for _ in range(s.instr_connections):
                                instrcount.requests(server, client, 1, INSTR_PATH, workdir)
                        with server.window(f"conn{server_key}/{label},one,{repeat}"):
                            instrcount.requests(server, client, s.instr_connections, INSTR_PATH, workdir)
                server.control("--instr=off")
                totals |= server.totals()
    window = (str(s.instr_requests), str(s.instr_baseline), s.instr_requests - s.instr_baseline, s.instr_repeats)
    options = {}
    for option in OPTIONS:
        index = OPTIONS.index(option)
        on = instrcount.per_unit(totals, f"{index}/{index}", *window)
        off = instrcount.per_unit(totals, f"off/{index}", *window)
        options[option] = InstrOption(
            request_ratio=_spread(instrcount.ratio_range(on, off), 4),
            per_request_on=round(on.median),
            per_request_off=round(off.median),
            spread=round(max(on.spread, off.spread), 5),
        )
    units = s.instr_connections - 1
    connections = {}
    for certificate in CERTIFICATES:
        key = f"conn{OPTIONS.index(certificate)}"
        cert, none = (instrcount.per_unit(totals, f"{key}/{k}", "many", "one", units, s.instr_repeats)
                      for k in ("cert", "none"))  # fmt: skip
        connections[certificate] = InstrConnection(
            ratio=_spread(instrcount.ratio_range(cert, none), 3),
            with_cert=round(cert.median),
            without=round(none.median),
            spread=round(max(cert.spread, none.spread), 5),
        )
    per_report = [v for r in range(s.instr_repeats) for v in oobcost.report_instructions(s.oob_long, s.oob_short, 1, r)]
    report = InstrReport(Spread.of(per_report, 0), s.oob_long, s.oob_short)
    return Instructions(INSTR_PATH, s.instr_requests, s.instr_baseline, s.instr_repeats, options, connections, report)
