"""The audit's pure verdict: what one response shows (``classify``, ``find_orca``, ``impersonation_of``), the
results, the leaks grouped by cause (``find_causes``), the timing check's own sensitivity (``positive_controls``)
and the summary verdict (``decide``). No socket, no clock: ``probe/audit.py`` runs the audit and feeds this module
what came back.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from secure_orca.orca import oob, polled
from secure_orca.orca.headers import OPTIN_BYTES as OPTIN
from secure_orca.orca.headers import ORCA_HEADERS
from secure_orca.orca.report import OrcaFormatError, parse_text
from secure_orca.probe.stats import TIMING_ALPHA, UTest, mann_whitney_u
from secure_orca.probe.vectors import (
    CLEARTEXT,
    FORGED_EXTRA_KEY,
    FORGED_VALUES,
    FORMAT_HEADER,
    LOAD_ENDPOINT_GROUP,
    NO_CERT,
    Protocol,
    Vector,
    printable,
)

Outcome = Literal["leak", "no-report", "refused-handshake", "not-accepted", "error"]
Impersonation = Literal["leak", "none", "unknown"]


# --- responses ----------------------------------------------------------------------------------------------


@dataclass
class Exchange:
    """What came back for one request; ``error_kind`` is set when no complete response arrived."""

    status: int | None = None
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    trailers: list[tuple[bytes, bytes]] = field(default_factory=list)
    alpn: str | None = None
    body: bytes = b""  # kept up to MAX_BODY (the identity read back from selfsubjectreviews)
    error_kind: str | None = None  # connect, server-cert, handshake, not-h2, reset, closed, timeout, protocol
    error: str = ""


# --- classification (pure) -------------------------------------------------------------------------------


def looks_like_report(value: bytes) -> bool:
    try:
        parse_text(value.decode("latin-1").strip())
    except OrcaFormatError:
        return False
    return True


# Response names that carry a report somewhere in the ecosystem: ours, and Envoy's JSON header name of some versions.
REPORT_NAMES = ORCA_HEADERS
STREAM_FOUND = "grpc OrcaLoadReport message"  # find_orca's name for a report streamed by StreamCoreMetrics


def find_orca(
    headers: Iterable[tuple[bytes, bytes]], trailers: Iterable[tuple[bytes, bytes]], body: bytes = b""
) -> list[str]:
    """Where ORCA data appears: a report header name in headers or trailers, a TEXT report in any trailer, or
    an ``OrcaLoadReport`` streamed as the first gRPC message of an ``application/grpc`` response."""
    found = []
    headers = list(headers)
    for where, fields in (("header", headers), ("trailer", trailers)):
        for name, value in fields:
            lowered = name.strip().lower().decode("latin-1")
            if lowered in REPORT_NAMES or (where == "trailer" and looks_like_report(value)):
                found.append(f"{where} {lowered}")
    grpc = any(n.lower() == b"content-type" and v.lower().startswith(oob.CONTENT_TYPE) for n, v in headers)
    if grpc and oob.parse_report(body) is not None:
        found.append(STREAM_FOUND)
    return found


def load_in_body(exchange: Exchange) -> str | None:
    """Which load endpoint's answer the body is (a 200 that ``orca.polled`` reads as load), or None."""
    if exchange.status != 200:
        return None
    for source in polled.PARSERS:
        try:
            polled.parse(source, exchange.body)
        except OrcaFormatError:
            continue
        return f"body {source}"
    return None


def classify(
    exchange: Exchange, protocol: Protocol, with_cert: bool = False, load_endpoint: bool = False
) -> tuple[Outcome, str]:
    """The outcome of one vector and a one-line detail. ``with_cert``: the client presented a certificate, so a
    connection closed before any response counts as a refused handshake (with TLS 1.3 the server refuses a
    client certificate after the client's side of the handshake has completed). ``load_endpoint``: a body that
    reads as a model server's load (``load_in_body``) is a leak too."""
    leaks = find_orca(exchange.headers, exchange.trailers, exchange.body)
    found = load_in_body(exchange) if load_endpoint else None
    if found:
        leaks.append(found)
    if leaks:
        return "leak", ", ".join(leaks)
    if exchange.status is not None and exchange.error_kind is None:
        return "no-report", f"status {exchange.status}"
    kind, why = exchange.error_kind or "protocol", exchange.error
    if protocol in CLEARTEXT and kind not in ("connect",):
        return "not-accepted", f"cleartext {kind}: {why}".strip(": ")
    if kind == "handshake":
        return "refused-handshake", f"TLS handshake failed: {why}"
    if kind == "closed" and with_cert and exchange.status is None:
        return "refused-handshake", "connection closed right after the handshake (client certificate refused)"
    if kind in ("not-h2", "reset", "closed") and exchange.status is None:
        return "not-accepted", f"{kind}: {why}".strip(": ")
    return "error", f"{kind}: {why}".strip(": ")


def impersonation_of(exchange: Exchange, outcome: Outcome) -> tuple[Impersonation, str]:
    """Whether the server believed forged identity headers, read back from its selfsubjectreviews answer:
    ``leak`` (a forged user, group, uid or extra came back), ``none`` (another identity came back, or the
    request or its certificate was refused) or ``unknown`` (no identity could be read)."""
    if outcome == "refused-handshake":
        return "none", "refused: TLS handshake"
    if outcome == "not-accepted":  # e.g. HTTP/2 refuses upper-case field names as a malformed request
        return "none", f"refused: {exchange.error_kind or 'not accepted'}"
    if exchange.status in (401, 403):
        return "none", f"refused: status {exchange.status}"
    if exchange.status not in (200, 201) or exchange.error_kind is not None:
        return "unknown", f"no identity to read back ({exchange.error_kind or f'status {exchange.status}'})"
    try:
        info = json.loads(exchange.body)["status"]["userInfo"]
        name, groups = str(info.get("username", "")), [str(g) for g in info.get("groups", [])]
        extra, uid = dict(info.get("extra", {})), str(info.get("uid", ""))
    except (ValueError, KeyError, TypeError, AttributeError):
        return "unknown", "the answer is not a SelfSubjectReview"
    believed = FORGED_VALUES & {name, uid, *groups, *(str(v) for vs in extra.values() for v in vs)}
    if believed or FORGED_EXTRA_KEY in extra:
        return "leak", f"believed: user {name}, groups {groups}"
    return "none", f"seen as {name or '(no name)'}"


def report_evidence(exchange: Exchange) -> str:
    """The first leaked value, whole (it is the server's load, not a secret of ours); bytes that are not
    printable ASCII are escaped, so a server cannot write control characters to the terminal."""
    for name, value in [*exchange.headers, *exchange.trailers]:
        if name.strip().lower().decode("latin-1") in REPORT_NAMES:
            return _whole(value)
    streamed = oob.parse_report(exchange.body)
    return _whole(" ".join(str(streamed).split()).encode()) if streamed is not None else ""


def _whole(value: bytes) -> str:
    return printable(value, limit=len(value))


# --- results and verdict (pure) --------------------------------------------------------------------------


@dataclass(frozen=True)
class VectorResult:
    vector: Vector
    outcome: Outcome
    detail: str
    status: int | None = None
    alpn: str | None = None
    evidence: str = ""
    report_ok: bool | None = None  # for a leak or a control: does the report pass Envoy's TEXT rules?
    seconds: float = 0.0
    impersonation: Impersonation | None = None  # only for vectors that forge identity headers
    identity_detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            **self.vector.to_json(),
            "outcome": self.outcome,
            "impersonation": self.impersonation,
            "identity_detail": self.identity_detail,
            "detail": self.detail,
            "status": self.status,
            "alpn": self.alpn,
            "evidence": self.evidence,
            "report_valid": self.report_ok,
            "seconds": round(self.seconds, 4),
        }


@dataclass(frozen=True)
class TimingResult:
    """Wrong secrets differing at the first vs the last character, interleaved over one connection."""

    samples_per_kind: int
    secret_length: int
    length_known: bool
    median_early_us: float
    median_late_us: float
    test: UTest
    reconnects: int = 0
    controls: dict[float, float] = field(default_factory=dict)  # positive controls: shift (µs) -> p

    @property
    def detectable_us(self) -> float | None:
        """The smallest shift the check caught among its positive controls (None: it caught none)."""
        return next((shift for shift, p in sorted(self.controls.items()) if p < TIMING_ALPHA), None)

    @property
    def suspicious(self) -> bool:
        return self.test.p_value < TIMING_ALPHA

    def to_json(self) -> dict[str, Any]:
        return {
            "samples_per_kind": self.samples_per_kind,
            "secret_length": self.secret_length,
            "length_known": self.length_known,
            "median_early_us": round(self.median_early_us, 1),
            "median_late_us": round(self.median_late_us, 1),
            "u": self.test.u,
            "z": round(self.test.z, 3),
            "p_value": self.test.p_value,
            "alpha": TIMING_ALPHA,
            "suspicious": self.suspicious,
            "reconnects": self.reconnects,
            "controls_us_p": {f"{shift:g}": p for shift, p in self.controls.items()},
            "detectable_us": self.detectable_us,
        }


# --- causes: leaking vectors grouped by the request shape that leaked (pure) ------------------------------

_ASKING = (OPTIN, FORMAT_HEADER)  # the request header names that ask for a report, ours and the ecosystem's
ANY_CLIENT = "any client"
CauseKind = Literal["report", "identity"]


def asked_with(result: VectorResult) -> str:
    """The request shape a report answered: the stream, or the names of the asking headers as a server reads them
    (lower case, stripped), or none at all. Values do not count: a server that answers ``TEXT`` usually answers
    ``TEXT; secret=wrong`` and ``TEXT`` with forged identity headers too, and those are one hole, not three."""
    if all(where == STREAM_FOUND for where in result.detail.split(", ")):
        return f"POST {oob.PATH}"
    if result.vector.group == LOAD_ENDPOINT_GROUP and result.detail.startswith("body "):
        return f"GET {result.vector.path}"
    names = dict.fromkeys(n.strip().lower().decode("latin-1") for n, _ in result.vector.headers)
    asking = [n for n in names if n.encode() in _ASKING]
    return ", ".join(asking) if asking else "no opt-in header"


@dataclass(frozen=True)
class Cause:
    """One hole: the request shape that leaked (``asked``) and who may send it (``who``: ``any client`` when a
    client without a certificate got it, else the one identity that did), with every vector it explains."""

    kind: CauseKind
    asked: str
    who: str
    results: tuple[VectorResult, ...]

    @property
    def title(self) -> str:
        who = (
            "any client (no certificate needed)"
            if self.who == ANY_CLIENT
            else f"a client with the {self.who!r} identity"
        )
        if self.kind == "identity":
            return f"{who} that sends forged x-remote-* identity headers is believed"
        if self.asked.startswith("POST "):
            return f"{who} that opens the out-of-band stream ({self.asked}) gets load reports"
        if self.asked == "no opt-in header":
            return f"{who} gets a load report without asking (no opt-in header)"
        wrong = sum(1 for r in self.results if r.vector.group == "secret")
        return f"{who} that sends {self.asked} gets a load report" + (
            f"; no secret is checked ({wrong} wrong secrets got one)" if wrong else ""
        )

    def answers(self) -> list[str]:
        """Each distinct leaked value, whole, with where it came."""
        if self.kind == "identity":
            return list(dict.fromkeys(r.identity_detail for r in self.results))
        return list(dict.fromkeys(f"{r.detail}: {r.evidence}" if r.evidence else r.detail for r in self.results))

    def by_group(self) -> dict[str, list[str]]:
        """The vectors' names per group and path (``"impersonation /apis/..."``), without the group and the path
        (``forged-plain/none/http/1.1``), in the order they ran."""
        out: dict[str, list[str]] = {}
        for r in self.results:
            v = r.vector
            short = v.name.removeprefix(f"{v.group}:").removesuffix(f" {v.path}")
            out.setdefault(f"{v.group} {v.path}", []).append(short)
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "cause": self.title,
            "asked_with": self.asked,
            "who": self.who,
            "answers": self.answers(),
            "vectors": [r.vector.name for r in self.results],
        }


def find_causes(
    results: Sequence[VectorResult], identity_controls: Sequence[VectorResult] = (), lb_identity_believed: bool = True
) -> list[Cause]:
    """Leaking vectors grouped by cause, the largest first. A request shape that leaked to a client without a
    certificate leaked to ``any client``: every other identity's leak of that shape is the same hole."""
    reports = [r for r in results if r.outcome == "leak"]
    believed = [r for r in results if r.impersonation == "leak"]
    if not lb_identity_believed:
        believed += [c for c in identity_controls if c.impersonation == "leak"]
    groups: dict[tuple[CauseKind, str, str], list[VectorResult]] = {}
    for kind, leaks in (("report", reports), ("identity", believed)):
        open_to_all = {asked_with(r) for r in leaks if r.vector.identity == NO_CERT.name}
        for r in leaks:
            asked = asked_with(r) if kind == "report" else "x-remote-* identity headers"
            open_shape = asked in open_to_all if kind == "report" else bool(open_to_all)
            who = ANY_CLIENT if open_shape else r.vector.identity
            groups.setdefault((kind, asked, who), []).append(r)  # type: ignore[arg-type]
    causes = [Cause(kind, asked, who, tuple(rs)) for (kind, asked, who), rs in groups.items()]
    return sorted(causes, key=lambda c: -len(c.results))


def timing_skip(controls: Sequence[VectorResult], results: Sequence[VectorResult]) -> str | None:
    """Why the secret-timing check would measure nothing, or None when it can run: it needs a secret that the
    positive control showed is accepted, and a server that refuses wrong secrets. (Without the real secret every
    guess differs from it at the first character, so early and late guesses cannot differ.)"""
    secret = [c for c in controls if c.vector.variant == "secret"]
    if not secret:
        return "no secret was accepted by the positive control (no --lb-secret-file given)"
    if not any(c.outcome == "leak" for c in secret):
        return "no secret was accepted by the positive control (its secret got no report)"
    wrong = [r for r in results if r.vector.group == "secret" and r.outcome == "leak"]
    if wrong:
        return f"wrong secrets got a report ({len(wrong)} vectors): no secret is checked, nothing to time"
    return None


def impersonation_summary(results: Sequence[VectorResult]) -> str | None:
    """The impersonation line: ``LEAK``, ``none believed`` only when every forged identity was read back as not
    believed or refused, else ``not checked`` (for some or all): an unknown identity is never ``none``."""
    forged = [r.impersonation for r in results if r.impersonation is not None]
    if not forged:
        return None
    tally = ", ".join(f"{forged.count(k)} {k}" for k in ("leak", "none", "unknown") if k in forged)
    unknown = forged.count("unknown")
    if "leak" in forged:
        return f"LEAK ({len(forged)} forged identities: {tally})"
    if not unknown:
        return f"none believed ({len(forged)} forged identities: {tally})"
    some = "" if unknown == len(forged) else f" for {unknown} of {len(forged)} forged identities"
    return f"not checked{some}: no identity could be read back ({len(forged)} forged identities: {tally})"


Verdict = Literal["leak", "no-leak", "inconclusive", "unreachable"]
EXIT_CODES: dict[str, int] = {"no-leak": 0, "leak": 1, "inconclusive": 2, "unreachable": 2}


def decide(
    controls: Sequence[VectorResult],
    results: Sequence[VectorResult],
    unreachable: str | None = None,
    identity_controls: Sequence[VectorResult] = (),
    lb_identity_believed: bool = True,
) -> tuple[Verdict, str]:
    """The summary verdict and its reason, covering load reports and impersonation. A leak of either is proof
    whatever else happened; a clean run counts only with a positive control that got a report (and, when one
    was sent, a front-proxy control whose identity headers were believed) and with every vector tested."""
    causes = find_causes(results, identity_controls, lb_identity_believed)
    if causes:
        leaked = {id(r) for c in causes for r in c.results}
        return "leak", (
            f"{len(leaked)} of {len(results)} vectors leaked, from {len(causes)} cause"
            f"{'s' if len(causes) > 1 else ''}: " + "; ".join(_cause_reason(c) for c in causes)
        )
    if unreachable is not None:
        return "unreachable", unreachable
    if not controls:
        return "inconclusive", "no leak found, but no positive control (give --lb-cert/--lb-key or --lb-secret-file)"
    if not any(c.outcome == "leak" for c in controls):
        return (
            "inconclusive",
            "no leak found, but the positive control got no report (feature off or LB credentials wrong)",
        )
    errors = [r for r in results if r.outcome == "error"]
    if errors:
        return "inconclusive", f"no leak found, but {len(errors)} vectors ended in error (first: {errors[0].detail})"
    if lb_identity_believed and identity_controls and not any(c.impersonation == "leak" for c in identity_controls):
        return (
            "inconclusive",
            "no leak found, but the front proxy's own identity headers were not believed (no requestheader "
            f"authentication or no selfsubjectreviews: {identity_controls[0].identity_detail})"
            + _load_reader_hint(identity_controls),
        )
    unknown = [r for r in (*results, *identity_controls) if r.impersonation == "unknown"]
    if unknown:
        return (
            "inconclusive",
            f"no leak found, but {len(unknown)} identities could not be read back "
            f"(first: {unknown[0].identity_detail})",
        )
    forged = sum(1 for r in results if r.impersonation is not None)
    return "no-leak", (
        f"none of {len(results)} vectors got load metrics; the positive control did"
        + (f"; impersonation: none of {forged} forged identities was believed" if forged else "")
    )


def _cause_reason(cause: Cause) -> str:
    first = cause.results[0]
    asked = "; ".join(first.vector.shown) or "no opt-in"
    answered = first.identity_detail if cause.kind == "identity" else first.detail
    return (
        f"{cause.title} ({len(cause.results)} vectors, first {first.vector.name}: asked with {asked}, "
        f"answered in {answered})"
    )


def _load_reader_hint(identity_controls: Sequence[VectorResult]) -> str:
    """The certificate opened a connection and got an answer, yet its identity headers were not believed: that
    is what a load reader's certificate (option 2b) must do, so name the flag that says so."""
    if any(c.outcome in ("leak", "no-report") for c in identity_controls):
        return "; the certificate opens a connection: if it is a load reader's (option 2b), add --lb-load-reader"
    return ""


@dataclass
class ProbeResult:
    url: str
    verdict: Verdict
    reason: str
    controls: list[VectorResult]
    results: list[VectorResult]
    identity_controls: list[VectorResult] = field(default_factory=list)
    timing: TimingResult | None = None
    lb_identity_believed: bool = True  # False for a load reader's certificate (option 2b)
    timing_error: str = ""
    timing_skipped: str = ""  # why the timing check was not run (no secret to time)
    seconds: float = 0.0

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict]

    @property
    def lb_grants_identity(self) -> bool | None:
        """What else the load balancer's certificate grants: any identity it names (True), none (False), or
        not measured (None: no certificate, or the identity could not be read back)."""
        seen = {c.impersonation for c in self.identity_controls}
        if not seen or "unknown" in seen or None in seen:
            return None
        return "leak" in seen

    @property
    def control_ok(self) -> bool:
        return any(c.outcome == "leak" for c in self.controls)

    def causes(self) -> list[Cause]:
        return find_causes(self.results, self.identity_controls, self.lb_identity_believed)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.results:
            out[r.outcome] = out.get(r.outcome, 0) + 1
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "verdict": self.verdict,
            "exit_code": self.exit_code,
            "reason": self.reason,
            "control_ok": self.control_ok,
            "counts": self.counts(),
            "controls": [c.to_json() for c in self.controls],
            "identity_controls": [c.to_json() for c in self.identity_controls],
            "causes": [c.to_json() for c in self.causes()],
            "vectors": [r.to_json() for r in self.results],
            "timing": self.timing.to_json() if self.timing else None,
            "timing_error": self.timing_error,
            "timing_skipped": self.timing_skipped,
            "seconds": round(self.seconds, 3),
        }


# The leaks the positive controls add, in µs per request.
CONTROL_SHIFTS_US = (0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0, 300.0, 1000.0, 3000.0)


def positive_controls(early: Sequence[float], late: Sequence[float]) -> dict[float, float]:
    """The check's own sensitivity, from the samples it measured: each shift of CONTROL_SHIFTS_US added to every
    late sample (a comparison that took that much longer when the secret matched further), and the p the same
    test gives. The smallest shift with p < TIMING_ALPHA is the smallest leak this run would have detected on
    this server's noise."""
    return {shift: mann_whitney_u(early, [t + shift for t in late]).p_value for shift in CONTROL_SHIFTS_US}


def unreachable_reason(baseline: VectorResult) -> str | None:
    """Why the server could not be reached, from the first vector's result, or None when it could."""
    if baseline.outcome != "error":
        return None
    kind = baseline.detail.partition(":")[0]
    if kind in ("connect", "server-cert", "timeout"):
        return f"cannot reach the server: {baseline.detail}"
    return None
