"""How each kind of credential file is read, one function per kind, as kube-apiserver reads it; every problem is
a CredentialError naming the flag and the check that failed, never the file's content."""

from __future__ import annotations

import contextlib
import os
import re
import ssl
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass

from cryptography import x509

from secure_orca.credentials.files import FileContent
from secure_orca.errors import CredentialError
from secure_orca.orca.optin import SECRET_CHARS
from secure_orca.x509.pem import ca_bundle as pem_ca_blocks

MIN_SECRET_LENGTH = 16
_SECRET = re.compile(f"{SECRET_CHARS}+")


def ca_bundle(content: FileContent, flag: str) -> tuple[x509.Certificate, ...]:
    """A CA bundle read as kube-apiserver reads one (client-go's cert.ParseCertsPEM over Go's pem.Decode): only
    "CERTIFICATE" blocks without headers count, and each must parse; none, or one that does not parse, is
    refused. The one reader of --client-ca-file, --requestheader-client-ca-file and the load-reader CA, at
    start-up, on reload and for the handshake's trust store alike."""
    if b"-----BEGIN CERTIFICATE-----" not in content.data:
        raise CredentialError(flag, f"{content.path}: holds no PEM certificate")
    try:
        blocks = pem_ca_blocks(content.data)
        return tuple(x509.load_der_x509_certificate(block) for block in blocks)
    except (ValueError, x509.InvalidVersion):
        raise CredentialError(flag, f"{content.path}: malformed PEM certificate") from None


def certificates(content: FileContent, flag: str) -> list[x509.Certificate]:
    """The certificates of a PEM file that OpenSSL will load itself (a serving or client certificate chain)."""
    if b"-----BEGIN CERTIFICATE-----" not in content.data:
        raise CredentialError(flag, f"{content.path}: holds no PEM certificate")
    try:
        return x509.load_pem_x509_certificates(content.data)
    except ValueError:
        raise CredentialError(flag, f"{content.path}: malformed PEM certificate") from None


def allowed_names(content: FileContent, flag: str) -> tuple[str, ...]:
    """One Common Name per line (blank lines and ``#`` comments skipped); a file naming no one is refused: an
    empty list would mean any certificate from the requestheader CA."""
    text = content.data.decode("utf-8", "replace")
    names = tuple(line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#"))
    if not names:
        raise CredentialError(flag, f"{content.path}: names no one (an empty list would allow any certificate)")
    return names


def secrets(content: FileContent, flag: str, private: bool = True) -> tuple[str, ...]:
    """One secret per line (blank lines and ``#`` comments skipped), each long enough and of allowed characters;
    a file that other users can read is refused unless ``private`` is False (a client's copy)."""
    try:
        text = (content.private(flag) if private else content.data).decode("ascii")
    except UnicodeDecodeError:
        raise CredentialError(flag, f"{content.path}: not ASCII text") from None
    found: list[str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        value = line.strip()
        if not value or value.startswith("#"):
            continue
        if not _SECRET.fullmatch(value):
            raise CredentialError(flag, f"{content.path}: line {number} has characters a secret cannot hold")
        if len(value) < MIN_SECRET_LENGTH:
            raise CredentialError(flag, f"{content.path}: line {number} is shorter than {MIN_SECRET_LENGTH} characters")
        found.append(value)
    if not found:
        raise CredentialError(flag, f"{content.path}: holds no secret")
    return tuple(found)


@dataclass(frozen=True)
class KeyPair:
    """A certificate chain and its private key, checked to load together; TLS loads exactly these bytes."""

    cert_pem: bytes
    key_pem: bytes

    def load_into(self, context: ssl.SSLContext) -> None:
        """Install the pair in ``context`` from memory (the file is never read a second time)."""
        with _in_memory(self.cert_pem) as cert, _in_memory(self.key_pem) as key:
            context.load_cert_chain(cert, key)


def key_pair(cert: FileContent, key: FileContent, cert_flag: str, key_flag: str) -> KeyPair:
    """Refuse a certificate or key that TLS cannot load, naming the flag at fault."""
    certificates(cert, cert_flag)
    if b"PRIVATE KEY-----" not in key.data:
        raise CredentialError(key_flag, f"{key.path}: holds no PEM private key")
    pair = KeyPair(cert.data, key.data)
    try:
        pair.load_into(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER))
    except ssl.SSLError as error:
        problem = "does not match the certificate" if "KEY_VALUES_MISMATCH" in str(error) else "malformed"
        raise CredentialError(key_flag, f"{key.path}: {problem}") from None
    return pair


@contextlib.contextmanager
def _in_memory(data: bytes) -> Iterator[str]:
    """A path OpenSSL can open that holds ``data``: an anonymous memory file on Linux, else a private temp file."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("secure-orca-credential", os.MFD_CLOEXEC)
        try:
            os.write(fd, data)
            yield f"/proc/self/fd/{fd}"
        finally:
            os.close(fd)
        return
    with tempfile.TemporaryDirectory() as directory:  # mode 0700
        path = os.path.join(directory, "credential.pem")
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as out:
            out.write(data)
        yield path
