"""TLS resumption across identities.

A load balancer resumes sessions. Before the fix a front proxy chaining through an intermediate got reports
on a fresh connection and none on a resumed one (TLS 1.2 and 1.3): a session ticket carries the leaf, not
the intermediates. Where client certificates are requested no session is resumed at all:
no tickets, and no server-side session cache, so TLS 1.2 session-ID resumption is off too.
"""

from __future__ import annotations

import socket
import ssl
from pathlib import Path

import pytest

from secure_orca import pki
from secure_orca.lab.replicas import Replica

from ..conftest import ClientCert, load_issued, write_client

VERSIONS = [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3]


def context(dev_pki: pki.DevPKI, cert: ClientCert, version: ssl.TLSVersion) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(dev_pki.cert("ca")))
    ctx.load_cert_chain(cert.cert, cert.key)
    ctx.minimum_version = ctx.maximum_version = version
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx


def opt_in(
    replica: Replica, ctx: ssl.SSLContext, session: ssl.SSLSession | None = None
) -> tuple[bool | None, bool, ssl.SSLSession | None]:
    """One opted-in HTTP/1.1 request on a new connection: (session reused, report attached, session)."""
    raw = socket.create_connection((replica.host, replica.port), timeout=10)
    with ctx.wrap_socket(raw, server_hostname="localhost", session=session) as sock:
        sock.sendall(
            b"GET /version HTTP/1.1\r\nHost: localhost\r\nendpoint-load-metrics-request: TEXT\r\n"
            b"Connection: close\r\n\r\n"
        )
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
        head = data.split(b"\r\n\r\n", 1)[0].lower()
        return sock.session_reused, b"\r\nendpoint-load-metrics:" in head, sock.session


@pytest.fixture(scope="module")
def via_intermediate(dev_pki: pki.DevPKI, tmp_path_factory: pytest.TempPathFactory) -> ClientCert:
    fp_ca = load_issued(dev_pki.cert("front_proxy_ca"), dev_pki.key("front_proxy_ca"))
    intermediate = pki.issue(fp_ca, "front-proxy-intermediate", is_ca=True, eku=None)
    root: Path = tmp_path_factory.mktemp("resumption")
    return write_client(root, "fp-int", pki.issue(intermediate, pki.FRONT_PROXY_CN), intermediate)


@pytest.mark.parametrize("version", VERSIONS, ids=lambda v: v.name)
def test_a_second_connection_keeps_the_grant(secured_replica, dev_pki, via_intermediate, version) -> None:
    ctx = context(dev_pki, via_intermediate, version)
    _, first_granted, session = opt_in(secured_replica, ctx)
    assert first_granted
    for _ in range(3):  # as a load balancer reconnecting with the session it holds
        _, granted, session = opt_in(secured_replica, ctx, session)
        assert granted


@pytest.mark.parametrize("version", VERSIONS, ids=lambda v: v.name)
def test_no_session_is_resumed(secured_replica, dev_pki, client_certs, version) -> None:
    """The words of the adapter (``make_server_context``): every connection is a full handshake."""
    ctx = context(dev_pki, client_certs["front-proxy"], version)
    _, _, session = opt_in(secured_replica, ctx)
    reused = [opt_in(secured_replica, ctx, session)[0] for _ in range(3)]
    assert reused == [False, False, False]


@pytest.mark.parametrize("version", VERSIONS, ids=lambda v: v.name)
def test_identity_follows_the_session_not_the_certificate_loaded(
    secured_replica, dev_pki, client_certs, version
) -> None:
    """A session from a refused identity, offered by a client that now holds the front proxy's certificate:
    if the server resumes it, the identity is the session's (no report); only a full handshake grants."""
    ctx = context(dev_pki, client_certs["user"], version)
    _, granted, session = opt_in(secured_replica, ctx)
    assert not granted
    fp = client_certs["front-proxy"]
    ctx.load_cert_chain(fp.cert, fp.key)  # the same context (a session is bound to it), another identity
    reused, granted, _ = opt_in(secured_replica, ctx, session)
    assert granted is not reused
