"""No anonymous amplification at the handshake.

A TLS 1.3 ClientHello offering only ffdhe8192 cost the server about 120 ms of CPU on its event loop, with no
credentials. The server now offers exactly Go's key-exchange groups (X25519, P-256, P-384, P-521) and, for TLS 1.2,
ECDHE suites only: a finite-field-only client is refused, Go's groups still connect. The OpenSSL command-line
client is the peer (Python's ssl cannot choose a client's groups either)."""

from __future__ import annotations

import contextlib
import shutil
import ssl
import subprocess

import pytest

from secure_orca import pki
from secure_orca.credentials import loader
from secure_orca.lab.replicas import Replica
from secure_orca.server.http import tls_policy
from secure_orca.server.http.tls import make_server_context

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")


def s_client(replica: Replica, dev_pki: pki.DevPKI, *options: str) -> subprocess.CompletedProcess[str]:
    argv = ["openssl", "s_client", "-connect", f"{replica.host}:{replica.port}", "-CAfile", str(dev_pki.cert("ca"))]
    return subprocess.run(
        [*argv, "-brief", *options], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30
    )


@pytest.mark.parametrize("version", ["-tls1_3", "-tls1_2"])
@pytest.mark.parametrize("group", ["ffdhe2048", "ffdhe8192", "ffdhe2048:ffdhe3072:ffdhe4096:ffdhe6144:ffdhe8192"])
def test_finite_field_groups_are_refused(secured_replica, dev_pki, group, version) -> None:
    done = s_client(secured_replica, dev_pki, "-groups", group, version)
    assert done.returncode != 0 and "CONNECTION ESTABLISHED" not in done.stderr, done.stderr


@pytest.mark.parametrize("version", ["-tls1_3", "-tls1_2"])
@pytest.mark.parametrize("group", tls_policy.GROUPS)
def test_go_groups_still_connect(secured_replica, dev_pki, group, version) -> None:
    """In TLS 1.2 the groups also name the curves a client accepts for ECDSA signatures (RFC 8422 section 5.1):
    the server's P-256 key needs P-256 beside the group under test, as every Go client offers both."""
    offered = group if version == "-tls1_3" or group == "P-256" else f"{group}:P-256"
    done = s_client(secured_replica, dev_pki, "-groups", offered, version)
    assert done.returncode == 0 and "CONNECTION ESTABLISHED" in done.stderr, done.stderr
    assert "Verification: OK" in done.stderr


def test_no_finite_field_or_static_rsa_suite_for_tls12(dev_pki) -> None:
    material, _ = loader.load(
        loader.CredentialFiles(dev_pki.cert("server"), dev_pki.key("server"), dev_pki.cert("client_ca"))
    )
    context = make_server_context(material.serving, material.anchors())
    tls12 = [cipher for cipher in context.get_ciphers() if cipher["protocol"] == "TLSv1.2"]
    assert tls12 and {cipher["kea"] for cipher in tls12} == {"kx-ecdhe"}, [c["name"] for c in tls12]
    assert all(cipher["aead"] for cipher in tls12), [c["name"] for c in tls12]


def test_in_memory_handshake_offering_only_ffdhe_fails(dev_pki) -> None:
    """The same refusal without sockets: a client context restricted to ffdhe8192 against the server context."""
    material, _ = loader.load(loader.CredentialFiles(dev_pki.cert("server"), dev_pki.key("server")))
    server_context = make_server_context(material.serving, material.anchors())
    client_context = ssl.create_default_context(cafile=str(dev_pki.cert("ca")))
    client_context.minimum_version = ssl.TLSVersion.TLSv1_3
    tls_policy.restrict_groups(client_context, ("ffdhe8192",))
    server_in, server_out, client_in, client_out = (ssl.MemoryBIO() for _ in range(4))
    server = server_context.wrap_bio(server_in, server_out, server_side=True)
    client = client_context.wrap_bio(client_in, client_out, server_hostname="localhost")
    with pytest.raises(ssl.SSLError):
        for _ in range(10):
            for side in (client, server):
                with contextlib.suppress(ssl.SSLWantReadError):
                    side.do_handshake()
            server_in.write(client_out.read())
            client_in.write(server_out.read())
