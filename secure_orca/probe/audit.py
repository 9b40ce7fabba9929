"""Bypass-client audit: can a client that reaches an HTTPS endpoint read ORCA load metrics?

The audit sends a list of named vectors (client identity x opt-in header values x protocol x path) to one URL
and looks for a leak: any ``endpoint-load-metrics`` or ``endpoint-load-metrics-bin`` header, or ORCA data in
trailers. A positive control with the load balancer's credentials first shows that the feature is on; without
one (or when it fails) a clean result is *inconclusive*. A timing check compares wrong secrets that differ
early against ones that differ late over one kept-alive HTTP/2 connection (Mann-Whitney U test).

Layout: this module runs the audit (``probe()``); what a response shows, the causes and the verdict are
pure, in ``probe/verdict.py``, as are the vector definitions (``probe/vectors.py``) and the statistics
(``probe/stats.py``). The transport (``probe/transport.py``) is a small sans-I/O h2 client over an ``ssl``
socket and a raw HTTP/1.1 client, every socket with a timeout.
The probe never connects anywhere but the URL it is given (and ``control_url`` when one is given).
Secrets never appear in a vector's ``shown`` headers, its repr, or the JSON.
"""

from __future__ import annotations

import random
import ssl
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import h2.exceptions
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from secure_orca import pki
from secure_orca.orca.headers import OPTIN_BYTES as OPTIN
from secure_orca.orca.headers import REPORT as HEADER
from secure_orca.probe.stats import mann_whitney_u, median
from secure_orca.probe.transport import Connector, H2Client, ProbeError, Target, exchange
from secure_orca.probe.vectors import (
    DEFAULT_PATH,
    DEFAULT_SECRET_LENGTH,
    LOAD_ENDPOINT_GROUP,
    NO_CERT,
    SELF_SUBJECT_REVIEWS,
    Identity,
    Vector,
    build_vectors,
    client_ca_identities,
    control_vectors,
    flip,
    impersonation_controls,
    mint_identities,
    random_secret,
    secret_value,
)
from secure_orca.probe.verdict import (
    ProbeResult,
    TimingResult,
    VectorResult,
    classify,
    decide,
    find_orca,
    impersonation_of,
    looks_like_report,
    positive_controls,
    report_evidence,
    timing_skip,
    unreachable_reason,
)
from secure_orca.x509.chainverifier import common_name

_TEXT_HEADER = HEADER.encode()


# --- running ---------------------------------------------------------------------------------------------


def run_vector(connector: Connector, identities: dict[str, Identity], vector: Vector) -> VectorResult:
    start = time.perf_counter()
    got = exchange(connector, identities[vector.identity], vector)
    load_endpoint = vector.group == LOAD_ENDPOINT_GROUP
    outcome, detail = classify(got, vector.protocol, identities[vector.identity].has_cert, load_endpoint)
    evidence = report_evidence(got) if outcome == "leak" else ""
    report_ok = None
    if evidence:
        report_ok = any(looks_like_report(v) for n, v in got.headers if n.lower() == _TEXT_HEADER)
    seconds = time.perf_counter() - start
    result = VectorResult(vector, outcome, detail, got.status, got.alpn, evidence, report_ok, seconds)
    if vector.path == SELF_SUBJECT_REVIEWS and vector.method == "POST":
        believed, why = impersonation_of(got, outcome)
        result = replace(result, impersonation=believed, identity_detail=why)
    return result


def timing_check(
    connector: Connector,
    path: str,
    samples: int,
    known_secret: str | None,
    seed: int | None = None,
    warmup: int = 20,
) -> TimingResult:
    """Interleave wrong secrets that differ from the real one (or a random base) at the first vs the last
    character over one kept-alive HTTP/2 connection, reconnecting if the server closes it."""
    rng = random.Random(seed)
    length = len(known_secret) if known_secret else DEFAULT_SECRET_LENGTH
    base = known_secret or random_secret(length, rng)
    times: dict[str, list[float]] = {"early": [], "late": []}
    client: H2Client | None = None
    reconnects = 0
    plan = ["warmup"] * warmup
    for _ in range(samples):
        pair = ["early", "late"]
        rng.shuffle(pair)
        plan += pair
    try:
        for kind in plan:
            while True:
                if client is None or client.closed:
                    if client is not None:
                        client.close()
                        reconnects += 1
                        if reconnects > 20:
                            raise ProbeError("the server kept closing the timing connection")
                    sock = connector.tls(NO_CERT, "h2")
                    if sock.selected_alpn_protocol() != "h2":
                        sock.close()
                        raise ProbeError("the server does not speak HTTP/2")
                    client = H2Client(sock, connector.target)
                guess = flip(base, 0 if kind in ("early", "warmup") else -1, rng)
                start = time.perf_counter_ns()
                got = client.get(path, ((OPTIN, secret_value(guess)),))
                elapsed = (time.perf_counter_ns() - start) / 1000
                if got.error_kind is None:
                    break
                client.closed = True  # retry this sample on a new connection
            if find_orca(got.headers, got.trailers):
                raise ProbeError("wrong secrets get a report: no secret is checked, nothing to time")
            if kind != "warmup":
                times[kind].append(elapsed)
    finally:
        if client is not None:
            client.close()
    test = mann_whitney_u(times["early"], times["late"])
    return TimingResult(
        samples,
        length,
        known_secret is not None,
        median(times["early"]),
        median(times["late"]),
        test,
        reconnects,
        positive_controls(times["early"], times["late"]),
    )


@dataclass(frozen=True)
class ProbeConfig:
    """Everything one audit needs. Secrets are excluded from repr."""

    cacert: Path | None = None
    insecure: bool = False
    lb_cert: Path | None = None
    lb_key: Path | None = None
    lb_secret: str | None = field(default=None, repr=False)
    client_cert: Path | None = None
    client_key: Path | None = None
    secret_guess: str | None = field(default=None, repr=False)
    paths: tuple[str, ...] = ()
    timing_samples: int = 500
    timeout: float = 5.0
    front_proxy_cn: str | None = None
    control_url: str | None = None
    seed: int | None = None
    lb_header_only: bool = False  # the LB sends the bare opt-in (option 1): that is the positive control
    lb_load_reader: bool = False  # the LB certificate is a load reader's (option 2b): its identity must not count
    client_ca_cert: Path | None = None  # the server's client CA: mint users named like the LB from it
    client_ca_key: Path | None = None
    body: bytes = b""  # POST this to the paths (a completion endpoint); empty: GET


def _cert_names(path: Path | None) -> tuple[str | None, str | None]:
    """The subject CN and issuer CN of the first certificate in ``path``."""
    if path is None:
        return None, None
    cert = x509.load_pem_x509_certificate(path.read_bytes())
    issuer = cert.issuer.get_attributes_for_oid(x509.oid.NameOID.COMMON_NAME)
    return common_name(cert), (str(issuer[0].value) if issuer else None)


def _load_issued(cert: Path, key: Path) -> pki.Issued:
    private = serialization.load_pem_private_key(key.read_bytes(), password=None)
    return pki.Issued(x509.load_pem_x509_certificate(cert.read_bytes()), private)  # type: ignore[arg-type]


def identities_for(config: ProbeConfig) -> tuple[list[Identity], Identity | None]:
    """The identities the vectors use, and the load balancer's (for the control only)."""
    lb_cn, lb_issuer = _cert_names(config.lb_cert)
    allowed = config.front_proxy_cn or lb_cn or pki.FRONT_PROXY_CN
    out = [NO_CERT]
    if config.client_cert is not None:
        out.append(Identity("client", "the given client certificate", config.client_cert, config.client_key))
    if config.client_ca_cert is not None and config.client_ca_key is not None:
        names = [allowed, pki.FRONT_PROXY_CN, pki.LOAD_READER_CN]
        out += client_ca_identities(_load_issued(config.client_ca_cert, config.client_ca_key), names)
    out += mint_identities(allowed, lb_issuer)
    lb = Identity("lb", "the load balancer's certificate", config.lb_cert, config.lb_key) if config.lb_cert else None
    return out, lb


def default_paths(target: Target, paths: Sequence[str]) -> tuple[str, ...]:
    if paths:
        return tuple(paths)
    return (target.path,) if target.path not in ("", "/") else (DEFAULT_PATH,)


@dataclass(frozen=True)
class AuditPlan:
    """One audit, ready to send: where to, who as (every credential already loaded), and what."""

    paths: tuple[str, ...]
    connector: Connector
    control_connector: Connector
    identities: dict[str, Identity]
    vectors: list[Vector]
    controls: list[Vector]
    identity_controls: list[Vector]

    @property
    def total(self) -> int:
        return len(self.controls) + len(self.identity_controls) + len(self.vectors)


def plan_audit(url: str, config: ProbeConfig) -> AuditPlan:
    """Everything the audit will send, or ProbeError for unusable input, before any traffic."""
    target = Target.parse(url)
    control_target = Target.parse(config.control_url) if config.control_url else target
    paths = default_paths(target, config.paths)
    for path in paths:
        if not path.startswith("/"):
            raise ProbeError(f"path {path!r} must start with /")
    try:
        identities, lb = identities_for(config)
    except (OSError, ValueError) as error:
        raise ProbeError(f"cannot read the load balancer certificate: {error}") from None
    by_name = {i.name: i for i in [*identities, *([lb] if lb is not None else [])]}
    connector = Connector(target, config.cacert, config.insecure, config.timeout)
    try:
        for identity in by_name.values():  # load every credential up front: bad files fail before any traffic
            connector.context(identity, "h2")
    except (OSError, ssl.SSLError) as error:
        raise ProbeError(f"cannot load a client certificate or key: {error}") from None
    vectors = build_vectors(
        paths,
        identities,
        secret_guess=config.secret_guess,
        known_secret=config.lb_secret,
        seed=config.seed,
        body=config.body,
    )
    return AuditPlan(
        paths,
        connector,
        Connector(control_target, config.cacert, config.insecure, config.timeout),
        by_name,
        vectors,
        control_vectors(paths[0], lb, config.lb_secret, config.lb_header_only, config.body),
        impersonation_controls(lb),
    )


@dataclass
class _Runner:
    """Runs vectors in turn and reports each result with its place among ``total``."""

    identities: dict[str, Identity]
    total: int
    on_result: Callable[[int, int, VectorResult], None] | None
    done: int = 0

    def __call__(self, connector: Connector, vectors: Sequence[Vector]) -> list[VectorResult]:
        out = []
        for vector in vectors:
            result = run_vector(connector, self.identities, vector)
            self.done += 1
            if self.on_result is not None:
                self.on_result(self.done, self.total, result)
            out.append(result)
        return out


def probe(
    url: str,
    config: ProbeConfig,
    on_result: Callable[[int, int, VectorResult], None] | None = None,
    on_phase: Callable[[str], None] | None = None,
) -> ProbeResult:
    """Run the whole audit against ``url``: positive control, every vector, then the timing check.

    ``on_result(index, total, result)`` and ``on_phase(text)`` report progress. Raises ProbeError for unusable
    input before any traffic; network failures end up in the result (verdict ``unreachable``)."""
    started = time.perf_counter()
    plan = plan_audit(url, config)
    run = _Runner(plan.identities, plan.total, on_result)
    if on_phase:
        on_phase(f"probing {url} ({plan.total} requests)")
    baseline = run(plan.connector, plan.vectors[:1])
    unreachable = unreachable_reason(baseline[0])
    if unreachable:
        verdict, reason = decide([], [], unreachable)
        return ProbeResult(url, verdict, reason, [], baseline, seconds=time.perf_counter() - started)
    controls = run(plan.control_connector, plan.controls)
    identity_controls = run(plan.control_connector, plan.identity_controls)
    results = baseline + run(plan.connector, plan.vectors[1:])
    believed = not config.lb_load_reader
    verdict, reason = decide(controls, results, identity_controls=identity_controls, lb_identity_believed=believed)
    out = ProbeResult(url, verdict, reason, controls, results, identity_controls, lb_identity_believed=believed)
    if config.timing_samples > 0:
        _time_secrets(out, plan, config, on_phase)
    out.seconds = time.perf_counter() - started
    return out


def _time_secrets(
    out: ProbeResult, plan: AuditPlan, config: ProbeConfig, on_phase: Callable[[str], None] | None
) -> None:
    """The timing check into ``out``: its result, why it was skipped, or the error that ended it."""
    skip = timing_skip(out.controls, out.results)
    if skip is not None:
        out.timing_skipped = skip
        if on_phase:
            on_phase(f"timing check skipped: {skip}")
        return
    if on_phase:
        on_phase(f"timing check: {config.timing_samples} early/late pairs over one HTTP/2 connection")
    try:
        out.timing = timing_check(plan.connector, plan.paths[0], config.timing_samples, config.lb_secret, config.seed)
    except (OSError, ssl.SSLError, h2.exceptions.ProtocolError, ProbeError) as error:
        out.timing_error = " ".join(str(error).split())[:160] or type(error).__name__
