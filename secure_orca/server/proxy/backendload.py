"""A backend's own load report, for the entitled only (``--proxy PREFIX=URL;report=backend|merged``).

The load-report middleware, having granted a request, puts a ``Grant`` (the format its caller asked for) in the
scope under ``GRANT_KEY``; only then does the proxy ask the backend in its dialect (``orca.dialect``). The
backend's answer is read as Envoy reads it, re-encoded in the caller's format (or merged into the gateway's own
report) and handed to the middleware in the response-start message under ``REPORT_KEY``: a key no backend can
set, since every ORCA header a backend returns is stripped as before. The last report seen is kept with its
time for the out-of-band stream, which never serves one older than ``max_age`` as fresh."""

from __future__ import annotations

import time
from dataclasses import dataclass

from secure_orca.orca import dialect
from secure_orca.orca.report import LoadReport
from secure_orca.server.sampler import Sampler

GRANT_KEY = "secure_orca.grant"  # scope key: the granted request's Grant (absent: not entitled)
REPORT_KEY = "secure_orca.report"  # http.response.start key: the report header the middleware attaches instead


@dataclass(frozen=True)
class Grant:
    """A request the policy granted a report, and the format its opt-in asked for (``TEXT``, ``JSON``, ``BIN``)."""

    format: str = "TEXT"


TEXT_GRANT = Grant()


class BackendReports:
    """Reads backends' reports for granted requests; keeps the last one and when it came (monotonic)."""

    def __init__(self, sampler: Sampler | None, decimals: int, max_age: float = 10.0) -> None:
        self.sampler = sampler
        self.decimals = decimals
        self.max_age = max_age
        self.last: LoadReport | None = None
        self.last_at = 0.0
        self.read = self.refused = 0

    def carried(
        self, source: str, fmt: str, headers: list[tuple[bytes, bytes]], utilization: str = ""
    ) -> tuple[bytes, bytes] | None:
        """The header an entitled caller gets for ``source`` (backend or merged) from the backend's response
        headers, or None when the backend sent no report Envoy would accept (the caller then gets none);
        ``utilization`` names the backend metric carried as ``application_utilization``."""
        report = dialect.backend_report(headers)
        if report is None:
            self.refused += 1
            return None
        self.read += 1
        self.last, self.last_at = report, time.monotonic()
        if source == "merged":
            report = dialect.merged(self.sampler.report if self.sampler else None, report)
        if utilization:
            report = dialect.with_utilization(report, utilization)
        return dialect.encode(report, fmt, self.decimals)

    def fresh(self, now: float | None = None) -> LoadReport | None:
        """The last backend report, or None once it is older than ``max_age`` (never served stale as fresh)."""
        now = time.monotonic() if now is None else now
        if self.last is None or now - self.last_at > self.max_age:
            return None
        return self.last


class WithBackendLoad:
    """What the out-of-band stream reads as its sampler (``.report``): the gateway's latest report carrying the
    last backend report seen in band while it is fresh (``BackendReports.max_age``), else the gateway's alone. The
    same object is returned while neither changes, so the stream serializes once per change."""

    def __init__(self, sampler: Sampler, backend: BackendReports) -> None:
        self.sampler = sampler
        self.backend = backend
        self._made: tuple[LoadReport | None, LoadReport | None, LoadReport | None] = (None, None, None)

    @property
    def report(self) -> LoadReport | None:
        local, carried = self.sampler.report, self.backend.fresh()
        if carried is None:
            return local
        made_local, made_carried, made = self._made
        if made_local is not local or made_carried is not carried:
            made = dialect.merged(local, carried)
            self._made = (local, carried, made)
        return made
