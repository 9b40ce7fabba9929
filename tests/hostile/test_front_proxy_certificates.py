"""Hostile front-proxy certificates against the real server (real TLS, real HTTP/2 on loopback), with every
certificate issued by trustme or shaped from a trustme CA: no ``pki`` code on any path.

Each shape here made the server misbehave before it verified chains as Go does: a grant kube-apiserver would
refuse (two CNs, the first allowed), or an exception on the request path (a version-4 certificate, a SAN IP of
three bytes, a T61String CN with a non-ASCII byte). Every one must now get the ordinary response, without a
report and without a traceback in the server's log.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import trustme

from secure_orca.lab import replicas as launch
from secure_orca.x509 import der
from tests import x509corpus as shapes
from tests.replicas import assert_no_traceback, run_replicas

OPT_IN = ("endpoint-load-metrics-request", "TEXT")


@dataclass(frozen=True)
class Setup:
    replica: launch.Replica
    serving_ca: Path
    front_proxy: trustme.CA
    clients: trustme.CA
    workdir: Path


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    """One replica whose serving certificate, client CA and requestheader CA all come from trustme."""
    work = tmp_path_factory.mktemp("trustme-e2e")
    serving, front_proxy, clients = trustme.CA(), trustme.CA(), trustme.CA()
    server = serving.issue_cert("127.0.0.1", "localhost")
    paths = {name: work / name for name in ("server.crt", "server.key", "serving-ca.crt", "fp-ca.crt", "client-ca.crt")}
    server.cert_chain_pems[0].write_to_path(str(paths["server.crt"]))
    server.private_key_pem.write_to_path(str(paths["server.key"]))
    serving.cert_pem.write_to_path(str(paths["serving-ca.crt"]))
    front_proxy.cert_pem.write_to_path(str(paths["fp-ca.crt"]))
    clients.cert_pem.write_to_path(str(paths["client-ca.crt"]))
    argv = shapes.serve_argv(
        paths["server.crt"], paths["server.key"], paths["fp-ca.crt"], [shapes.ALLOWED], paths["client-ca.crt"]
    )
    with run_replicas([argv]) as started:
        yield Setup(started[0], paths["serving-ca.crt"], front_proxy, clients, work)


def _present(setup: Setup, name: str, chain_pem: bytes, key_pem: bytes) -> httpx.Response:
    cert, key = setup.workdir / f"{name}.crt", setup.workdir / f"{name}.key"
    cert.write_bytes(chain_pem)
    key.write_bytes(key_pem)
    key.chmod(0o600)
    context = ssl.create_default_context(cafile=str(setup.serving_ca))
    context.load_cert_chain(cert, key)
    with httpx.Client(verify=context, http2=True, timeout=10) as http:
        return http.get(setup.replica.url + "/version", headers=[OPT_IN])


def _reports(response: httpx.Response) -> list[str]:
    return [v for k, v in response.headers.multi_items() if k.lower().startswith("endpoint-load-metrics")]


def _issued(issued: trustme.LeafCert) -> tuple[bytes, bytes]:
    return b"".join(p.bytes() for p in issued.cert_chain_pems), issued.private_key_pem.bytes()


def test_trustme_front_proxy_gets_a_report(setup: Setup) -> None:
    response = _present(
        setup, "fp", *_issued(setup.front_proxy.issue_cert("proxy.example", common_name=shapes.ALLOWED))
    )
    assert response.status_code == 200
    assert len(_reports(response)) == 1


def test_trustme_front_proxy_through_a_trustme_intermediate_gets_a_report(setup: Setup) -> None:
    child = setup.front_proxy.create_child_ca()
    response = _present(setup, "fp-int", *_issued(child.issue_cert("proxy.example", common_name=shapes.ALLOWED)))
    assert len(_reports(response)) == 1


def test_ordinary_client_with_the_allowed_name_gets_none(setup: Setup) -> None:
    response = _present(setup, "user", *_issued(setup.clients.issue_cert("user.example", common_name=shapes.ALLOWED)))
    assert response.status_code == 200
    assert _reports(response) == []


def _shaped(setup: Setup, edit: shapes.TbsEdit) -> tuple[bytes, bytes]:
    ca = shapes.Node(
        shapes._from_pem(setup.front_proxy.cert_pem.bytes()),
        shapes._trustme_key(setup.front_proxy.private_key_pem.bytes()),
    )
    node = shapes.resign(shapes.leaf(ca), ca.key, edit)
    return ssl.DER_cert_to_PEM_cert(node.der).encode(), node.key_pem()


HOSTILE = {
    # kube reads the LAST common name: "intruder"
    "two-cns-first-allowed": shapes.set_field(
        shapes.SUBJECT, shapes.name_der(shapes.cn(shapes.ALLOWED), shapes.cn("intruder"))
    ),
    "version-4": shapes.set_field(shapes.VERSION, shapes.tlv(der.context(0, True), shapes.tlv(der.INTEGER, b"\x03"))),
    "san-ip-of-three-bytes": shapes.add_extension(
        shapes.extension_der("2.5.29.17", shapes.tlv(der.SEQUENCE, shapes.tlv(0x87, b"\x0a\x00\x00")))
    ),
    "t61-cn-latin1": shapes.set_field(shapes.SUBJECT, shapes.name_der(shapes.cn(b"pr\xf8xy", der.T61_STRING))),
}


UNREADABLE = {"version-4"}


@pytest.mark.parametrize("shape", sorted(HOSTILE))
def test_hostile_certificate_gets_the_ordinary_response_without_report(setup: Setup, shape: str) -> None:
    baseline = _present(setup, "baseline-user", *_issued(setup.clients.issue_cert("u.example", common_name="user")))
    response = _present(setup, shape, *_shaped(setup, HOSTILE[shape]))
    assert _reports(response) == []
    assert_no_traceback(setup.replica)
    if shape in UNREADABLE:  # cryptography cannot read it: no certificate, the anonymous user's ordinary answer
        assert (response.status_code, response.content) == (baseline.status_code, baseline.content)
    else:  # readable but not verifiable: kube's x509 authenticator answers 401 (with its Status body)
        assert response.status_code == 401 and response.json()["reason"] == "Unauthorized"
