"""One audit event: the record a request leaves (the fields its event needs, copied when the request arrives,
charged in bytes) and its rendering as kube's ``audit.k8s.io/v1`` ``Event`` JSON line, redacted
(audit.redaction). audit.log queues the records and writes the lines."""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import json
import os
import re
import time
from collections.abc import Callable, Iterable
from typing import Any

from cryptography import x509

from secure_orca.authn.user import ANONYMOUS, UserInfo
from secure_orca.authz.reasons import Reason
from secure_orca.orca.headers import OPTIN_BYTES, OPTIN_SPELLINGS, REPORT
from secure_orca.server.asgi import Scope
from secure_orca.server.audit.redaction import Redactor, presented
from secure_orca.x509.chainverifier import common_name

AUDIT_KEY = "secure_orca.audit"  # scope key of the request's AuditRecord
REASON = "endpoint-load-metrics.secure-orca.io/reason"  # the load-report decision's Reason
REPORT_ANNOTATION = "endpoint-load-metrics.secure-orca.io/report"  # how a report reached the caller
IN_BAND, OUT_OF_BAND, NO_REPORT = "in-band", "out-of-band", "none"
FRONT_PROXY = "authentication.secure-orca.io/front-proxy"  # CN of the front proxy that asserted the user
RECORD_BYTES = 1024  # charged per record beyond its strings: the object, its slots, the fixed fields
ITEM_BYTES = 64  # charged per kept string or bytes object: its header
_REPORT_NAME = REPORT.encode()
_USER_AGENT, _AUTHORIZATION = b"user-agent", b"authorization"
_FORWARDED_FOR, _REAL_IP = b"x-forwarded-for", b"x-real-ip"
_AUDIT_ID = b"audit-id"


class AuditRecord:
    """What the request path learns about one request; the writer thread turns it into an Event. The fields are
    copied from the scope when the request arrives (the scope itself is not kept), and ``size`` is what the record
    is charged in the queue: its strings plus a constant, an upper bound of the memory it keeps."""

    __slots__ = (
        "agent",
        "audit_id",
        "client",
        "decision",
        "fate",
        "forwarded",
        "front_proxy",
        "method",
        "path",
        "presented",
        "query",
        "real",
        "received",
        "report",
        "size",
        "stage",
        "status",
        "user",
    )

    def __init__(self, scope: Scope) -> None:
        self.received = time.time_ns()
        self.method = str(scope.get("method", ""))
        self.path: bytes = scope.get("raw_path") or scope.get("path", "").encode("utf-8", "surrogateescape")
        self.query: bytes = scope.get("query_string", b"")
        client = scope.get("client")
        self.client: str | None = client[0] if client else None
        headers = scope["headers"]  # names lower-case, as ASGI servers give them (h2 refuses others, h11 lowers)
        first = dict(reversed(headers))  # the first value of each name (one C-level pass); only bytes are kept
        self.agent: bytes | None = first.get(_USER_AGENT)
        size = RECORD_BYTES + len(self.method) + len(self.path) + len(self.query) + 3 * ITEM_BYTES
        if self.agent is not None:
            size += len(self.agent) + ITEM_BYTES
        self.forwarded: list[bytes] = []
        self.real: list[bytes] = []
        self.presented: tuple[str, ...] = ()
        if _FORWARDED_FOR in first or _REAL_IP in first:
            self.forwarded = [value for name, value in headers if name == _FORWARDED_FOR]
            self.real = [value for name, value in headers if name == _REAL_IP]
        authorization = first.get(_AUTHORIZATION)
        opt_in = first.get(OPTIN_BYTES)
        if opt_in is None and not OPTIN_SPELLINGS.isdisjoint(first):  # the middleware's rule: any spelling
            opt_in = next(value for name, value in headers if name in OPTIN_SPELLINGS)
        if authorization is not None or (opt_in is not None and opt_in.find(b";") >= 0):  # else nothing presented
            self.presented = presented(authorization, opt_in)
        if self.forwarded or self.real or self.presented:
            kept = [*self.forwarded, *self.real, *self.presented]
            size += sum(map(len, kept)) + ITEM_BYTES * len(kept)
        self.size = size
        self.stage = 0
        self.status = 0
        self.user: UserInfo | None = None
        self.front_proxy: x509.Certificate | None = None  # the verified front proxy that asserted ``user``
        self.decision = Reason.NO_OPT_IN
        self.report = NO_REPORT
        self.audit_id = b""  # the response's Audit-Id header, when it sent one
        self.fate: asyncio.Future[bool] | None = None  # blocking-strict: set to whether its event was written

    def responded(self, status: int, headers: Iterable[tuple[bytes, bytes]]) -> None:
        """The response started: its status, how a report reached the caller, and its Audit-Id (kube's header:
        the event's auditID)."""
        self.status = status
        for index, (name, value) in enumerate(headers):
            if index == 0 and name == _REPORT_NAME:  # the middleware puts an attached report first
                self.report = IN_BAND
            elif name == _AUDIT_ID:
                self.audit_id = value[:64]
                break

    def charge_user(self) -> None:
        """Add the user's strings to ``size`` (the user is known once the request is answered)."""
        user = self.user
        if user is not None:
            size = len(user.name) + len(user.uid or "") + 2 * ITEM_BYTES
            if user.groups:
                size += sum(map(len, user.groups)) + ITEM_BYTES * len(user.groups)
            if user.extra:
                for key, values in user.extra.items():
                    size += len(key) + sum(map(len, values)) + ITEM_BYTES * (1 + len(values))
            self.size += size


def record_of(scope: Scope) -> AuditRecord | None:
    record = scope.get(AUDIT_KEY)
    return record if isinstance(record, AuditRecord) else None


def mark_streamed(scope: Scope) -> None:
    """For the out-of-band stream: this request's reports went out on it (annotated ``out-of-band``)."""
    record = record_of(scope)
    if record is not None:
        record.report = OUT_OF_BAND


_second = (-1, "")
_REASONS = {reason: reason.value for reason in Reason}  # an Enum's ``value`` is a descriptor call: a dict is cheaper
_NONE: list[str] = []
_quote: Callable[[str], str] = json.encoder.encode_basestring  # type: ignore[attr-defined]  # JSON string, UTF-8


def _timestamp(ns: int) -> str:
    """metav1.MicroTime: RFC 3339, microseconds, UTC (the seconds part formatted once per second)."""
    global _second
    seconds = ns // 1_000_000_000
    if _second[0] != seconds:
        _second = (seconds, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)))
    return f"{_second[1]}.{ns // 1000 % 1_000_000:06d}Z"


_PROXY_NAMES: dict[int, tuple[x509.Certificate, str]] = {}


def _proxy_name(certificate: x509.Certificate) -> str:
    """The front proxy's CN as kube reads it, parsed once per certificate object (the server keeps one object
    per presented chain, and parsing or even hashing a certificate costs more than the rest of an event)."""
    known = _PROXY_NAMES.get(id(certificate))
    if known is None or known[0] is not certificate:
        if len(_PROXY_NAMES) >= 64:
            _PROXY_NAMES.clear()
        known = _PROXY_NAMES[id(certificate)] = (certificate, common_name(certificate) or "")
    return known[1]


_UUID = re.compile(rb"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _response_id(value: bytes) -> str | None:
    return value.decode() if _UUID.fullmatch(value) else None


def _audit_id() -> str:
    """A random (version 4) UUID, as kube's auditID."""
    raw = bytearray(os.urandom(16))
    raw[6], raw[8] = raw[6] & 0x0F | 0x40, raw[8] & 0x3F | 0x80
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


@functools.lru_cache(maxsize=256)
def _ip(text: str) -> str | None:
    try:
        return str(ipaddress.ip_address(text.strip()))
    except ValueError:
        return None


def _source_ips(forwarded: list[str], real: list[str], remote: str | None) -> list[str]:
    """kube's ``utilnet.SourceIPs``: X-Forwarded-For, X-Real-Ip when not listed, then the peer when it is not the
    last one listed; anything that is not an IP address is dropped (so no client text gets through)."""
    if not forwarded and not real:  # the common case: the peer alone
        peer = _ip(remote or "")
        return [peer] if peer else []
    ips = [ip for ip in map(_ip, forwarded) if ip]
    for text in real[:1]:
        ip = _ip(text)
        if ip and ip not in ips:
            ips.append(ip)
    peer = _ip(remote or "")
    if peer and (not ips or ips[-1] != peer):
        ips.append(peer)
    return ips


def _strings(values: Iterable[str], redact: Callable[[str], str]) -> str:
    return ",".join(map(_quote, map(redact, values)))


def _user(user: UserInfo | None, redact: Callable[[str], str]) -> str:
    """authentication/v1 UserInfo as JSON text (``{}`` when the request authenticated as no one)."""
    if user is None:
        return "{}"
    parts = [f'"username":{_quote(redact(user.name))}']
    if user.uid:
        parts.append(f'"uid":{_quote(redact(user.uid))}')
    if user.groups:
        parts.append(f'"groups":[{_strings(user.groups, redact)}]')
    if user.extra:
        extra = ",".join(f"{_quote(redact(k))}:[{_strings(vs, redact)}]" for k, vs in user.extra.items())
        parts.append(f'"extra":{{{extra}}}')
    return "{" + ",".join(parts) + "}"


def line(record: AuditRecord, known: Redactor | Iterable[str] = (), audit_id: str | None = None) -> str:
    """The ``audit.k8s.io/v1`` Event of one answered request as one JSON line (no newline), its fields in the
    order of kube's struct; written directly, every string through json's own escaping (a third of the cost of
    building a dict and encoding it) and through the redactor. Pure but for a fresh auditID when neither
    ``audit_id`` nor the response gives one."""
    redactor = known if isinstance(known, Redactor) else Redactor(known)
    given = record.presented
    redact: Callable[[str], str] = (lambda text: redactor(text, given)) if given else redactor

    uri = record.path.decode("latin-1") + ("?" + record.query.decode("latin-1") if record.query else "")
    if record.forwarded or record.real:
        forwarded = [ip for value in record.forwarded for ip in value.decode("latin-1").split(",")]
        ips = _source_ips(forwarded, [v.decode("latin-1") for v in record.real], record.client)
    else:
        ips = _source_ips(_NONE, _NONE, record.client)
    annotations = f'"{REASON}":"{_REASONS[record.decision]}","{REPORT_ANNOTATION}":"{record.report}"'
    if record.front_proxy is not None and record.user is not None and record.user.name != ANONYMOUS:
        annotations += f',"{FRONT_PROXY}":{_quote(redact(_proxy_name(record.front_proxy)))}'
    agent_field = ""
    if record.agent is not None:
        agent = redactor.view(record.agent.decode("latin-1"), given).encode("latin-1").decode("utf-8", "replace")
        agent_field = f',"userAgent":{_quote(agent)}'
    identifier = audit_id or _response_id(record.audit_id) or _audit_id()
    return (
        f'{{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":{_quote(identifier)},'
        f'"stage":"ResponseComplete","requestURI":{_quote(redactor.view(uri, given))},'
        f'"verb":{_quote(record.method.lower())},"user":{_user(record.user, redact)},'
        f'"sourceIPs":[{",".join(map(_quote, ips))}]{agent_field},'
        f'"responseStatus":{{"metadata":{{}},"code":{int(record.status)}}},'
        f'"requestReceivedTimestamp":"{_timestamp(record.received)}",'
        f'"stageTimestamp":"{_timestamp(record.stage or record.received)}","annotations":{{{annotations}}}}}'
    )


def event(record: AuditRecord, known: Redactor | Iterable[str] = (), audit_id: str | None = None) -> dict[str, Any]:
    """The Event as data (``line`` parsed: one definition of what is written)."""
    result: dict[str, Any] = json.loads(line(record, known, audit_id))
    return result
