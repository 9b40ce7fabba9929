"""Option 2b live: a load-reader certificate (--endpoint-load-metrics-client-ca-file) gets load reports and
nothing else. Its identity headers are never believed; with a token it is the token's user; kube-style start-up
refusals and live reload apply. Real ``serve`` over TLS and HTTP/2, the probe as the bypass client."""

from __future__ import annotations

import json
import shutil
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from secure_orca import pki
from secure_orca.lab import launcher as lb
from secure_orca.lab import replicas as launch
from secure_orca.orca.headers import OPTIN, REPORT
from secure_orca.probe.audit import ProbeConfig, probe
from tests.replicas import run_replicas

REVIEW = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
FORGED = [("x-remote-user", "system:admin"), ("x-remote-group", "system:masters")]
TOKEN = "load-reader-test-token-0123456789abcdef"


@pytest.fixture(scope="module")
def reader_ca(dev_pki: pki.DevPKI, tmp_path_factory: pytest.TempPathFactory) -> Path:
    copy = tmp_path_factory.mktemp("load-reader-ca") / "load-reader-ca.crt"  # so the reload test can replace it
    shutil.copy(dev_pki.cert("load_reader_ca"), copy)
    return copy


@pytest.fixture(scope="module")
def reader_replica(
    dev_pki: pki.DevPKI, tmp_path_factory: pytest.TempPathFactory, reader_ca: Path
) -> Iterator[launch.Replica]:
    work = tmp_path_factory.mktemp("load-reader")
    tokens = work / "tokens.csv"
    tokens.write_text(f'{TOKEN},token-user,uid-1,"team"\n')
    tokens.chmod(0o600)
    flags = lb.replica_flags(dev_pki, "front-proxy,load-reader", "--token-auth-file", str(tokens))
    flags[flags.index(str(dev_pki.cert("load_reader_ca")))] = str(reader_ca)
    flags += ["--credential-reload-interval", "100ms"]
    with run_replicas([launch.serve_argv(dev_pki, flags)]) as (replica,):
        yield replica


def client(dev_pki: pki.DevPKI, role: str | None) -> httpx.Client:
    context = ssl.create_default_context(cafile=str(dev_pki.cert("ca")))
    if role is not None:
        context.load_cert_chain(dev_pki.cert(role), dev_pki.key(role))
    return httpx.Client(verify=context, http2=True, timeout=10)


def whoami(replica: launch.Replica, dev_pki: pki.DevPKI, role: str | None, *headers: tuple[str, str]) -> dict:
    with client(dev_pki, role) as http:
        response = http.post(replica.url + REVIEW, headers=[*FORGED, *headers], content=b"{}")
    assert response.status_code == 201, response.text
    return response.json()["status"]["userInfo"]


@pytest.mark.parametrize(
    ("role", "reported"),
    [("load_reader_client", True), ("front_proxy_client", True), ("user", False), (None, False)],
)
def test_only_the_load_reader_and_the_front_proxy_read_load(
    reader_replica: launch.Replica, dev_pki: pki.DevPKI, role: str | None, reported: bool
) -> None:
    with client(dev_pki, role) as http:
        response = http.get(reader_replica.url + "/version", headers=[(OPTIN, "TEXT")])
    assert (REPORT in response.headers) is reported


def test_a_load_readers_forged_identity_is_never_believed(reader_replica: launch.Replica, dev_pki: pki.DevPKI) -> None:
    user = whoami(reader_replica, dev_pki, "load_reader_client")
    assert user["username"] == "system:anonymous" and "system:masters" not in user["groups"]


def test_a_load_reader_with_a_token_is_the_tokens_user(reader_replica: launch.Replica, dev_pki: pki.DevPKI) -> None:
    user = whoami(reader_replica, dev_pki, "load_reader_client", ("authorization", f"Bearer {TOKEN}"))
    assert user["username"] == "token-user" and "system:masters" not in user["groups"]


def test_the_front_proxy_beside_it_is_still_believed(reader_replica: launch.Replica, dev_pki: pki.DevPKI) -> None:
    assert whoami(reader_replica, dev_pki, "front_proxy_client")["username"] == "system:admin"  # by design


def test_the_probe_finds_the_load_reader_grants_nothing_else(
    reader_replica: launch.Replica, dev_pki: pki.DevPKI
) -> None:
    config = ProbeConfig(
        cacert=dev_pki.cert("ca"),
        lb_cert=dev_pki.cert("load_reader_client"),
        lb_key=dev_pki.key("load_reader_client"),
        lb_load_reader=True,
        timing_samples=0,
        seed=1,
    )
    result = probe(reader_replica.url, config)
    assert result.control_ok and result.lb_grants_identity is False, result.reason
    assert result.verdict == "no-leak", result.reason


def test_a_load_reader_certificate_probed_as_a_front_proxy_names_the_flag(
    reader_replica: launch.Replica, dev_pki: pki.DevPKI
) -> None:
    """Forgetting --lb-load-reader: the certificate gets reports but its identity headers are (rightly) not
    believed. The verdict stays inconclusive, and says which flag is missing."""
    config = ProbeConfig(
        cacert=dev_pki.cert("ca"),
        lb_cert=dev_pki.cert("load_reader_client"),
        lb_key=dev_pki.key("load_reader_client"),
        timing_samples=0,
        seed=1,
    )
    result = probe(reader_replica.url, config)
    assert result.control_ok and result.verdict == "inconclusive", result.reason
    assert "add --lb-load-reader" in result.reason


def test_reload_of_the_load_reader_ca_revokes_it(
    reader_replica: launch.Replica, dev_pki: pki.DevPKI, reader_ca: Path
) -> None:
    original = reader_ca.read_bytes()
    other = pki.make_ca("another-load-reader-ca")
    try:
        reader_ca.write_bytes(other.cert_pem())
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with client(dev_pki, "load_reader_client") as http:  # a new connection: the new trust applies
                if REPORT not in http.get(reader_replica.url + "/version", headers=[(OPTIN, "TEXT")]).headers:
                    break
            time.sleep(0.1)
        else:
            pytest.fail("the replaced load-reader CA kept granting")
    finally:
        reader_ca.write_bytes(original)


def run_serve(dev_pki: pki.DevPKI, *flags: str) -> subprocess.CompletedProcess[str]:
    argv = launch.serve_argv(dev_pki, ["--feature-gates", "RequestCostAggregation=true", *flags])
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize(
    ("ca_role", "message"),
    [("client_ca", "--endpoint-load-metrics-allowed-names: must not be empty"), (None, "no listed mode is usable")],
)
def test_start_up_refusals(dev_pki: pki.DevPKI, ca_role: str | None, message: str) -> None:
    flags = ["--enable-endpoint-load-metrics", "--endpoint-load-metrics-auth", "load-reader"]
    if ca_role is not None:
        flags += ["--endpoint-load-metrics-client-ca-file", str(dev_pki.cert(ca_role))]
    done = run_serve(dev_pki, *flags)
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_probe_cli_knows_the_load_reader(reader_replica: launch.Replica, dev_pki: pki.DevPKI) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "secure_orca",
            "probe",
            reader_replica.url,
            "--cacert",
            str(dev_pki.cert("ca")),
            "--lb-cert",
            str(dev_pki.cert("load_reader_client")),
            "--lb-key",
            str(dev_pki.key("load_reader_client")),
            "--lb-load-reader",
            "--timing-samples",
            "0",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert json.loads(done.stdout)["verdict"] == "no-leak"
