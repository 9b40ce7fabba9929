"""Shared fixtures: a development PKI made by our own generator, extra certificates for the negative cases,
and running replicas of ``secure-orca serve`` (real subprocesses on loopback)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID

from secure_orca import pki
from secure_orca.credentials import devpki
from secure_orca.probe.audit import ProbeConfig
from tests.replicas import replica_fixture
from tests.rotating import rig  # noqa: F401  (a live server with credential files to rotate)

# --cpu-time N: the tests that used the most CPU seconds; SECURE_ORCA_NO_SKIPS=1 (.ci/run): a skip fails
pytest_plugins = ["tests.cpu_time", "tests.no_skips"]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each test marked ``starts_first`` (far longer than the rest) goes to the front of one worker's share, the
    rest keep their order. pytest-xdist's worksteal hands the workers contiguous shares of this order, split as
    ``_shares`` splits it, so every marked test starts at once on its own worker, instead of one of them starting
    last and running alone; idle workers then take the rest of a busy worker's share."""
    first = [item for item in items if item.get_closest_marker("starts_first")]
    rest = [item for item in items if not item.get_closest_marker("starts_first")]
    workers = getattr(config, "workerinput", {}).get("workercount", 1)  # set by pytest-xdist in its workers
    count = workers if isinstance(workers, int) and workers > 1 else 1
    ordered: list[pytest.Item] = []
    for index, size in enumerate(_shares(len(items), count)):
        head = first[index : index + 1] if index < count - 1 else first[index:]  # the last share takes any extra
        taken = max(0, size - len(head))
        ordered += head + rest[:taken]
        rest = rest[taken:]
    items[:] = ordered + rest


def _shares(count: int, workers: int) -> list[int]:
    """The sizes of xdist's first shares: each idle worker in turn gets ``len(pending) // workers_remaining``."""
    sizes = []
    for remaining in range(workers, 0, -1):
        sizes.append(count // remaining)
        count -= sizes[-1]
    return sizes


def load_issued(cert: Path, key: Path) -> pki.Issued:
    private = serialization.load_pem_private_key(key.read_bytes(), password=None)
    assert isinstance(private, ec.EllipticCurvePrivateKey), "the dev PKI's keys are EC"
    return pki.Issued(x509.load_pem_x509_certificate(cert.read_bytes()), private)


def issue(ca: pki.Issued, subject: list[x509.RelativeDistinguishedName]) -> pki.Issued:
    """A client certificate of ``ca`` whose Subject is exactly ``subject`` (any attribute order and string type)."""
    key = pki.new_key()
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name(subject))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca.key, hashes.SHA256())
    )
    return pki.Issued(cert, key)


@pytest.fixture(scope="session")
def dev_pki(tmp_path_factory: pytest.TempPathFactory) -> pki.DevPKI:
    return devpki.generate(tmp_path_factory.mktemp("pki"))


@dataclass(frozen=True)
class ClientCert:
    """A client certificate (and chain) written to disk for curl/httpx/h2, with what it should get."""

    cert: Path
    key: Path


def write_client(root: Path, name: str, leaf: pki.Issued, *chain: pki.Issued) -> ClientCert:
    cert = root / f"{name}.crt"
    key = root / f"{name}.key"
    cert.write_bytes(leaf.cert_pem() + b"".join(c.cert_pem() for c in chain))
    key.write_bytes(leaf.key_pem())
    key.chmod(0o600)
    return ClientCert(cert, key)


@pytest.fixture(scope="session")
def client_certs(dev_pki: pki.DevPKI, tmp_path_factory: pytest.TempPathFactory) -> dict[str, ClientCert]:
    """Every client identity of the integration tests, keyed by a short name."""
    root = tmp_path_factory.mktemp("clients")
    fp_ca = load_issued(dev_pki.cert("front_proxy_ca"), dev_pki.key("front_proxy_ca"))
    client_ca = load_issued(dev_pki.cert("client_ca"), dev_pki.key("client_ca"))
    unknown_ca = pki.make_ca("unknown-ca")
    intermediate = pki.issue(fp_ca, "front-proxy-intermediate", is_ca=True, eku=None)
    now = dt.datetime.now(dt.UTC)
    made = {
        "front-proxy": write_client(
            root, "fp", load_issued(dev_pki.cert("front_proxy_client"), dev_pki.key("front_proxy_client"))
        ),
        "front-proxy-via-intermediate": write_client(
            root, "fp-int", pki.issue(intermediate, pki.FRONT_PROXY_CN), intermediate
        ),
        "front-proxy-no-eku": write_client(root, "fp-noeku", pki.issue(fp_ca, pki.FRONT_PROXY_CN, eku=None)),
        "user": write_client(root, "user", load_issued(dev_pki.cert("user"), dev_pki.key("user"))),
        "user-with-allowed-cn": write_client(root, "user-cn", pki.issue(client_ca, pki.FRONT_PROXY_CN)),
        "front-proxy-ca-other-cn": write_client(root, "fp-other", pki.issue(fp_ca, "not-the-proxy")),
        "front-proxy-ca-name-in-san": write_client(
            root, "fp-san", pki.issue(fp_ca, "not-the-proxy", dns=(pki.FRONT_PROXY_CN,))
        ),
        "front-proxy-expired": write_client(
            root,
            "fp-expired",
            pki.issue(
                fp_ca, pki.FRONT_PROXY_CN, not_before=now - dt.timedelta(days=30), not_after=now - dt.timedelta(days=1)
            ),
        ),
        "front-proxy-server-eku": write_client(
            root, "fp-servereku", pki.issue(fp_ca, pki.FRONT_PROXY_CN, eku=(ExtendedKeyUsageOID.SERVER_AUTH,))
        ),
        "unknown-ca": write_client(root, "unknown", pki.issue(unknown_ca, pki.FRONT_PROXY_CN)),
        "self-signed-allowed-cn": write_client(root, "selfsigned", pki.make_ca(pki.FRONT_PROXY_CN)),
    }
    return made


def fp_flags(dev_pki: pki.DevPKI, modes: str = "front-proxy,shared-secret", *extra: str) -> list[str]:
    """Flags that turn the feature on with the dev PKI's front-proxy CA, allowed name and secret file."""
    return [
        "--feature-gates",
        "RequestCostAggregation=true",
        "--enable-endpoint-load-metrics",
        "--requestheader-client-ca-file",
        str(dev_pki.cert("front_proxy_ca")),
        "--requestheader-allowed-names",
        pki.FRONT_PROXY_CN,
        "--endpoint-load-metrics-secret-file",
        str(dev_pki.secret),
        "--endpoint-load-metrics-auth",
        modes,
        *extra,
    ]


def secret_flags(secret_file: Path, *extra: str) -> list[str]:
    """Flags that turn the feature on for the shared secret alone, read from ``secret_file``."""
    return [
        "--feature-gates",
        "RequestCostAggregation=true",
        "--enable-endpoint-load-metrics",
        "--endpoint-load-metrics-auth",
        "shared-secret",
        "--endpoint-load-metrics-secret-file",
        str(secret_file),
        *extra,
    ]


def probe_config(dev_pki: pki.DevPKI, paths: tuple[str, ...] = ("/version",)) -> ProbeConfig:
    """The probe as the dev PKI's front proxy (with the secret) and its user, no timing check."""
    return ProbeConfig(
        cacert=dev_pki.cert("ca"),
        lb_cert=dev_pki.cert("front_proxy_client"),
        lb_key=dev_pki.key("front_proxy_client"),
        lb_secret=dev_pki.secret.read_text().strip(),
        client_cert=dev_pki.cert("user"),
        client_key=dev_pki.key("user"),
        paths=paths,
        timing_samples=0,
        timeout=5.0,
    )


# One replica with the default modes (front-proxy,shared-secret), shared by the read-only tests.
secured_replica = replica_fixture(fp_flags, scope="session")
