"""Mint a development PKI in memory: a serving CA and server certificate (localhost, 127.0.0.1, ::1), a client CA with
a user certificate, a front-proxy CA with a CN-only ``front-proxy-client`` certificate (as kubeadm issues it), a
load-reader CA with a CN-only ``load-reader`` certificate (option 2b: reads load, asserts no identity),
and a random shared-secret file (mode 0600).

Beside it, for kubectl: a token file (``tokens.csv``, mode 0600, kube's CSV with one random token for ``jane``)
and a kubeconfig (mode 0600: it holds that token) with the contexts docs/authentication.md uses: ``developer``
(the user certificate, the current context), ``jane`` (her token) and ``intruder`` (a token no file holds).

For development and tests only: keys are written unencrypted.

Pure: everything is minted in memory as a :class:`Blob` (bytes and a file mode, as trustme's ``Blob``);
``secure_orca.credentials.devpki`` is the one writer.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import secrets
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
TOKENS_FILE = "tokens.csv"
KUBECONFIG_FILE = "kubeconfig"
# Each leaf of the development PKI and the CA that issues it; a CA's Common Name.
ISSUER = {
    "server": "ca",
    "user": "client_ca",
    "front_proxy_client": "front_proxy_ca",
    "load_reader_client": "load_reader_ca",
}
CA_CN = {
    "ca": "secure-orca-ca",
    "client_ca": "secure-orca-client-ca",
    "front_proxy_ca": "front-proxy-ca",
    "load_reader_ca": "load-reader-ca",
}


@dataclass(frozen=True)
class Blob:
    """A file's content minted in memory and the mode it is written with (credentials.devpki writes it)."""

    data: bytes
    mode: int = 0o600


@dataclass(frozen=True)
class ClientIdentity:
    """A client credential the development PKI makes: who it is, and what the server makes of it."""

    role: str  # FILES key of its certificate ("" for the token)
    name: str  # the certificate's Common Name, or the token's user
    issuer: str  # the CA (or file) that vouches for it
    use: str


CLIENT_IDENTITIES = (
    ClientIdentity("user", USER_CN, "client-ca.crt", "a user (O=system:developers): kubeconfig context developer"),
    ClientIdentity(
        "front_proxy_client", FRONT_PROXY_CN, "front-proxy-ca.crt", "option 2: the front proxy (asserts identities)"
    ),
    ClientIdentity(
        "load_reader_client", LOAD_READER_CN, "load-reader-ca.crt", "option 2b: reads load, asserts no identity"
    ),
    ClientIdentity("", "jane", "tokens.csv", "a bearer token user (uid 1001): kubeconfig context jane"),
)


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
        """Every file of the development PKI, the token file and the kubeconfig included."""
        paths = [self.secret]
        for role in FILES:
            paths += [self.cert(role), self.key(role)]
        return [*paths, self.tokens, self.kubeconfig]

    @property
    def tokens(self) -> Path:
        return self.root / TOKENS_FILE

    @property
    def kubeconfig(self) -> Path:
        return self.root / KUBECONFIG_FILE


DEV_TOKEN_USER = ("jane", "1001", '"ops,system:viewers"')
INTRUDER_TOKEN = "guessed-token"
DEFAULT_SERVER = "https://localhost:6443"


def kubeconfig(root: Path, server: str = DEFAULT_SERVER, token: str | None = None) -> dict[str, object]:
    """The development kubeconfig: paths relative to ``root`` (kubectl resolves them against the kubeconfig's
    own directory); with ``token`` (the one in ``tokens.csv``), a ``jane`` context, and ``intruder`` with a
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


def issue_leaf(role: str, ca: Issued) -> Issued:
    """The development PKI's leaf ``role`` (a key of ISSUER), issued by ``ca``."""
    if role == "server":
        names = ("localhost", *SERVICE_NAMES)
        return issue(ca, "kube-apiserver", dns=names, ips=("127.0.0.1", "::1"), eku=(ExtendedKeyUsageOID.SERVER_AUTH,))
    if role == "user":
        return issue(ca, USER_CN, organization="system:developers")
    return issue(ca, {"front_proxy_client": FRONT_PROXY_CN, "load_reader_client": LOAD_READER_CN}[role])


def load_issued(cert_pem: bytes, key_pem: bytes) -> Issued:
    """A certificate and its key from PEM (a CA of an existing development PKI, to issue a missing leaf)."""
    key = serialization.load_pem_private_key(key_pem, password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError("not an EC private key")
    return Issued(x509.load_pem_x509_certificate(cert_pem), key)


def pair(item: Issued) -> tuple[Blob, Blob]:
    """The certificate (0644) and key (0600) files of ``item``."""
    return Blob(item.cert_pem(), 0o644), Blob(item.key_pem(), 0o600)


def new_token() -> str:
    return f"ops-token-{secrets.token_hex(16)}"


def tokens_csv(token: str) -> Blob:
    """``tokens.csv``: ``token`` for ``jane`` (uid 1001, groups ops and system:viewers), mode 0600."""
    return Blob(f"{token},{','.join(DEV_TOKEN_USER)}\n".encode())


def token_of(tokens: bytes) -> str | None:
    """The token of the first line of a ``tokens.csv`` (None if it has none)."""
    first = tokens.decode(errors="replace").splitlines()[:1]
    token = first[0].split(",")[0].strip() if first else ""
    return token or None


def kubeconfig_token(data: bytes) -> str | None:
    """jane's token in a development kubeconfig (None if it holds none or is not one)."""
    try:
        users = json.loads(data)["users"]
        return next(u["user"]["token"] for u in users if u["name"] == DEV_TOKEN_USER[0])
    except (ValueError, KeyError, TypeError, StopIteration):
        return None


def kubeconfig_blob(root: Path, server: str = DEFAULT_SERVER, token: str | None = None) -> Blob:
    """``kubeconfig`` (JSON, which is YAML), mode 0600: it may hold a token."""
    return Blob((json.dumps(kubeconfig(root, server, token), indent=2) + "\n").encode())
