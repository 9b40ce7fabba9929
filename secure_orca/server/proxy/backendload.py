"""A backend's own load report, for the entitled only (``--proxy PREFIX=URL;report=backend|merged``).

The load-report middleware, having granted a request, puts a ``Grant`` (the format its caller asked for) in the
scope under ``GRANT_KEY``; only then does the proxy ask the backend in its dialect (``orca.dialect``). The
backend's answer is read as Envoy reads it, re-encoded in the caller's format (or merged into the gateway's own
report) and handed to the middleware in the response-start message under ``REPORT_KEY``: a key no backend can
set, since every ORCA header a backend returns is stripped as before. The last report seen is kept with its
time for the out-of-band stream, which never serves one older than ``max_age`` as fresh; a route's
``load-poll`` (``server.proxy.poller``) feeds the same last report from the backend's load endpoint."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from secure_orca.orca import dialect
from secure_orca.orca.report import LoadReport
from secure_orca.server.sampler import Sampler

if TYPE_CHECKING:
    from secure_orca.server.options.backend import RouteSettings

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
        self.observe(report)
        if source == "merged":
            report = dialect.merged(self.sampler.report if self.sampler else None, report)
        if utilization:
            report = dialect.with_utilization(report, utilization)
        return dialect.encode(report, fmt, self.decimals)

    def observe(self, report: LoadReport) -> None:
        """A backend report seen now (in band, or by a poll)."""
        self.last, self.last_at = report, time.monotonic()

    def fresh(self, now: float | None = None) -> LoadReport | None:
        """The last backend report, or None once it is older than ``max_age`` (never served stale as fresh)."""
        now = time.monotonic() if now is None else now
        if self.last is None or now - self.last_at > self.max_age:
            return None
        return self.last


class Wanting(Protocol):
    def wanted(self) -> None: ...


class PollerSource(Protocol):
    def load_poller(self, period: float) -> Wanting | None: ...


class WithBackendLoad:
    """What the out-of-band stream reads as its sampler (``.report``): the gateway's latest report carrying the
    last backend report (seen in band, or polled) while it is fresh (``BackendReports.max_age``), else the
    gateway's alone; with the route's ``utilization-metric``, that backend metric as ``application_utilization``
    (as in band). Each read tells the ``poller`` (if any) that a stream wants a report. The same object is
    returned while nothing changes, so the stream serializes once per change."""

    def __init__(
        self, sampler: Sampler, backend: BackendReports, poller: Wanting | None = None, utilization: str = ""
    ) -> None:
        self.sampler = sampler
        self.backend = backend
        self.poller = poller
        self.utilization = utilization
        self._made: tuple[LoadReport | None, LoadReport | None, LoadReport | None] = (None, None, None)

    @classmethod
    def of(
        cls,
        sampler: Sampler,
        backend: BackendReports,
        proxy: PollerSource,
        routes: Sequence[RouteSettings],
        period: float,
    ) -> WithBackendLoad:
        """The stream's source for ``routes``: polled at ``period`` (the stream's floor) when a route has
        ``load-poll``; the utilization metric of the polled route, else of the first backend-sourced route."""
        carrying = [route for route in routes if route.report != "local"]
        polled = [route for route in carrying if route.load_poll]
        utilization = next((route.utilization_metric for route in polled or carrying), "")
        return cls(sampler, backend, proxy.load_poller(period) if polled else None, utilization)

    @property
    def report(self) -> LoadReport | None:
        if self.poller is not None:
            self.poller.wanted()
        local, carried = self.sampler.report, self.backend.fresh()
        if carried is None:
            return local
        made_local, made_carried, made = self._made
        if made_local is not local or made_carried is not carried:
            made = dialect.merged(local, carried)
            if self.utilization:
                made = dialect.with_utilization(made, self.utilization)
            self._made = (local, carried, made)
        return made
