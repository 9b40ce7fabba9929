"""One reader of trust: a CA file means the same at start-up and after a reload, read as kube-apiserver reads it
(client-go's cert.ParseCertsPEM: only "CERTIFICATE" blocks without PEM headers count, by Go's pem.Decode).

Before the credential loader, start-up read CA bundles as kube does and reload read them with cryptography's
PEM reader: a bare chmod made an ignored block a root (widened trust), and a rotation written as kube accepts
it was refused on reload, so the CA it removed kept granting (blocked revocation)."""

from __future__ import annotations

import base64
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from secure_orca import pki
from tests.rotating import Rig, eventually, replace

from ..conftest import ClientCert, load_issued, write_client

REQUESTHEADER_CA = "--requestheader-client-ca-file"


def relabelled(pem: bytes) -> bytes:
    """A certificate under the label OpenSSL also reads, which Go's client-go skips."""
    return pem.replace(b"BEGIN CERTIFICATE", b"BEGIN X509 CERTIFICATE").replace(
        b"END CERTIFICATE", b"END X509 CERTIFICATE"
    )


def with_headers(pem: bytes) -> bytes:
    """A CERTIFICATE block with RFC 1421 headers: skipped by client-go, read by cryptography."""
    return pem.replace(b"-----BEGIN CERTIFICATE-----\n", b"-----BEGIN CERTIFICATE-----\nComment: from a tool\n\n")


def end_on_the_base64_line(pem: bytes) -> bytes:
    """The END marker right after the last base64 characters, on the same line: Go's pem.Decode skips it."""
    lines = pem.rstrip(b"\n").split(b"\n")
    return b"\n".join([*lines[:-2], lines[-2] + lines[-1]]) + b"\n"


def as_front_proxy(rig: Rig, cert: ClientCert) -> tuple[bool, str]:
    """(report attached, username the server believed) for a request naming system:admin; a failed handshake
    is (False, "")."""
    try:
        with rig.client(cert.cert, cert.key) as http:
            response = http.post(
                rig.replica.url + "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                content=b"{}",
                headers={"endpoint-load-metrics-request": "TEXT", "x-remote-user": "system:admin"},
            )
    except httpx.TransportError:
        return False, ""
    user = response.json()["status"]["userInfo"]["username"] if response.status_code == 201 else ""
    return "endpoint-load-metrics" in response.headers, user


def reloads(rig: Rig) -> int:
    return rig.log().count(f"reloaded {REQUESTHEADER_CA}")


@pytest.mark.parametrize("spelling", [relabelled, with_headers, end_on_the_base64_line])
def test_a_reload_never_makes_an_ignored_block_a_root(
    rig: Rig, tmp_path: Path, spelling: Callable[[bytes], bytes]
) -> None:
    live = pki.DevPKI(rig.root)
    evil = pki.make_ca("evil-ca")
    intruder = write_client(tmp_path, "intruder", pki.issue(evil, pki.FRONT_PROXY_CN))
    proxy = write_client(tmp_path, "fp", load_issued(live.cert("front_proxy_client"), live.key("front_proxy_client")))
    ca_file = live.cert("front_proxy_ca")
    before = reloads(rig)
    replace(ca_file, ca_file.read_bytes() + spelling(evil.cert_pem()), 0o644)
    eventually(lambda: reloads(rig) > before, "the CA file reloaded")
    assert as_front_proxy(rig, intruder) == (False, "")
    assert as_front_proxy(rig, proxy) == (True, "system:admin")
    before = reloads(rig)
    ca_file.chmod(0o640)  # a bare chmod: the same bytes, read again
    eventually(lambda: reloads(rig) > before, "the chmod reloaded")
    assert as_front_proxy(rig, intruder) == (False, "")
    assert as_front_proxy(rig, proxy) == (True, "system:admin")


def test_a_rotation_kube_accepts_is_applied_and_revokes(rig: Rig, tmp_path: Path) -> None:
    live = pki.DevPKI(rig.root)
    old = write_client(tmp_path, "old", load_issued(live.cert("front_proxy_client"), live.key("front_proxy_client")))
    new_ca = pki.make_ca("front-proxy-ca-2")
    new = write_client(tmp_path, "new", pki.issue(new_ca, pki.FRONT_PROXY_CN))
    junk = (
        b"-----BEGIN CERTIFICATE-----\nComment: kept by an old tool\n\n"
        + base64.encodebytes(b"not a certificate, skipped by client-go")
        + b"-----END CERTIFICATE-----\n"
    )
    assert as_front_proxy(rig, old) == (True, "system:admin")
    before = reloads(rig)
    replace(live.cert("front_proxy_ca"), new_ca.cert_pem() + junk, 0o644)
    eventually(lambda: reloads(rig) > before, "the rotation applied")
    assert as_front_proxy(rig, new) == (True, "system:admin")
    assert as_front_proxy(rig, old) == (False, "")
    assert "refused" not in rig.log()
