"""The out-of-band stream's poll of a backend's load endpoint (``--proxy ...;load-poll=vllm-metrics|sglang-loads``):
a thin shell around ``orca.polled``.

One poll per period for the whole server, whatever the number of open streams: a stream that wants a report
only marks the poller wanted (``wanted``); one task polls every ``period`` while anyone wanted a report within
``idle_after``, then stops until wanted again. A poll answers within ``timeout`` with status 200 and a body of at
most ``orca.polled.MAX_BODY`` that parses, or it failed: a failed poll leaves the last report as it was, so it
ages out of ``BackendReports.max_age`` and is never served as fresh (one warning when polls start failing, one
line when they answer again). The poll goes through the route's own pool
(its TLS, its client certificate) and carries no client's header."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from secure_orca.orca import polled
from secure_orca.orca.report import OrcaFormatError
from secure_orca.server.proxy.backendload import BackendReports
from secure_orca.server.proxy.upstream import UpstreamError, UpstreamPool

log = logging.getLogger("secure_orca.proxy")
ACCEPT = {polled.VLLM_METRICS: b"text/plain", polled.SGLANG_LOADS: b"application/json"}


class LoadPoller:
    """Polls ``source`` (an ``orca.polled.PATHS`` key) through ``pool`` into ``reports``."""

    def __init__(
        self,
        pool: UpstreamPool,
        source: str,
        reports: BackendReports,
        period: float,
        timeout: float,
        on_poll: Callable[[bool], None] | None = None,
    ) -> None:
        self.pool = pool
        self.source = source
        self.target = polled.PATHS[source].encode()
        self.reports = reports
        self.period = period
        self.timeout = timeout
        self.on_poll = on_poll  # told whether each poll gave a report (the route's metrics)
        self.idle_after = max(reports.max_age, 2 * period)  # no stream asked this long: stop polling
        self.polls = self.failures = 0
        self.failing = False
        self._wanted_at = 0.0
        self._task: asyncio.Task[None] | None = None

    def wanted(self) -> None:
        """A stream is about to send a report: keep polling (start if stopped). Never waits."""
        loop = asyncio.get_running_loop()
        self._wanted_at = loop.time()
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._run())

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while loop.time() - self._wanted_at <= self.idle_after:
            started = loop.time()
            await self.poll()
            await asyncio.sleep(max(0.0, started + self.period - loop.time()))

    async def poll(self) -> bool:
        """One poll; whether it gave a report (which ``reports`` then holds, stamped now)."""
        self.polls += 1
        try:
            async with asyncio.timeout(self.timeout):
                body = await self._fetch()
            report = polled.parse(self.source, body)
        except (TimeoutError, UpstreamError, OrcaFormatError) as error:
            self.failures += 1
            if not self.failing:  # one line when polls start failing, not one per period
                log.warning("load poll of %s failed: %s", self.target.decode(), type(error).__name__)
            self.failing = True
            self._told(False)
            return False
        if self.failing:
            log.info("load poll of %s answers again", self.target.decode())
        self.failing = False
        self.reports.observe(report)
        self._told(True)
        return True

    def _told(self, ok: bool) -> None:
        if self.on_poll is not None:
            self.on_poll(ok)

    async def _fetch(self) -> bytes:
        response = await self.pool.request(b"GET", self.target, [(b"accept", ACCEPT[self.source])], None)
        try:
            if response.status != 200:
                raise OrcaFormatError(f"status {response.status}")
            body = bytearray()
            async for chunk in response.chunks():
                body += chunk
                if len(body) > polled.MAX_BODY:
                    raise OrcaFormatError("answer longer than the gateway reads")
            return bytes(body)
        finally:
            await response.aclose()

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
