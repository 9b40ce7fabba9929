"""Live credential rotation, as kube-apiserver's dynamic content controllers do
(kubernetes/apiserver 24a394e516bfda066d7e2221d7d92c052de27c54, pkg/server/dynamiccertificates): every file
is its own source, read and checked on its own, so a bad file never holds back a change to another.

Reading and parsing are the credential loader's (``secure_orca.credentials``): the same function per kind as at
start-up, so a file means the same before and after a reload. Every ``interval`` each live source is read off
the event loop (a worker thread, bounded by ``read_timeout``). A source whose identity (device, inode), mode,
owner or content changed is parsed, checked with the material in force (``loader.with_value``) and swapped in,
without a restart and without touching established connections. A file that became empty, unreadable, not
regular or invalid is refused with one log line naming its own flag and a ``failure`` count, the last good
content stays in force, and the file is retried at every poll until it is good (a refusal is logged again only
when it changes).

What a reload changes:
- serving certificate and key: new handshakes present the new pair (the bytes that were checked);
- requestheader CA bundle, allowed names file, secret file, load-reader CA: a new Authority replaces the old one
  at once. Authorization is decided per request, so a removed CA or secret stops granting reports on every
  connection at its next request, established HTTP/2 connections included;
- client CA bundle: the x509 authenticator trusts exactly the new bundle; new CAs are added to the handshake's
  trust store (OpenSSL cannot remove one from a live store, so a removed CA still completes handshakes: the
  authenticators, checked per request, refuse it).

Where the bytes come from is the ``Reading`` in force: the files themselves (a single process, and the credential
reader of ``serve --workers``), or the material another process published (a worker of ``serve --workers``,
``secure_orca.workers.credentials``). Parsing, checking and installing are the same in every case.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import threading
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from secure_orca.credentials.files import FileContent
from secure_orca.credentials.loader import Material, Source, fingerprint, with_value
from secure_orca.errors import CredentialError
from secure_orca.server.trust import TrustService

log = logging.getLogger("secure_orca.reload")
READ_TIMEOUT = 5.0  # seconds one poll may spend reading files before the server says so


@dataclass
class Watched:
    """A live source; ``seen`` is the fingerprint last acted on, ``refusal`` the refusal last reported while the
    file is bad (None once it is good)."""

    source: Source
    seen: Hashable = None
    refusal: str | None = None
    contents: list[FileContent] | None = None  # the bytes in force, when known (what a publisher shares)


@dataclass
class Outcome:
    """What one poll found for one source: new content to install, or the reason it is refused."""

    watched: Watched
    fingerprint: Hashable
    value: Any = None
    error: str | None = None
    contents: list[FileContent] | None = None


class Reading:
    """Where a reloader's bytes come from: by default each source's files, at every poll."""

    CHECKS_PER_POLL: ClassVar[int] = 1  # how often per interval ``changed`` is asked
    RELOADED_LEVEL: ClassVar[int] = logging.INFO  # the level of the "reloaded" line

    def changed(self) -> bool:
        """Whether a poll may find something new (asked on the loop; the files: always)."""
        return True

    def begin(self) -> None:
        """Called once before each scan, in the scan's thread."""

    def read(self, source: Source) -> list[FileContent]:
        """The bytes of ``source``'s files now (CredentialError if one cannot be read)."""
        return source.read()

    def admit(self, watched: Watched, contents: list[FileContent]) -> None:
        """Raise CredentialError to refuse new ``contents`` for ``watched`` before anything is installed."""

    def applied(self, watched: Sequence[Watched], reloaded: list[str]) -> None:
        """After each poll's installs (``reloaded``: the flags swapped in, maybe none)."""


FILES = Reading()


class Reloader:
    """Polls every live credential source independently and swaps in valid new content."""

    def __init__(
        self,
        sources: Sequence[Source],
        material: Material,
        seen: dict[str, Hashable],
        context: ssl.SSLContext,
        trust: TrustService,
        on_reload: Callable[[str, bool], None] | None = None,
        read_timeout: float = READ_TIMEOUT,
        contents: dict[str, list[FileContent]] | None = None,
    ) -> None:
        """Primed from the loader's first result: ``material`` is in force, ``seen`` its files' fingerprints
        (``contents`` their bytes, when kept); ``trust`` receives every new Authority and client-CA trust."""
        self.context = context
        self.trust = trust
        self.on_reload = on_reload
        self.read_timeout = read_timeout
        self.watched = [
            Watched(source, seen.get(source.flag), contents=(contents or {}).get(source.flag))
            for source in sources
            if source.live
        ]
        self.reading = FILES
        self.material = material
        self._reading: asyncio.Future[list[Outcome]] | None = None
        self._stalled = False

    def read_through(self, reading: Reading, on_reload: Callable[[str, bool], None] | None) -> None:
        """Read the sources through ``reading`` from now on (``serve --workers``: the credential region, in
        workers.credentials), telling ``on_reload`` of each reload."""
        self.reading, self.on_reload = reading, on_reload

    # --- reading and parsing: runs in a worker thread, touches nothing the event loop uses ---

    def _read(self, watched: Watched) -> Outcome | None:
        try:
            contents = self.reading.read(watched.source)
        except CredentialError as error:
            return Outcome(watched, ("refused", str(error)), error=_one_line(error))
        now = fingerprint(contents)
        if now == watched.seen and watched.refusal is None:
            if watched.contents is None:
                watched.contents = contents  # the same bytes as those in force: now known
            return None  # unchanged and in force
        try:
            return Outcome(watched, now, watched.source.parse(contents), contents=contents)
        except (CredentialError, ssl.SSLError, ValueError) as error:
            return Outcome(watched, now, error=_one_line(error))

    def scan(self) -> list[Outcome]:
        """Read every source; the outcomes of those that changed or are still refused."""
        self.reading.begin()
        return [outcome for watched in self.watched if (outcome := self._read(watched)) is not None]

    # --- installing: runs on the event loop ---

    def _trust_in_handshake(self, certs: Sequence[x509.Certificate]) -> None:
        self.context.load_verify_locations(cadata=b"".join(c.public_bytes(serialization.Encoding.DER) for c in certs))

    def _install(self, source: Source, value: Any) -> None:
        material = with_value(self.material, source, value)  # the rules across files, checked whole
        if source.field == "serving":
            material.serving.load_into(self.context)
        elif source.field == "client_cas":
            self._trust_in_handshake(material.client_cas)
            self.trust.trust_clients(material.client_cas)  # the x509 authenticator's trust follows the handshake's
        else:
            if source.field in ("requestheader_cas", "reader_cas"):
                self._trust_in_handshake(value)  # new CAs must complete handshakes too
            self.trust.reload(material)
        self.material = material

    def apply(self, outcomes: list[Outcome]) -> list[str]:
        """Install what is valid, report what is refused; returns the flags reloaded."""
        reloaded = []
        for outcome in outcomes:
            watched, error = outcome.watched, outcome.error
            flag = watched.source.flag
            if error is None:
                try:
                    self.reading.admit(watched, outcome.contents or [])
                    self._install(watched.source, outcome.value)
                except (CredentialError, ssl.SSLError, ValueError) as refused:
                    error = _one_line(refused)
            if error is not None:
                if error != watched.refusal or outcome.fingerprint != watched.seen:
                    log.error("reload of %s refused, keeping the last good content: %s", flag, error)
                    self._report(flag, False)
                watched.refusal = error
            else:
                log.log(self.reading.RELOADED_LEVEL, "reloaded %s", flag)
                self._report(flag, True)
                watched.refusal = None
                watched.contents = outcome.contents
                reloaded.append(flag)
            watched.seen = outcome.fingerprint
        self.reading.applied(self.watched, reloaded)
        return reloaded

    def check(self) -> list[str]:
        """One poll in the calling thread (tests); ``run`` reads off the loop."""
        return self.apply(self.scan())

    def _report(self, flag: str, ok: bool) -> None:
        if self.on_reload is not None:
            self.on_reload(flag, ok)

    async def poll(self) -> list[str]:
        """One poll: read in a daemon thread (a stuck read never blocks the loop, nor the process's exit),
        wait at most ``read_timeout``, install on the loop. A read still running is waited for, not doubled."""
        loop = asyncio.get_running_loop()
        if self._reading is None:
            reading: asyncio.Future[list[Outcome]] = loop.create_future()

            def deliver(outcomes: list[Outcome] | BaseException) -> None:
                if reading.done():
                    return
                if isinstance(outcomes, BaseException):
                    reading.set_exception(outcomes)
                else:
                    reading.set_result(outcomes)

            def work() -> None:
                try:
                    result: list[Outcome] | BaseException = self.scan()
                except Exception as error:  # reported on the loop, never lost in the thread
                    result = error
                with contextlib.suppress(RuntimeError):  # the loop closed meanwhile (shutdown): nobody waits
                    loop.call_soon_threadsafe(deliver, result)

            threading.Thread(target=work, name="credential-reload", daemon=True).start()
            self._reading = reading
        try:
            outcomes = await asyncio.wait_for(asyncio.shield(self._reading), self.read_timeout)
        except TimeoutError:
            if not self._stalled:
                log.error("reading the credential files takes over %gs; the last good content stays", self.read_timeout)
                self._stalled = True
            return []
        finally:
            if self._reading is not None and self._reading.done():
                self._reading = None
        self._stalled = False
        return self.apply(outcomes)

    async def run(self, interval: float) -> None:
        """Poll forever (cancel to stop)."""
        checks = self.reading.CHECKS_PER_POLL
        while True:
            await asyncio.sleep(interval / checks)
            if not self.reading.changed():
                continue
            try:
                await self.poll()
            except Exception as error:  # the reloader must outlive any surprise; the server keeps serving
                log.error("credential reload failed: %s", type(error).__name__)


def _one_line(error: Exception) -> str:
    return str(error).splitlines()[0] if str(error) else type(error).__name__
