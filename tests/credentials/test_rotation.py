"""Live credential rotation and the metrics that show it, on a real server: files change on disk, the server
keeps running, established connections stay up, refused files leave the last good content in force."""

from __future__ import annotations

import re
import ssl
from pathlib import Path

import httpx

from secure_orca import pki
from tests import plainhttp
from tests.conftest import ClientCert, load_issued, write_client
from tests.rotating import Rig, eventually, replace


def test_secret_rotation_and_a_refused_empty_file(rig: Rig) -> None:
    secret_file = rig.root / pki.SECRET_FILE
    old = secret_file.read_text().strip()
    new = pki.new_secret()
    with rig.client() as http:
        assert rig.report(http, f"TEXT; secret={old}")
        replace(secret_file, f"{old}\n{new}\n".encode())  # rotation step 1: both valid
        eventually(lambda: rig.report(http, f"TEXT; secret={new}"), "new secret accepted")
        assert rig.report(http, f"TEXT; secret={old}")
        replace(secret_file, f"{new}\n".encode())  # step 2: old secret retired
        eventually(lambda: not rig.report(http, f"TEXT; secret={old}"), "old secret refused")
        replace(secret_file, b"")  # a broken rotation: refused, the last good content stays
        eventually(lambda: "reload of --endpoint-load-metrics-secret-file refused" in rig.log(), "refusal logged")
        assert rig.report(http, f"TEXT; secret={new}")
        replace(secret_file, f"{new}\n".encode(), 0o644)  # world-readable: refused too
        eventually(lambda: rig.log().count("refused, keeping the last good content") >= 2, "second refusal")
        assert rig.report(http, f"TEXT; secret={new}")
    assert old not in rig.log() and new not in rig.log()
    metrics = rig.metrics()
    assert re.search(
        r'secure_orca_credential_reloads_total\{flag="--endpoint-load-metrics-secret-file",'
        r'result="failure"\} 2\.0',
        metrics,
    )
    assert re.search(r'secure_orca_load_reports_total\{reason="secret",result="refused"\} [1-9]', metrics)
    assert re.search(r'secure_orca_load_reports_total\{reason="shared-secret",result="attached"\} [1-9]', metrics)


def test_rotated_out_ca_stops_granting_on_established_connections(rig: Rig, tmp_path: Path) -> None:
    live = pki.DevPKI(rig.root)
    fp = write_client(tmp_path, "fp", load_issued(live.cert("front_proxy_client"), live.key("front_proxy_client")))
    new_ca = pki.make_ca("front-proxy-ca-2")
    new_fp = write_client(tmp_path, "fp2", pki.issue(new_ca, pki.FRONT_PROXY_CN))
    with rig.client(fp.cert, fp.key) as established:
        assert rig.report(established)
        # Both CAs during the overlap, then only the new one.
        replace(live.cert("front_proxy_ca"), live.cert("front_proxy_ca").read_bytes() + new_ca.cert_pem(), 0o644)

        def new_ca_granted() -> bool:
            try:  # until the reload, the new CA's certificate fails the handshake
                with rig.client(new_fp.cert, new_fp.key) as fresh:
                    return rig.report(fresh)
            except httpx.TransportError:
                return False

        eventually(new_ca_granted, "new CA grants on a new connection")
        assert rig.report(established)
        replace(live.cert("front_proxy_ca"), new_ca.cert_pem(), 0o644)
        eventually(lambda: not rig.report(established), "removed CA refused on the established connection")
        response = established.get(rig.replica.url + "/version")
        assert response.status_code == 401  # no longer the front proxy: refused, yet the connection stays up
    with rig.client(new_fp.cert, new_fp.key) as fresh:
        assert rig.report(fresh)
    assert re.search(r'reason="untrusted-ca",result="refused"\} [1-9]', rig.metrics())


def test_allowed_names_file_is_live(rig: Rig, tmp_path: Path) -> None:
    live = pki.DevPKI(rig.root)
    fp = write_client(tmp_path, "fp", load_issued(live.cert("front_proxy_client"), live.key("front_proxy_client")))
    with rig.client(fp.cert, fp.key) as http:
        assert rig.report(http)
        replace(rig.root / "allowed-names", b"some-other-proxy\n", 0o644)
        eventually(lambda: not rig.report(http), "name no longer allowed")
        replace(rig.root / "allowed-names", f"{pki.FRONT_PROXY_CN}\n".encode(), 0o644)
        eventually(lambda: rig.report(http), "name allowed again")


def test_serving_certificate_rotation_keeps_connections(rig: Rig) -> None:
    live = pki.DevPKI(rig.root)
    ca = load_issued(live.cert("ca"), live.key("ca"))
    with rig.client() as established:
        assert established.get(rig.replica.url + "/healthz").status_code == 200
        old_serial = _served_serial(rig)
        fresh = pki.issue(ca, "kube-apiserver-2", dns=("localhost",), ips=("127.0.0.1", "::1"), eku=None)
        replace(live.key("server"), fresh.key_pem())  # key first: a mismatched pair is refused meanwhile
        replace(live.cert("server"), fresh.cert_pem(), 0o644)
        eventually(lambda: _served_serial(rig) != old_serial, "new serving certificate presented")
        assert _served_serial(rig) == fresh.cert.serial_number
        assert established.get(rig.replica.url + "/healthz").status_code == 200
    assert "reloaded --tls-cert-file" in rig.log()


def _served_serial(rig: Rig) -> int:
    from cryptography import x509

    pem = ssl.get_server_certificate((rig.replica.host, rig.replica.port), ca_certs=str(rig.ca))
    return x509.load_pem_x509_certificate(pem.encode()).serial_number


def test_metrics_expose_the_sampler_but_no_load_value(rig: Rig) -> None:
    eventually(lambda: "secure_orca_sampler_ticks_total" in rig.metrics(), "sampler metrics")
    metrics = rig.metrics()
    assert plainhttp.value(metrics, "secure_orca_sampler_ticks_total") >= 1
    # Load values are never exported (tests/server/test_metrics_authentication.py).
    assert "cpu_utilization" not in metrics
    assert "secure_orca_sampler_errors_total 0.0" in metrics


def test_mismatched_serving_key_is_refused_and_the_old_pair_stays(rig: Rig) -> None:
    live = pki.DevPKI(rig.root)
    old_serial = _served_serial(rig)
    replace(live.key("server"), pki.make_ca("unrelated").key_pem())  # a key that matches no certificate
    eventually(lambda: "reload of --tls-cert-file refused" in rig.log(), "refusal logged")
    assert _served_serial(rig) == old_serial
    with rig.client() as http:
        assert http.get(rig.replica.url + "/healthz").status_code == 200
    assert re.search(r'flag="--tls-cert-file",result="failure"\} 1\.0', rig.metrics())


def test_client_ca_rotation_reaches_the_x509_authenticator(rig: Rig, tmp_path: Path) -> None:
    """A reloaded --client-ca-file changes who the x509 authenticator accepts, not only the handshake (which
    keeps trusting the old CA: OpenSSL only adds trust, so the authenticator is what refuses it)."""
    live = pki.DevPKI(rig.root)
    new_ca = pki.make_ca("client-ca-2")
    new_user = write_client(tmp_path, "u2", pki.issue(new_ca, "rotated-user"))
    old_user = write_client(tmp_path, "u1", load_issued(live.cert("user"), live.key("user")))

    def whoami(cert: ClientCert) -> tuple[int, str]:
        with rig.client(cert.cert, cert.key) as http:
            response = http.post(rig.replica.url + "/apis/authentication.k8s.io/v1/selfsubjectreviews", content=b"{}")
        if response.status_code != 201:
            return response.status_code, ""
        return response.status_code, response.json()["status"]["userInfo"]["username"]

    assert whoami(old_user) == (201, pki.USER_CN)
    replace(live.cert("client_ca"), new_ca.cert_pem(), 0o644)

    def new_user_believed() -> bool:
        try:
            return whoami(new_user) == (201, "rotated-user")
        except httpx.TransportError:  # until the reload, the new CA's certificate fails the handshake
            return False

    eventually(new_user_believed, "the new client CA's user is authenticated")
    assert whoami(old_user) == (401, "")
