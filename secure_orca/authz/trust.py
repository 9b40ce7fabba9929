"""Read the credential files named on the command line; every problem is a CredentialError naming the flag.

Errors say which file and which check failed, never the file's content.
"""

from __future__ import annotations

import hashlib
import os
import re
import ssl
import stat
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509

from secure_orca.errors import CredentialError
from secure_orca.orca.optin import SECRET_CHARS
from secure_orca.x509.pem import ca_bundle

MIN_SECRET_LENGTH = 16
MAX_CREDENTIAL_BYTES = 1 << 20  # far above any certificate bundle or secret list; bounds a reload's memory
_SECRET = re.compile(f"{SECRET_CHARS}+")


@dataclass(frozen=True)
class FileContent:
    """A credential file's bytes and the identity and mode of the very file they were read from."""

    data: bytes
    device: int
    inode: int
    mode: int
    owner: int

    @property
    def fingerprint(self) -> tuple[int, int, int, int, bytes]:
        """What a reload compares: identity, mode, owner and content."""
        return (self.device, self.inode, self.mode, self.owner, hashlib.sha256(self.data).digest())


def read_credential(path: Path, flag: str) -> FileContent:
    """Read a regular file of at most MAX_CREDENTIAL_BYTES. A FIFO, device or socket is refused without
    reading (opened non-blocking, checked with fstat on the open descriptor), so it cannot stall the reader."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise CredentialError(flag, f"{path}: no such file") from None
    except OSError as error:
        raise CredentialError(flag, f"{path}: cannot read ({error.strerror})") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise CredentialError(flag, f"{path}: is a directory")
        if not stat.S_ISREG(info.st_mode):
            raise CredentialError(flag, f"{path}: is not a regular file")
        if info.st_size > MAX_CREDENTIAL_BYTES:
            raise CredentialError(flag, f"{path}: larger than {MAX_CREDENTIAL_BYTES} bytes")
        chunks: list[bytes] = []
        size = 0
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
            size += len(chunk)
            if size > MAX_CREDENTIAL_BYTES:
                raise CredentialError(flag, f"{path}: larger than {MAX_CREDENTIAL_BYTES} bytes")
    except OSError as error:
        raise CredentialError(flag, f"{path}: cannot read ({error.strerror})") from None
    finally:
        os.close(fd)
    return FileContent(b"".join(chunks), info.st_dev, info.st_ino, stat.S_IMODE(info.st_mode), info.st_uid)


def read_file(path: Path, flag: str) -> bytes:
    """The bytes of a regular credential file (see ``read_credential``)."""
    return read_credential(path, flag).data


def parse_cert_bundle(data: bytes, flag: str, path: Path) -> list[x509.Certificate]:
    """All certificates of a PEM bundle; an empty or malformed bundle is refused."""
    if b"-----BEGIN CERTIFICATE-----" not in data:
        raise CredentialError(flag, f"{path}: holds no PEM certificate")
    try:
        return x509.load_pem_x509_certificates(data)
    except ValueError:
        raise CredentialError(flag, f"{path}: malformed PEM certificate") from None


def parse_ca_bundle(data: bytes, flag: str, path: Path) -> list[x509.Certificate]:
    """A CA bundle read as kube-apiserver reads one (client-go's cert.ParseCertsPEM): only "CERTIFICATE" blocks
    without headers count, and each must parse as Go parses it; none, or one that does not parse, is refused."""
    if b"-----BEGIN CERTIFICATE-----" not in data:
        raise CredentialError(flag, f"{path}: holds no PEM certificate")
    try:
        return [x509.load_der_x509_certificate(block) for block in ca_bundle(data)]
    except (ValueError, x509.InvalidVersion):
        raise CredentialError(flag, f"{path}: malformed PEM certificate") from None


def load_cert_bundle(path: Path, flag: str) -> list[x509.Certificate]:
    """A CA bundle file (--client-ca-file, --requestheader-client-ca-file)."""
    return parse_ca_bundle(read_file(path, flag), flag, path)


def parse_secrets(data: bytes, flag: str, path: Path) -> list[str]:
    """One secret per line (blank lines and ``#`` comments skipped), each long enough and of allowed characters."""
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        raise CredentialError(flag, f"{path}: not ASCII text") from None
    secrets: list[str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        value = line.strip()
        if not value or value.startswith("#"):
            continue
        if not _SECRET.fullmatch(value):
            raise CredentialError(flag, f"{path}: line {number} has characters a secret cannot hold")
        if len(value) < MIN_SECRET_LENGTH:
            raise CredentialError(flag, f"{path}: line {number} is shorter than {MIN_SECRET_LENGTH} characters")
        secrets.append(value)
    if not secrets:
        raise CredentialError(flag, f"{path}: holds no secret")
    return secrets


def private_data(content: FileContent, flag: str, path: Path) -> bytes:
    """The bytes of a file already read, refusing one that other users can read (mode of the same file)."""
    if content.mode & stat.S_IROTH:
        raise CredentialError(flag, f"{path}: is world-readable (mode {content.mode:04o}); chmod o-r it")
    return content.data


def check_secret_file(content: FileContent, flag: str, path: Path) -> list[str]:
    """The secrets of a file already read, refusing one that other users can read."""
    return parse_secrets(private_data(content, flag, path), flag, path)


def read_private_file(path: Path, flag: str) -> bytes:
    """Read a file of secrets (tokens, shared secrets), refusing one that other users can read."""
    return private_data(read_credential(path, flag), flag, path)


def load_secrets(path: Path, flag: str) -> list[str]:
    """Read a secret file, refusing one that other users can read."""
    return check_secret_file(read_credential(path, flag), flag, path)


def check_key_pair(
    cert_path: Path,
    key_path: Path,
    cert_flag: str = "--tls-cert-file",
    key_flag: str = "--tls-private-key-file",
) -> None:
    """Refuse a certificate or key that TLS cannot load (serving pair by default), naming the flag at fault."""
    cert_data = read_file(cert_path, cert_flag)
    parse_cert_bundle(cert_data, cert_flag, cert_path)
    key_data = read_file(key_path, key_flag)
    if b"PRIVATE KEY-----" not in key_data:
        raise CredentialError(key_flag, f"{key_path}: holds no PEM private key")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(cert_path, key_path)
    except ssl.SSLError as error:
        problem = "does not match the certificate" if "KEY_VALUES_MISMATCH" in str(error) else "malformed"
        raise CredentialError(key_flag, f"{key_path}: {problem}") from None
