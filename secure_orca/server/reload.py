"""Live credential rotation, as kube-apiserver's dynamic content controllers do
(kubernetes/apiserver 24a394e516bfda066d7e2221d7d92c052de27c54, pkg/server/dynamiccertificates): every file
is its own source, read and checked on its own, so a bad file never holds back a change to another.

Every ``interval`` each source is read off the event loop (a worker thread, bounded by ``read_timeout``; a
FIFO, device or socket in place of a file is refused without reading). A source whose identity (device,
inode), mode, owner or content changed is validated and swapped in, without a restart and without touching
established connections. A file that became empty, unreadable, not regular or invalid is refused with one
log line naming its own flag and a ``failure`` count, the last good content stays in force, and the file is
retried at every poll until it is good (a refusal is logged again only when it changes).

A reload never widens trust by accident: an allowed-names file with no name (empty or comments only) is
refused, since no names means any certificate from the requestheader CA.

What a reload changes:
- serving certificate and key: new handshakes present the new pair;
- requestheader CA bundle, allowed names file, secret file: a new Authority (built from the last good content
  of all three) replaces the old one at once. Authorization is decided per request, so a removed CA or secret
  stops granting reports on every connection at its next request, established HTTP/2 connections included;
- client CA bundle: new CAs are added to the handshake's trust store. OpenSSL cannot remove one from a live
  store, so a removed client CA still completes handshakes (it never grants reports: only the requestheader
  CA, checked per request, does).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import threading
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from secure_orca.authz.policy import Policy
from secure_orca.authz.secrets import SecretSet
from secure_orca.authz.trust import (
    FileContent,
    check_key_pair,
    check_secret_file,
    parse_cert_bundle,
    read_credential,
)
from secure_orca.errors import CredentialError
from secure_orca.server.middleware import Authority, LoadReportMiddleware
from secure_orca.x509.chainverifier import ChainVerifier as FrontProxyVerifier
from secure_orca.x509.chainverifier import shares_ca

log = logging.getLogger("secure_orca.reload")
READ_TIMEOUT = 5.0  # seconds one poll may spend reading files before the server says so

CERT = "--tls-cert-file"
CLIENT_CA = "--client-ca-file"
REQUESTHEADER_CA = "--requestheader-client-ca-file"
ALLOWED_NAMES = "--requestheader-allowed-names-file"
SECRET = "--endpoint-load-metrics-secret-file"
LOAD_READER_CA = "--endpoint-load-metrics-client-ca-file"


@dataclass
class TrustFiles:
    """The credential files named on the command line (None where a flag was not given)."""

    cert: Path
    key: Path
    client_ca: Path | None = None
    requestheader_ca: Path | None = None
    allowed_names_file: Path | None = None
    secret_file: Path | None = None
    allowed_names: list[str] = field(default_factory=list)  # from --requestheader-allowed-names
    load_reader_ca: Path | None = None
    load_reader_names: list[str] = field(default_factory=list)  # from --endpoint-load-metrics-allowed-names


def parse_allowed_names(data: bytes, path: Path) -> list[str]:
    """One Common Name per line (blank lines and ``#`` comments skipped); a file naming no one is refused:
    an empty list would mean any certificate from the requestheader CA."""
    text = data.decode("utf-8", "replace")
    names = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    if not names:
        raise CredentialError(ALLOWED_NAMES, f"{path}: names no one (an empty list would allow any certificate)")
    return names


def read_allowed_names(path: Path) -> list[str]:
    return parse_allowed_names(read_credential(path, ALLOWED_NAMES).data, path)


@dataclass(frozen=True)
class Material:
    """The last good content of every source that makes up the Authority and the handshake trust."""

    client_cas: list[x509.Certificate] = field(default_factory=list)
    roots: list[x509.Certificate] | None = None
    names: list[str] = field(default_factory=list)
    secrets: SecretSet | None = None
    reader_roots: list[x509.Certificate] | None = None


@dataclass
class Source:
    """One credential flag and its files; ``seen`` is the fingerprint last acted on, ``refusal`` the refusal
    last reported while the file is bad (None once it is good)."""

    flag: str
    paths: tuple[Path, ...]
    seen: Hashable = None
    refusal: str | None = None


@dataclass
class Outcome:
    """What one poll found for one source: new content to install, or the reason it is refused."""

    source: Source
    fingerprint: Hashable
    value: Any = None
    error: str | None = None


class Reloader:
    """Polls every credential source independently and swaps in valid new content."""

    def __init__(
        self,
        files: TrustFiles,
        context: ssl.SSLContext,
        middleware: LoadReportMiddleware,
        modes: frozenset[str],
        on_reload: Callable[[str, bool], None] | None = None,
        on_client_ca: Callable[[list[x509.Certificate]], None] | None = None,
        read_timeout: float = READ_TIMEOUT,
    ) -> None:
        self.files = files
        self.context = context
        self.middleware = middleware
        self.modes = modes
        self.on_reload = on_reload
        self.on_client_ca = on_client_ca  # the x509 authenticator's trust follows the handshake's
        self.read_timeout = read_timeout
        self.sources = self._sources()
        self.material = Material(names=list(files.allowed_names))
        for outcome in self.scan():  # prime: the content the server started with is in force
            outcome.source.seen = outcome.fingerprint
            if outcome.error is None and outcome.source.flag != CERT:
                self.material = self._with(outcome.source.flag, outcome.value)
        self._reading: asyncio.Future[list[Outcome]] | None = None
        self._stalled = False

    def _sources(self) -> list[Source]:
        f = self.files
        sources = [Source(CERT, (f.cert, f.key))]
        optional = [
            (CLIENT_CA, f.client_ca),
            (REQUESTHEADER_CA, f.requestheader_ca),
            (ALLOWED_NAMES, f.allowed_names_file),
            (SECRET, f.secret_file if "shared-secret" in self.modes else None),
            (LOAD_READER_CA, f.load_reader_ca if "load-reader" in self.modes else None),
        ]
        sources += [Source(flag, (path,)) for flag, path in optional if path is not None]
        return sources

    # --- reading and parsing: runs in a worker thread, touches nothing the event loop uses ---

    def _parse(self, flag: str, contents: list[FileContent], paths: tuple[Path, ...]) -> Any:
        if flag == CERT:
            cert, key = paths
            check_key_pair(cert, key)
            return None
        if flag in (CLIENT_CA, REQUESTHEADER_CA, LOAD_READER_CA):
            return parse_cert_bundle(contents[0].data, flag, paths[0])
        if flag == ALLOWED_NAMES:
            return parse_allowed_names(contents[0].data, paths[0])
        return SecretSet(check_secret_file(contents[0], flag, paths[0]))

    def _read(self, source: Source) -> Outcome | None:
        flags = ("--tls-cert-file", "--tls-private-key-file") if source.flag == CERT else (source.flag,)
        try:
            contents = [read_credential(path, flag) for path, flag in zip(source.paths, flags, strict=True)]
        except CredentialError as error:
            return Outcome(source, ("refused", str(error)), error=_one_line(error))
        fingerprint = tuple(content.fingerprint for content in contents)
        if fingerprint == source.seen and source.refusal is None:
            return None  # unchanged and in force
        try:
            return Outcome(source, fingerprint, self._parse(source.flag, contents, source.paths))
        except (CredentialError, ssl.SSLError, ValueError) as error:
            return Outcome(source, fingerprint, error=_one_line(error))

    def scan(self) -> list[Outcome]:
        """Read every source; the outcomes of those that changed or are still refused."""
        return [outcome for source in self.sources if (outcome := self._read(source)) is not None]

    # --- installing: runs on the event loop ---

    def _with(self, flag: str, value: Any) -> Material:
        m = self.material
        if flag == CLIENT_CA:
            return replace(m, client_cas=value)
        if flag == REQUESTHEADER_CA:
            return replace(m, roots=value)
        if flag == ALLOWED_NAMES:
            return replace(m, names=value)
        if flag == SECRET:
            return replace(m, secrets=value)
        if flag == LOAD_READER_CA:
            return replace(m, reader_roots=value)
        return m

    def _trust_in_handshake(self, certs: list[x509.Certificate]) -> None:
        pem = "".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in certs)
        self.context.load_verify_locations(cadata=pem)

    def _install(self, flag: str, value: Any) -> None:
        if flag == CERT:
            self.context.load_cert_chain(self.files.cert, self.files.key)
            return
        material = self._with(flag, value)
        if material.roots is not None and not material.names and shares_ca(material.client_cas, material.roots):
            raise CredentialError(flag, "a CA is in both CA bundles while no allowed names are set")
        readers = material.reader_roots
        others = material.client_cas + (material.roots or [])
        if readers and not self.files.load_reader_names and shares_ca(others, readers):
            raise CredentialError(flag, "the load-reader CA is also a client or requestheader CA and no names are set")
        if flag == CLIENT_CA:
            self._trust_in_handshake(material.client_cas)
            if self.on_client_ca is not None:
                self.on_client_ca(material.client_cas)
        else:
            verifier = FrontProxyVerifier(material.roots, material.names) if material.roots else None
            if flag == REQUESTHEADER_CA and material.roots:
                self._trust_in_handshake(material.roots)  # new requestheader CAs must complete handshakes too
            if flag == LOAD_READER_CA and readers:
                self._trust_in_handshake(readers)
            reader = FrontProxyVerifier(readers, self.files.load_reader_names) if readers else None
            policy = Policy(self.middleware.authority.policy.modes, material.secrets)
            self.middleware.authority = Authority.build(policy, verifier, reader)
        self.material = material

    def apply(self, outcomes: list[Outcome]) -> list[str]:
        """Install what is valid, report what is refused; returns the flags reloaded."""
        reloaded = []
        for outcome in outcomes:
            source, error = outcome.source, outcome.error
            if error is None:
                try:
                    self._install(source.flag, outcome.value)
                except (CredentialError, ssl.SSLError, ValueError) as refused:
                    error = _one_line(refused)
            if error is not None:
                if error != source.refusal or outcome.fingerprint != source.seen:
                    log.error("reload of %s refused, keeping the last good content: %s", source.flag, error)
                    self._report(source.flag, False)
                source.refusal = error
            else:
                log.info("reloaded %s", source.flag)
                self._report(source.flag, True)
                source.refusal = None
                reloaded.append(source.flag)
            source.seen = outcome.fingerprint
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
        while True:
            await asyncio.sleep(interval)
            try:
                await self.poll()
            except Exception as error:  # the reloader must outlive any surprise; the server keeps serving
                log.error("credential reload failed: %s", type(error).__name__)


def _one_line(error: Exception) -> str:
    return str(error).splitlines()[0] if str(error) else type(error).__name__
