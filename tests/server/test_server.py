"""The server over real TLS and real HTTP/2 / HTTP/1.1 on loopback: who gets a report and who does not."""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from secure_orca import pki
from secure_orca.lab import replicas as launch
from secure_orca.orca.report import parse_text
from tests.conftest import ClientCert, fp_flags, secret_flags
from tests.proxied import PROTOCOLS, InjectingBackend, client
from tests.replicas import run_replicas

OPT_IN = "endpoint-load-metrics-request"
VOLATILE = {"date", "audit-id", "endpoint-load-metrics"}


def get(
    replica: launch.Replica,
    ca: Path,
    protocol: str,
    cert: ClientCert | None = None,
    headers: list[tuple[str, bytes]] | None = None,
    path: str = "/version",
) -> httpx.Response:
    with client(ca, protocol, cert) as http:
        response = http.get(replica.url + path, headers=[(name.encode(), value) for name, value in headers or []])
    assert response.http_version == ("HTTP/2" if protocol == "h2" else "HTTP/1.1")
    return response


def shape(response: httpx.Response) -> tuple[int, bytes, list[str]]:
    """What must be identical with and without the feature: status, body, header names (less volatile ones)."""
    names = sorted(name.lower() for name, _ in response.headers.multi_items() if name.lower() not in VOLATILE)
    return response.status_code, response.content, names


def reports(response: httpx.Response) -> list[str]:
    return [v for k, v in response.headers.multi_items() if k.lower().startswith("endpoint-load-metrics")]


@pytest.fixture(scope="module")
def secret(dev_pki: pki.DevPKI) -> str:
    return dev_pki.secret.read_text().strip()


GRANTED_CERTS = ["front-proxy", "front-proxy-via-intermediate", "front-proxy-no-eku"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("who", GRANTED_CERTS)
def test_front_proxy_gets_a_valid_report(secured_replica, dev_pki, client_certs, protocol, who) -> None:
    response = get(secured_replica, dev_pki.cert("ca"), protocol, client_certs[who], [(OPT_IN, b"TEXT")])
    (value,) = reports(response)
    report = parse_text(value)
    assert report.cpu_utilization is not None and report.mem_utilization is not None


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_shared_secret_gets_a_report(secured_replica, dev_pki, secret, protocol) -> None:
    response = get(secured_replica, dev_pki.cert("ca"), protocol, None, [(OPT_IN, f"TEXT; secret={secret}".encode())])
    assert len(reports(response)) == 1


REFUSED_CERTS = [
    None,
    "user",
    "user-with-allowed-cn",
    "front-proxy-ca-other-cn",
    "front-proxy-ca-name-in-san",
    "front-proxy-expired",
]
REFUSED_HEADERS: dict[str, list[tuple[str, bytes]] | str] = {
    "wrong-secret": [(OPT_IN, b"TEXT; secret=wrong-but-long-enough-guess")],
    "prefix-secret": "prefix",
    "empty-secret": [(OPT_IN, b"TEXT; secret=")],
    "unsupported-format": [(OPT_IN, b"Json")],
    "lowercase-format": [(OPT_IN, b"text")],
    "duplicate-opt-in": [(OPT_IN, b"TEXT"), (OPT_IN, b"TEXT")],
    "non-ascii": [(OPT_IN, "TEXT; secret=é".encode())],
    "very-long": [(OPT_IN, b"TEXT; secret=" + b"a" * 4000)],
}


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("who", REFUSED_CERTS)
def test_refused_identities_get_an_identical_response(secured_replica, dev_pki, client_certs, protocol, who) -> None:
    ca = dev_pki.cert("ca")
    cert = client_certs[who] if who else None
    baseline = get(secured_replica, ca, protocol, cert)
    response = get(secured_replica, ca, protocol, cert, [(OPT_IN, b"TEXT")])
    assert reports(response) == []
    assert shape(response) == shape(baseline)


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("case", sorted(REFUSED_HEADERS))
def test_refused_opt_ins_get_an_identical_response(secured_replica, dev_pki, secret, protocol, case) -> None:
    headers = REFUSED_HEADERS[case]
    if isinstance(headers, str):  # "prefix"
        headers = [(OPT_IN, f"TEXT; secret={secret[:-1]}".encode())]
    ca = dev_pki.cert("ca")
    baseline = get(secured_replica, ca, protocol)
    response = get(secured_replica, ca, protocol, None, headers)
    assert reports(response) == []
    assert shape(response) == shape(baseline)


@pytest.mark.parametrize("who", ["unknown-ca", "self-signed-allowed-cn", "front-proxy-server-eku"])
def test_certificates_openssl_refuses_in_the_handshake(secured_replica, dev_pki, client_certs, who) -> None:
    """Python's ssl cannot complete these handshakes (kube-apiserver would, then ignore the certificate):
    the client gets no response at all, so certainly no report."""
    with pytest.raises(httpx.TransportError):  # TLS 1.3: the alert arrives after the client finished
        get(secured_replica, dev_pki.cert("ca"), "h2", client_certs[who], [(OPT_IN, b"TEXT")])


def test_two_rotated_secrets_both_work_and_are_never_logged(dev_pki, tmp_path) -> None:
    secrets = [pki.new_secret(), pki.new_secret()]
    secret_file = tmp_path / "secrets"
    secret_file.write_text("# old, then new\n" + "\n".join(secrets) + "\n")
    secret_file.chmod(0o600)
    flags = secret_flags(secret_file, "-v")
    with run_replicas([launch.serve_argv(dev_pki, flags)]) as (replica,):
        for protocol in PROTOCOLS:
            for value in secrets:
                response = get(
                    replica, dev_pki.cert("ca"), protocol, None, [(OPT_IN, f"TEXT; secret={value}".encode())]
                )
                assert len(reports(response)) == 1
            wrong = get(replica, dev_pki.cert("ca"), protocol, None, [(OPT_IN, b"TEXT; secret=" + b"x" * 43)])
            assert reports(wrong) == []
    log = "".join(replica.process.lines)
    assert "GET /version" in log  # the access log did run
    assert all(value not in log for value in secrets)


@pytest.mark.parametrize(
    "flags",
    [
        ["--feature-gates", "RequestCostAggregation=true"],  # gate on, flag off
        [],  # both off
    ],
)
def test_feature_off_never_reports(dev_pki, client_certs, flags) -> None:
    flags = [*flags, "--requestheader-client-ca-file", str(dev_pki.cert("front_proxy_ca"))]
    with run_replicas([launch.serve_argv(dev_pki, flags)]) as (replica,):
        for protocol in PROTOCOLS:
            response = get(replica, dev_pki.cert("ca"), protocol, client_certs["front-proxy"], [(OPT_IN, b"TEXT")])
            assert reports(response) == []


@pytest.fixture()
def injecting_backend() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), InjectingBackend)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    InjectingBackend.seen = []
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def test_proxied_backend_cannot_inject_and_never_sees_the_opt_in(
    dev_pki, client_certs, secret, injecting_backend
) -> None:
    flags = [*fp_flags(dev_pki), "--proxy", f"/apis/metrics.k8s.io={injecting_backend}"]
    path = "/apis/metrics.k8s.io/v1beta1/nodes"
    with run_replicas([launch.serve_argv(dev_pki, flags)]) as (replica,):
        for protocol in PROTOCOLS:
            granted = get(replica, dev_pki.cert("ca"), protocol, client_certs["front-proxy"], [(OPT_IN, b"TEXT")], path)
            assert granted.json() == {"backend": True}
            (value,) = reports(granted)
            assert "0.999" not in value
            by_secret = get(
                replica, dev_pki.cert("ca"), protocol, None, [(OPT_IN, f"TEXT; secret={secret}".encode())], path
            )
            assert len(reports(by_secret)) == 1
            refused = get(replica, dev_pki.cert("ca"), protocol, None, [(OPT_IN, b"TEXT")], path)
            assert reports(refused) == [] and refused.json() == {"backend": True}
    assert len(InjectingBackend.seen) == 6
    for headers in InjectingBackend.seen:
        assert all(name.lower() != OPT_IN for name, _ in headers)
        assert all(secret not in value for _, value in headers)


def test_report_is_live(secured_replica, dev_pki, client_certs) -> None:
    """Real CPU work raises cpu_utilization and rps_fractional in later reports."""
    ca = dev_pki.cert("ca")
    with client(ca, "h2", client_certs["front-proxy"]) as http:
        time.sleep(1.2)  # an idle rate window
        idle = parse_text(
            http.get(secured_replica.url + "/healthz", headers={OPT_IN: "TEXT"}).headers["endpoint-load-metrics"]
        )
        for _ in range(8):
            http.get(secured_replica.url + "/work?cpu_ms=100")
        time.sleep(0.3)  # at least two sampler ticks
        busy = parse_text(
            http.get(secured_replica.url + "/healthz", headers={OPT_IN: "TEXT"}).headers["endpoint-load-metrics"]
        )
    assert busy.cpu_utilization is not None and idle.cpu_utilization is not None
    assert busy.cpu_utilization > idle.cpu_utilization
    assert busy.rps_fractional is not None and busy.rps_fractional > 0


def test_once_per_sample_over_one_connection(dev_pki, client_certs) -> None:
    """With a 1 s sample, 20 quick requests on one connection carry the report once (or twice across a tick);
    a new connection gets it again."""
    flags = [
        *fp_flags(dev_pki),
        "--endpoint-load-metrics-attach",
        "once-per-sample",
        "--endpoint-load-metrics-interval",
        "1s",
    ]
    with run_replicas([launch.serve_argv(dev_pki, flags)]) as (replica,):
        with client(dev_pki.cert("ca"), "h2", client_certs["front-proxy"]) as http:
            counts = [len(reports(http.get(replica.url + "/version", headers={OPT_IN: "TEXT"}))) for _ in range(20)]
        assert 1 <= sum(counts) <= 2 and counts[0] == 1
        fresh = get(replica, dev_pki.cert("ca"), "h2", client_certs["front-proxy"], [(OPT_IN, b"TEXT")])
        assert len(reports(fresh)) == 1
