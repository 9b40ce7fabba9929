"""Live credential rotation, as kube-apiserver's dynamic certificates do: every ``interval`` the credential
files are read and compared with what is in force; a file whose content changed is validated and swapped in,
without a restart and without touching established connections. A file that became empty, unreadable or
invalid is refused with a log line, and the last good content stays in force.

What a reload changes:
- serving certificate and key: new handshakes present the new pair;
- requestheader CA bundle, allowed names file, secret file: a new Authority replaces the old one at once.
  Authorization is decided per request, so a removed CA or secret stops granting reports on every
  connection at its next request, established HTTP/2 connections included;
- client CA bundle: new CAs are added to the handshake's trust store. OpenSSL cannot remove one from a live
  store, so a removed client CA still completes handshakes (it never grants reports: only the requestheader
  CA, checked per request, does).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from secure_orca.authz.frontproxy import FrontProxyVerifier, shares_ca
from secure_orca.authz.policy import Policy
from secure_orca.authz.secrets import SecretSet
from secure_orca.authz.trust import check_key_pair, load_cert_bundle, load_secrets, read_file
from secure_orca.errors import CredentialError
from secure_orca.server.middleware import Authority, LoadReportMiddleware

log = logging.getLogger("secure_orca.reload")


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


def read_allowed_names(path: Path) -> list[str]:
    """One Common Name per line (blank lines and ``#`` comments skipped)."""
    text = read_file(path, "--requestheader-allowed-names-file").decode("utf-8", "replace")
    return [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]


class Reloader:
    """Polls the credential files and swaps in valid new content."""

    def __init__(
        self,
        files: TrustFiles,
        context: ssl.SSLContext,
        middleware: LoadReportMiddleware,
        modes: frozenset[str],
        on_reload: Callable[[str, bool], None] | None = None,
        on_client_ca: Callable[[list[x509.Certificate]], None] | None = None,
    ) -> None:
        self.files = files
        self.context = context
        self.middleware = middleware
        self.modes = modes
        self.on_reload = on_reload
        self.on_client_ca = on_client_ca  # the x509 authenticator's trust follows the handshake's
        self._seen: dict[str, bytes] = {}
        for flag, paths in self._groups().items():
            self._seen[flag] = self._fingerprint(paths)

    def _groups(self) -> dict[str, list[Path]]:
        f = self.files
        groups: dict[str, list[Path]] = {"--tls-cert-file": [f.cert, f.key]}
        if f.client_ca:
            groups["--client-ca-file"] = [f.client_ca]
        trust = [p for p in (f.requestheader_ca, f.allowed_names_file, f.secret_file) if p]
        if trust:
            groups["--requestheader-client-ca-file"] = trust
        return groups

    @staticmethod
    def _fingerprint(paths: list[Path]) -> bytes:
        digest = hashlib.sha256()
        for path in paths:
            try:
                digest.update(path.read_bytes())
            except OSError as error:
                digest.update(f"unreadable:{error.errno}".encode())
            digest.update(b"\0")
        return digest.digest()

    def check(self) -> list[str]:
        """Reload every group whose files changed; returns the flags reloaded successfully."""
        reloaded = []
        for flag, paths in self._groups().items():
            fingerprint = self._fingerprint(paths)
            if fingerprint == self._seen.get(flag):
                continue
            self._seen[flag] = fingerprint  # a bad file is reported once, not every poll
            try:
                self._apply(flag)
            except (CredentialError, ssl.SSLError, ValueError) as error:
                log.error("reload of %s refused, keeping the last good content: %s", flag, _one_line(error))
                self._report(flag, False)
            else:
                log.info("reloaded %s", flag)
                self._report(flag, True)
                reloaded.append(flag)
        return reloaded

    def _report(self, flag: str, ok: bool) -> None:
        if self.on_reload is not None:
            self.on_reload(flag, ok)

    def _trust_in_handshake(self, certs: list[x509.Certificate]) -> None:
        pem = "".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in certs)
        self.context.load_verify_locations(cadata=pem)

    def _apply(self, flag: str) -> None:
        f = self.files
        if flag == "--tls-cert-file":
            check_key_pair(f.cert, f.key)
            self.context.load_cert_chain(f.cert, f.key)
            return
        if flag == "--client-ca-file" and f.client_ca:
            client_cas = load_cert_bundle(f.client_ca, flag)
            self._trust_in_handshake(client_cas)
            if self.on_client_ca is not None:
                self.on_client_ca(client_cas)
            return
        verifier = None
        if f.requestheader_ca is not None:
            roots = load_cert_bundle(f.requestheader_ca, "--requestheader-client-ca-file")
            names = read_allowed_names(f.allowed_names_file) if f.allowed_names_file else f.allowed_names
            client_cas = load_cert_bundle(f.client_ca, "--client-ca-file") if f.client_ca else []
            if shares_ca(client_cas, roots) and not names:
                raise CredentialError(flag, "shares a CA with --client-ca-file while no allowed names are set")
            verifier = FrontProxyVerifier(roots, names)
            self._trust_in_handshake(roots)  # new requestheader CAs must complete handshakes too
        secrets = None
        if f.secret_file and "shared-secret" in self.modes:
            secrets = SecretSet(load_secrets(f.secret_file, "--endpoint-load-metrics-secret-file"))
        policy = Policy(self.middleware.authority.policy.modes, secrets)
        self.middleware.authority = Authority.build(policy, verifier)

    async def run(self, interval: float) -> None:
        """Poll forever (cancel to stop)."""
        while True:
            await asyncio.sleep(interval)
            self.check()


def _one_line(error: Exception) -> str:
    return str(error).splitlines()[0] if str(error) else type(error).__name__
