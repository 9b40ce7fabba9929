"""Every credential file of ``serve``, read through one table: start-up (``load``) and reload (``Source.read``)
take the same path per kind, and the TLS context's trust comes from the same parsed material. Nothing outside
this package opens a credential file.

The rules that span files (a CA shared between bundles needs allowed names) are checked once, in ``check``, on
every new Material, at start-up and on reload alike."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from secure_orca import credential_flags as flags
from secure_orca.authn import tokenfile
from secure_orca.authn.user import UserInfo
from secure_orca.credentials import kinds
from secure_orca.credentials.files import FileContent, read_credential
from secure_orca.credentials.kinds import KeyPair
from secure_orca.errors import CredentialError
from secure_orca.x509.chainverifier import shares_ca


@dataclass(frozen=True)
class CredentialFiles:
    """The credential files named on the command line (None where a flag was not given or its mode is off), and
    the names given inline."""

    cert: Path
    key: Path
    client_ca: Path | None = None
    requestheader_ca: Path | None = None
    allowed_names_file: Path | None = None
    secret_file: Path | None = None
    load_reader_ca: Path | None = None
    token_file: Path | None = None
    proxy_cert: Path | None = None
    proxy_key: Path | None = None
    allowed_names: tuple[str, ...] = ()  # --requestheader-allowed-names
    load_reader_names: tuple[str, ...] = ()  # --endpoint-load-metrics-allowed-names


@dataclass(frozen=True)
class Material:
    """The parsed content of every credential file in force; a reload replaces one field at a time."""

    serving: KeyPair
    client_cas: tuple[x509.Certificate, ...] = ()
    requestheader_cas: tuple[x509.Certificate, ...] = ()
    allowed_names: tuple[str, ...] = ()
    secrets: tuple[str, ...] = ()
    reader_cas: tuple[x509.Certificate, ...] = ()
    reader_names: tuple[str, ...] = ()
    tokens: Mapping[str, UserInfo] | None = None
    proxy_client: KeyPair | None = None

    def anchors(self) -> bytes:
        """DER of every CA the handshake trusts: exactly the certificates the authenticators read."""
        cas = (*self.client_cas, *self.requestheader_cas, *self.reader_cas)
        return b"".join(ca.public_bytes(serialization.Encoding.DER) for ca in cas)


@dataclass(frozen=True)
class Source:
    """One credential flag: its files, how they are read, the Material field they fill, and whether a change on
    disk is applied live (kube reloads certificates and CAs; the token file is read once, as in kube)."""

    flag: str
    field: str
    paths: tuple[Path, ...]
    file_flags: tuple[str, ...]
    parse: Callable[[list[FileContent]], Any]
    live: bool = True

    def read(self) -> list[FileContent]:
        """The files' bytes now (CredentialError if one cannot be read); ``parse`` makes them a value."""
        return [read_credential(path, flag) for path, flag in zip(self.paths, self.file_flags, strict=True)]


def fingerprint(contents: list[FileContent]) -> Hashable:
    """What decides that a source changed: identity, mode, owner and content of each of its files."""
    return tuple(content.fingerprint for content in contents)


def _one(kind: Callable[[FileContent, str], Any], flag: str) -> Callable[[list[FileContent]], Any]:
    return lambda contents: kind(contents[0], flag)


def _pair(cert_flag: str, key_flag: str) -> Callable[[list[FileContent]], KeyPair]:
    return lambda contents: kinds.key_pair(contents[0], contents[1], cert_flag, key_flag)


def _tokens(content: FileContent, flag: str) -> Mapping[str, UserInfo]:
    return tokenfile.parse(content.private(flag), content.path)


def sources(files: CredentialFiles) -> list[Source]:
    """The sources the flags name, serving pair first: the table of every credential kind."""
    f = files
    single = [
        (flags.CLIENT_CA, "client_cas", f.client_ca, kinds.ca_bundle, True),
        (flags.REQUESTHEADER_CA, "requestheader_cas", f.requestheader_ca, kinds.ca_bundle, True),
        (flags.ALLOWED_NAMES_FILE, "allowed_names", f.allowed_names_file, kinds.allowed_names, True),
        (flags.SECRET, "secrets", f.secret_file, kinds.secrets, True),
        (flags.LOAD_READER_CA, "reader_cas", f.load_reader_ca, kinds.ca_bundle, True),
        (flags.TOKENS, "tokens", f.token_file, _tokens, False),
    ]
    found = [
        Source(
            flags.TLS_CERT,
            "serving",
            (f.cert, f.key),
            (flags.TLS_CERT, flags.TLS_KEY),
            _pair(flags.TLS_CERT, flags.TLS_KEY),
        )
    ]
    found += [
        Source(flag, name, (path,), (flag,), _one(kind, flag), live) for flag, name, path, kind, live in single if path
    ]
    if f.proxy_cert is not None and f.proxy_key is not None:
        pair = (flags.PROXY_CERT, flags.PROXY_KEY)
        found.append(Source(flags.PROXY_CERT, "proxy_client", (f.proxy_cert, f.proxy_key), pair, _pair(*pair), False))
    return found


def load(files: CredentialFiles) -> tuple[Material, dict[str, Hashable]]:
    """Read every credential file once (start-up): the Material and each source's fingerprint, which primes
    the reloader. The first unreadable or invalid file, or a rule across files, raises CredentialError."""
    material, contents = load_contents(files)
    return material, {flag: fingerprint(read) for flag, read in contents.items()}


def load_contents(files: CredentialFiles) -> tuple[Material, dict[str, list[FileContent]]]:
    """``load``, keeping each source's bytes as read (what ``serve --workers`` shares between its processes)."""
    values: dict[str, Any] = {"allowed_names": files.allowed_names, "reader_names": files.load_reader_names}
    read: dict[str, list[FileContent]] = {}
    for source in sources(files):
        contents = source.read()
        read[source.flag], values[source.field] = contents, source.parse(contents)
    material = Material(**values)
    check(material)
    return material, read


def with_value(material: Material, source: Source, value: Any) -> Material:
    """``material`` with one source's new content, checked as a whole (``check``)."""
    changed = replace(material, **{source.field: value})
    check(changed)
    return changed


def check(material: Material) -> None:
    """The rules across files, as kube-apiserver states them: a CA in two bundles makes any certificate it
    signs act for both, so names must then narrow the trust."""
    cas = material.requestheader_cas
    if cas and not material.allowed_names and shares_ca(list(material.client_cas), list(cas)):
        raise CredentialError(
            flags.ALLOWED_NAMES,
            f"must not be empty when {flags.CLIENT_CA} and {flags.REQUESTHEADER_CA} share a certificate "
            "(any client certificate could act as the proxy)",
        )
    if material.reader_cas and not material.reader_names:
        others = [*material.client_cas, *material.requestheader_cas]
        if shares_ca(others, list(material.reader_cas)):
            raise CredentialError(
                flags.LOAD_READER_NAMES,
                f"must not be empty when {flags.LOAD_READER_CA} shares a certificate with {flags.CLIENT_CA} or "
                f"{flags.REQUESTHEADER_CA}",
            )


def read_secrets(path: Path, flag: str, private: bool = True) -> tuple[str, ...]:
    """A secrets file (one per line) read by a command, with the server's rules."""
    return kinds.secrets(read_credential(path, flag), flag, private)


def read_ca_bundle(path: Path, flag: str) -> tuple[x509.Certificate, ...]:
    """A CA bundle read by a command, as kube reads one."""
    return kinds.ca_bundle(read_credential(path, flag), flag)


def read_key_pair(cert: Path, key: Path, cert_flag: str, key_flag: str) -> KeyPair:
    """A certificate and its key, checked to load together in TLS (the one key-pair check)."""
    return kinds.key_pair(read_credential(cert, cert_flag), read_credential(key, key_flag), cert_flag, key_flag)


def read_first_line(path: Path, flag: str) -> str | None:
    """The first non-blank line of a small text file (a probe's guessed secret), or None."""
    lines = read_credential(path, flag).data.decode("ascii", "replace").splitlines()
    return next((line.strip() for line in lines if line.strip()), None)
