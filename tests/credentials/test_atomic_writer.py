"""Every credential kind rotated the way a Kubernetes node does it (kubelet's atomic writer, tests/atomic_writer.py)
against a real ``secure-orca serve``: each swap is applied exactly once (one ``reloaded`` line and one success
count per swap, no refusal), no half-written file is ever read (each file is written in two halves with a poll's
worth of sleep between them, inside the new timestamped directory), and what a swap revokes is refused as soon as
its reload is logged. Only observable behaviour is checked: handshakes, statuses, reports, log lines, metrics."""

from __future__ import annotations

import dataclasses
import re
import ssl
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import httpx
import pytest

from secure_orca import pki
from secure_orca.lab import replicas as launch
from tests import plainhttp
from tests.atomic_writer import DATA, AtomicWriter
from tests.conftest import load_issued, secret_flags
from tests.replicas import run_replicas
from tests.rotating import eventually

OPT_IN = "endpoint-load-metrics-request"
POLL = 0.1  # --credential-reload-interval


def _half_poll() -> None:
    time.sleep(POLL * 1.5)  # at least one poll runs while the file is half written


@dataclass
class Node:
    """The volumes a Pod would mount, each written by its own AtomicWriter, and the serve reading them."""

    root: Path
    ca: Path
    writers: dict[str, AtomicWriter] = field(default_factory=dict)
    replica: launch.Replica | None = None
    metrics_url: str = ""

    def volume(self, name: str) -> AtomicWriter:
        if name not in self.writers:
            self.writers[name] = AtomicWriter(self.root / name, during_write=_half_poll)
        return self.writers[name]

    def log(self) -> str:
        assert self.replica is not None
        return "".join(self.replica.process.lines)

    def reloads(self, flag: str, result: str = "success") -> float:
        return plainhttp.metric(self.metrics_url, "secure_orca_credential_reloads_total", flag=flag, result=result)

    def swap(self, volume: str, payload: dict[str, tuple[bytes, int]], flag: str) -> None:
        """One kubelet swap; returns once its reload is logged, and checks it was applied exactly once."""
        lines, count = self.log().count(f"reloaded {flag}\n"), self.reloads(flag)
        assert self.volume(volume).write(payload)
        eventually(lambda: self.log().count(f"reloaded {flag}\n") > lines, f"{flag} reloaded")
        time.sleep(POLL * 3)  # a few more polls: a second reload of the same swap would show now
        assert self.log().count(f"reloaded {flag}\n") == lines + 1
        assert self.reloads(flag) == count + 1
        assert f"reload of {flag} refused" not in self.log()

    def get(self, cert: tuple[Path, Path] | None, headers: dict[str, str]) -> httpx.Response | None:
        """One request on a new connection; None when the handshake is refused."""
        context = ssl.create_default_context(cafile=str(self.ca))
        if cert is not None:
            context.load_cert_chain(*cert)
        assert self.replica is not None
        try:
            with httpx.Client(verify=context, http2=True, timeout=10) as client:
                return client.get(self.replica.url + "/version", headers=headers)
        except (httpx.TransportError, ssl.SSLError):
            return None

    def report(self, cert: tuple[Path, Path] | None = None, optin: str = "TEXT") -> bool:
        response = self.get(cert, {OPT_IN: optin, "x-remote-user": "proxied-user"})
        return response is not None and "endpoint-load-metrics" in response.headers


def _files(root: Path, name: str, issued: pki.Issued) -> tuple[Path, Path]:
    cert, key = root / f"{name}.crt", root / f"{name}.key"
    cert.write_bytes(issued.cert_pem())
    key.write_bytes(issued.key_pem())
    key.chmod(0o600)
    return cert, key


def _ca_payload(ca: pki.Issued) -> dict[str, tuple[bytes, int]]:
    return {"ca.crt": (ca.cert_pem(), 0o644)}


@pytest.fixture(scope="module")
def node(dev_pki: pki.DevPKI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    root = tmp_path_factory.mktemp("node")
    node = Node(root, dev_pki.cert("ca"))
    issued = lambda role: load_issued(dev_pki.cert(role), dev_pki.key(role))  # noqa: E731
    node.volume("serving").write(
        {
            "tls.crt": (dev_pki.cert("server").read_bytes(), 0o644),
            "tls.key": (dev_pki.key("server").read_bytes(), 0o600),
        }
    )
    node.volume("client-ca").write(_ca_payload(issued("client_ca")))
    node.volume("front-proxy-ca").write(_ca_payload(issued("front_proxy_ca")))
    node.volume("allowed-names").write({"names": (f"{pki.FRONT_PROXY_CN}\n".encode(), 0o644)})
    node.volume("load-reader-ca").write(_ca_payload(issued("load_reader_ca")))
    node.volume("lb-secret").write({"secret": (dev_pki.secret.read_bytes(), 0o600)})
    node.volume("tokens").write({"tokens.csv": (b'old-token-0123456789,jane,1001,"dev"\n', 0o600)})
    for writer in node.writers.values():
        writer.during_write = _half_poll
    flags = [
        "--tls-cert-file",
        str(root / "serving/tls.crt"),
        "--tls-private-key-file",
        str(root / "serving/tls.key"),
        "--client-ca-file",
        str(root / "client-ca/ca.crt"),
        "--requestheader-client-ca-file",
        str(root / "front-proxy-ca/ca.crt"),
        "--requestheader-allowed-names-file",
        str(root / "allowed-names/names"),
        "--endpoint-load-metrics-client-ca-file",
        str(root / "load-reader-ca/ca.crt"),
        "--endpoint-load-metrics-secret-file",
        str(root / "lb-secret/secret"),
        "--token-auth-file",
        str(root / "tokens/tokens.csv"),
        "--feature-gates",
        "RequestCostAggregation=true",
        "--enable-endpoint-load-metrics",
        "--endpoint-load-metrics-auth",
        "front-proxy,shared-secret,load-reader",
        "--credential-reload-interval",
        f"{POLL}s",
        "--metrics-bind-address",
        "127.0.0.1:0",
    ]
    argv = launch.serve_argv(dev_pki, flags)
    at = argv.index("--tls-cert-file")
    del argv[at : at + 6]  # the dev PKI's serving pair and client CA: the node's volumes instead
    with run_replicas([argv]) as (replica,):
        node.replica = replica
        match = re.search(r"metrics on (http://\S+/metrics)", node.log())
        assert match, replica.process.output()
        node.metrics_url = match.group(1)
        yield node


def test_the_volumes_look_as_kubelet_writes_them(node: Node) -> None:
    volume = node.root / "serving"
    assert (volume / "tls.crt").readlink() == Path(DATA) / "tls.crt"
    target = (volume / DATA).readlink()
    assert re.fullmatch(r"\.\.\d{4}_\d\d_\d\d_\d\d_\d\d_\d\d\.\w+", str(target)), target
    assert sorted(p.name for p in volume.iterdir()) == sorted([DATA, str(target), "tls.crt", "tls.key"])


def test_serving_certificate(node: Node, dev_pki: pki.DevPKI) -> None:
    assert node.replica is not None
    ca = load_issued(dev_pki.cert("ca"), dev_pki.key("ca"))
    fresh = pki.issue(ca, "kube-apiserver-rotated", dns=("localhost",), ips=("127.0.0.1", "::1"), eku=None)
    node.swap("serving", {"tls.crt": (fresh.cert_pem(), 0o644), "tls.key": (fresh.key_pem(), 0o600)}, "--tls-cert-file")
    pem = ssl.get_server_certificate((node.replica.host, node.replica.port), ca_certs=str(node.ca))
    assert str(fresh.cert.serial_number) in str(_serial(pem))


def _serial(pem: str) -> int:
    from cryptography import x509

    return x509.load_pem_x509_certificate(pem.encode()).serial_number


def test_client_ca(node: Node, dev_pki: pki.DevPKI, tmp_path: Path) -> None:
    old_user = (dev_pki.cert("user"), dev_pki.key("user"))
    new_ca = pki.make_ca("client-ca-rotated")
    new_user = _files(tmp_path, "user2", pki.issue(new_ca, "rotated-user"))
    assert _status(node.get(old_user, {})) == 200
    node.swap("client-ca", _ca_payload(new_ca), "--client-ca-file")
    assert _status(node.get(new_user, {})) == 200  # the new CA completes handshakes and authenticates
    assert _status(node.get(old_user, {})) == 401  # the old one no longer authenticates (revoked at once)


def _status(response: httpx.Response | None) -> int:
    return response.status_code if response is not None else 0


def test_requestheader_ca(node: Node, dev_pki: pki.DevPKI, tmp_path: Path) -> None:
    old_fp = (dev_pki.cert("front_proxy_client"), dev_pki.key("front_proxy_client"))
    new_ca = pki.make_ca("front-proxy-ca-rotated")
    new_fp = _files(tmp_path, "fp2", pki.issue(new_ca, pki.FRONT_PROXY_CN))
    assert node.report(old_fp) and not node.report(new_fp)
    node.swap("front-proxy-ca", _ca_payload(new_ca), "--requestheader-client-ca-file")
    assert node.report(new_fp) and not node.report(old_fp)


def test_allowed_names(node: Node, tmp_path: Path) -> None:
    ca = pki.make_ca("front-proxy-ca-names")
    node.swap("front-proxy-ca", _ca_payload(ca), "--requestheader-client-ca-file")
    proxy, other = (_files(tmp_path, n, pki.issue(ca, n)) for n in (pki.FRONT_PROXY_CN, "other-proxy"))
    assert node.report(proxy) and not node.report(other)
    node.swap("allowed-names", {"names": (b"other-proxy\n", 0o644)}, "--requestheader-allowed-names-file")
    assert node.report(other) and not node.report(proxy)


def test_load_reader_ca(node: Node, dev_pki: pki.DevPKI, tmp_path: Path) -> None:
    old_reader = (dev_pki.cert("load_reader_client"), dev_pki.key("load_reader_client"))
    new_ca = pki.make_ca("load-reader-ca-rotated")
    new_reader = _files(tmp_path, "lr2", pki.issue(new_ca, pki.LOAD_READER_CN))
    assert node.report(old_reader) and not node.report(new_reader)
    node.swap("load-reader-ca", _ca_payload(new_ca), "--endpoint-load-metrics-client-ca-file")
    assert node.report(new_reader) and not node.report(old_reader)


def test_shared_secret(node: Node, dev_pki: pki.DevPKI) -> None:
    old, new = dev_pki.secret.read_text().strip(), pki.new_secret()
    assert node.report(optin=f"TEXT; secret={old}")
    node.swap("lb-secret", {"secret": (f"{new}\n".encode(), 0o600)}, "--endpoint-load-metrics-secret-file")
    assert node.report(optin=f"TEXT; secret={new}") and not node.report(optin=f"TEXT; secret={old}")
    assert old not in node.log() and new not in node.log()


@pytest.mark.xfail(
    strict=True,
    reason="--token-auth-file is read once at start, as kube-apiserver reads it; a token rotation needs a restart",
)
def test_token_file(node: Node) -> None:
    bearer = lambda token: {"authorization": f"Bearer {token}"}  # noqa: E731
    assert _status(node.get(None, bearer("old-token-0123456789"))) == 200
    assert node.volume("tokens").write({"tokens.csv": (b'new-token-0123456789,jane,1001,"dev"\n', 0o600)})
    eventually(lambda: _status(node.get(None, bearer("new-token-0123456789"))) == 200, "new token", timeout=2)


def test_envoy_follows_a_shared_secret_swapped_by_kubelet(dev_pki: pki.DevPKI, tmp_path: Path) -> None:
    """The generated deployment's Envoy side: its shared secret and its SDS file live in volumes written by the
    atomic writer (as the deploy/ manifests mount them) and are watched as `secure-orca deploy` configures
    (watched_directory). Envoy's secret is swapped first, so the replica (still on the old one) refuses what Envoy
    sends: that refusal is how the test sees Envoy re-read the file (Envoy logs nothing and counts no SDS update for
    a re-read file). Then the replica's: every request through Envoy gets its report again."""
    from secure_orca.deploy import manifests
    from secure_orca.envoy import bootstrap, files

    binary = files.find_envoy()
    if binary is None:
        pytest.skip("envoy (the envoy extra) is not installed")
    old, new = dev_pki.secret.read_text().strip(), pki.new_secret()
    replica_secret = AtomicWriter(tmp_path / "replica-secret")
    lb_secret, lb_config = AtomicWriter(tmp_path / "lb-secret"), AtomicWriter(tmp_path / "lb-config")
    replica_secret.write({"secret": (f"{old}\n".encode(), 0o600)})
    lb_secret.write({"secret": (f"{old}\n".encode(), 0o600)})
    metrics = f"127.0.0.1:{launch.free_port()}"
    flags = secret_flags(
        replica_secret.target / "secret", "--credential-reload-interval", f"{POLL}s", "--metrics-bind-address", metrics
    )
    with run_replicas([launch.serve_argv(dev_pki, flags)]) as (replica,):
        listen, admin = launch.free_port(), launch.free_port()
        config = files.dev_config(
            dev_pki,
            [bootstrap.Upstream("127.0.0.1", replica.port)],
            option="shared-secret",
            timing=bootstrap.TEST_TIMING,
            listen_port=listen,
            admin_port=admin,
        )
        config = dataclasses.replace(
            config,
            credentials=dataclasses.replace(config.credentials, secret_file=lb_secret.target / "secret"),
            sds_path=lb_config.target / "secret-sds.yaml",
        )
        ready = ("127.0.0.1", launch.free_port())
        generated = manifests.envoy_files(config, PurePosixPath(lb_config.target), ready)
        lb_config.write({name: (text.encode(), 0o644) for name, text in generated.items()})
        envoy = launch.start_process(
            "envoy",
            [
                binary,
                "-c",
                str(lb_config.target / "envoy.yaml"),
                "--concurrency",
                "1",
                "-l",
                "info",
                "--disable-hot-restart",
            ],
        )
        try:
            eventually(lambda: _listening(listen), "envoy listening", timeout=30)
            context = ssl.create_default_context(cafile=str(dev_pki.cert("ca")))
            with httpx.Client(verify=context, timeout=10) as client:

                def granted() -> float:
                    assert client.get(f"https://localhost:{listen}/version").status_code == 200
                    return _reports(metrics)

                eventually(lambda: granted() > 0, "reports through Envoy with the old secret")
                lb_secret.write({"secret": (f"{new}\n".encode(), 0o600)})  # Envoy first: the replica refuses it
                eventually(lambda: granted() >= 0 and _reports(metrics, "secret", "refused") > 0, "Envoy sends new")
                replica_secret.write({"secret": (f"{new}\n".encode(), 0o600)})
                eventually(
                    lambda: "reloaded --endpoint-load-metrics-secret-file" in "".join(replica.process.lines),
                    "replica reloads",
                )
                before, refused = granted(), _reports(metrics, "secret", "refused")
                for _ in range(5):
                    granted()
                assert _reports(metrics) == before + 5 and _reports(metrics, "secret", "refused") == refused
        finally:
            envoy.stop()


def _listening(port: int) -> bool:
    import socket

    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _reports(metrics: str, reason: str = "shared-secret", result: str = "attached") -> float:
    return plainhttp.metric(f"http://{metrics}/metrics", "secure_orca_load_reports_total", reason=reason, result=result)
