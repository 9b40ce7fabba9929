"""Write a development PKI: a serving CA and server certificate (localhost, 127.0.0.1, ::1), a client CA with
a user certificate, a front-proxy CA with a CN-only ``front-proxy-client`` certificate (as kubeadm issues it), a
load-reader CA with a CN-only ``load-reader`` certificate (option 2b: reads load, asserts no identity),
and a random shared-secret file (mode 0600). Existing files are never overwritten without --force.

Beside it, for kubectl: a token file (``tokens.csv``, mode 0600, kube's CSV with one random token for ``jane``)
and a kubeconfig (mode 0600: it holds that token) with the contexts docs/authentication.md uses: ``developer``
(the user certificate, the current context), ``jane`` (her token) and ``intruder`` (a token no file holds).

For development and tests only: keys are written unencrypted.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import ipaddress
import os
import secrets
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

Key = ec.EllipticCurvePrivateKey
FRONT_PROXY_CN = "front-proxy-client"
USER_CN = "developer"
LOAD_READER_CN = "load-reader"  # option 2b: may read load reports, asserts no identity
# The Services `secure-orca deploy` generates (namespace secure-orca), so the dev PKI also serves in a cluster.
SERVICE_NAMES = ("secure-orca.secure-orca.svc", "secure-orca-lb.secure-orca.svc")


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


@dataclass(frozen=True)
class Issued:
    """A certificate with its private key."""

    cert: x509.Certificate
    key: Key

    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def key_pem(self) -> bytes:
        return self.key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )


def new_key() -> Key:
    return ec.generate_private_key(ec.SECP256R1())


def make_ca(common_name: str, days: int = 365) -> Issued:
    """A self-signed root CA."""
    key = new_key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(_now() - dt.timedelta(minutes=5))
        .not_valid_after(_now() + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .add_extension(ski, critical=False)
        .sign(key, hashes.SHA256())
    )
    return Issued(cert, key)


def issue(
    ca: Issued,
    common_name: str,
    *,
    dns: tuple[str, ...] = (),
    ips: tuple[str, ...] = (),
    eku: tuple[x509.ObjectIdentifier, ...] | None = (ExtendedKeyUsageOID.CLIENT_AUTH,),
    is_ca: bool = False,
    not_before: dt.datetime | None = None,
    not_after: dt.datetime | None = None,
    organization: str | None = None,
) -> Issued:
    """Issue a certificate from ``ca``. ``eku=None`` leaves the ExtendedKeyUsage extension out entirely."""
    key = new_key()
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attrs.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name(attrs))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before or _now() - dt.timedelta(minutes=5))
        .not_valid_after(not_after or _now() + dt.timedelta(days=365))
        .add_extension(x509.BasicConstraints(ca=is_ca, path_length=None), critical=True)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )
    if is_ca:
        usage = x509.KeyUsage(False, False, False, False, False, True, True, False, False)
    else:
        usage = x509.KeyUsage(True, False, False, False, False, False, False, False, False)
    builder = builder.add_extension(usage, critical=True)
    if eku is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage(list(eku)), critical=False)
    names: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
    names += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return Issued(builder.sign(ca.key, hashes.SHA256()), key)


def new_secret() -> str:
    """A random shared secret: 256 bits, URL-safe base64 (only characters the opt-in grammar allows)."""
    return secrets.token_urlsafe(32)


# File layout of the development PKI (names follow kubeadm where it has one).
FILES = {
    "ca": "ca.crt",
    "server": "apiserver.crt",
    "client_ca": "client-ca.crt",
    "user": "user.crt",
    "front_proxy_ca": "front-proxy-ca.crt",
    "front_proxy_client": "front-proxy-client.crt",
    "load_reader_ca": "load-reader-ca.crt",
    "load_reader_client": "load-reader-client.crt",
}
SECRET_FILE = "endpoint-load-metrics-secret"


def key_name(cert_name: str) -> str:
    return cert_name.removesuffix(".crt") + ".key"


@dataclass(frozen=True)
class DevPKI:
    """Paths of a development PKI directory."""

    root: Path

    def cert(self, role: str) -> Path:
        return self.root / FILES[role]

    def key(self, role: str) -> Path:
        return self.root / key_name(FILES[role])

    @property
    def secret(self) -> Path:
        return self.root / SECRET_FILE

    def all_paths(self) -> list[Path]:
        paths = [self.secret]
        for role in FILES:
            paths += [self.cert(role), self.key(role)]
        return paths

    def exists(self) -> bool:
        return all(p.exists() for p in self.all_paths())


def generate(root: Path, force: bool = False) -> DevPKI:
    """Create every file of the development PKI in ``root``; all-or-nothing, refusing to overwrite."""
    pki = DevPKI(root)
    existing = [p.name for p in pki.all_paths() if p.exists()]
    if existing and not force:
        raise FileExistsError(f"{root} already holds {', '.join(existing)} (use --force to replace)")
    ca = make_ca("secure-orca-ca")
    client_ca = make_ca("secure-orca-client-ca")
    fp_ca = make_ca("front-proxy-ca")
    lr_ca = make_ca("load-reader-ca")
    server_eku = (ExtendedKeyUsageOID.SERVER_AUTH,)
    issued = {
        "ca": ca,
        "server": issue(
            ca, "kube-apiserver", dns=("localhost", *SERVICE_NAMES), ips=("127.0.0.1", "::1"), eku=server_eku
        ),
        "client_ca": client_ca,
        "user": issue(client_ca, USER_CN, organization="system:developers"),
        "front_proxy_ca": fp_ca,
        "front_proxy_client": issue(fp_ca, FRONT_PROXY_CN),
        "load_reader_ca": lr_ca,
        "load_reader_client": issue(lr_ca, LOAD_READER_CN),
    }
    contents: dict[Path, tuple[bytes, int]] = {pki.secret: ((new_secret() + "\n").encode(), 0o600)}
    for role, item in issued.items():
        contents[pki.cert(role)] = (item.cert_pem(), 0o644)
        contents[pki.key(role)] = (item.key_pem(), 0o600)
    root.mkdir(parents=True, exist_ok=True)
    staged: dict[Path, str] = {}
    try:
        for path, (data, mode) in contents.items():
            # mkstemp: an unpredictable name opened with O_EXCL (never a planted file or symlink), mode 0600
            fd, tmp = tempfile.mkstemp(dir=root, prefix=f".{path.name}.", suffix=".tmp")
            staged[path] = tmp
            with os.fdopen(fd, "wb") as handle:
                os.fchmod(handle.fileno(), mode)
                handle.write(data)
        for path, tmp in staged.items():
            os.replace(tmp, path)
    finally:
        for tmp in staged.values():
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
    return pki


TOKENS_FILE = "tokens.csv"
KUBECONFIG_FILE = "kubeconfig"
DEV_TOKEN_USER = ("jane", "1001", '"ops,system:viewers"')
INTRUDER_TOKEN = "guessed-token"
DEFAULT_SERVER = "https://localhost:6443"


def _write_private(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data``, mode 0600 from the start (a fresh O_EXCL temporary file renamed over it)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), 0o600)
            handle.write(data)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def write_tokens(root: Path) -> tuple[Path, str]:
    """``tokens.csv``: one random token for ``jane`` (uid 1001, groups ops and system:viewers), mode 0600; the
    file and the token it holds."""
    path = root / TOKENS_FILE
    token = f"ops-token-{secrets.token_hex(16)}"
    _write_private(path, f"{token},{','.join(DEV_TOKEN_USER)}\n".encode())
    return path, token


def kubeconfig(root: Path, server: str = DEFAULT_SERVER, token: str | None = None) -> dict[str, object]:
    """The development kubeconfig: paths relative to ``root`` (kubectl resolves them against the kubeconfig's
    own directory); with ``token`` (the one ``write_tokens`` wrote), a ``jane`` context, and ``intruder`` with a
    guessed token."""
    pki = DevPKI(root)
    users: dict[str, dict[str, str]] = {
        "developer": {"client-certificate": FILES["user"], "client-key": pki.key("user").name},
    }
    if token is not None:
        users[DEV_TOKEN_USER[0]] = {"token": token}
        users["intruder"] = {"token": INTRUDER_TOKEN}
    cluster = {"server": server, "certificate-authority": FILES["ca"]}
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "secure-orca", "cluster": cluster}],
        "users": [{"name": name, "user": user} for name, user in users.items()],
        "contexts": [{"name": name, "context": {"cluster": "secure-orca", "user": name}} for name in users],
        "current-context": "developer",
    }


def write_kubeconfig(root: Path, server: str = DEFAULT_SERVER, token: str | None = None) -> Path:
    """``kubeconfig`` in ``root`` (JSON, which is YAML), mode 0600: it may hold a token."""
    import json

    path = root / KUBECONFIG_FILE
    _write_private(path, (json.dumps(kubeconfig(root, server, token), indent=2) + "\n").encode())
    return path
