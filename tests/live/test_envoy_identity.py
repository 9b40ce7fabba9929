"""Envoy as kube's authenticating front proxy, live: what a replica behind it receives as identity headers.

A real Envoy (the generated bootstrap) in front of a real ``secure-orca serve`` whose ``--proxy`` route forwards to
an echo backend on loopback; the echo returns the identity headers it received. Clients are httpx over HTTP/2 and
HTTP/1.1 with certificates minted here from the development client CA, with subjects built to trick a parser.
"""

from __future__ import annotations

import http.server
import json
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography import x509
from cryptography.x509.oid import NameOID

from secure_orca import pki
from secure_orca.lab import launcher as lb
from secure_orca.lab import replicas as launch
from tests.conftest import issue, load_issued
from tests.replicas import deployment

pytestmark = [pytest.mark.envoy, pytest.mark.skipif(not lb.envoy_available(), reason="envoy not installed")]
IDENTITY = ("x-remote-user", "x-remote-group", "x-remote-uid")
AUTHENTICATED = "system:authenticated"  # added by a replica that authenticates before proxying


class Echo(http.server.BaseHTTPRequestHandler):
    """Answers every GET with the identity headers (and Authorization) it received, as JSON pairs."""

    def do_GET(self) -> None:
        # http.server decodes header bytes as Latin-1; kube (Go) reads them as UTF-8: do as kube does.
        seen = [(k.lower(), v.encode("latin-1").decode("utf-8", "replace")) for k, v in self.headers.items()]
        wanted = [(k, v) for k, v in seen if k in IDENTITY or k.startswith("x-remote-extra-") or k == "authorization"]
        body = json.dumps(wanted).encode()
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


TOKEN = "envoy-identity-test-token-0123456789"
UIDS = {"token-user": "uid-7"}  # the only user with a uid: certificates here carry none


@pytest.fixture(scope="module")
def envoy_url(dev_pki: pki.DevPKI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    echo = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    threading.Thread(target=echo.serve_forever, daemon=True).start()
    route = f"/echo=http://127.0.0.1:{echo.server_address[1]}"
    tokens = tmp_path_factory.mktemp("tokens") / "tokens.csv"
    tokens.write_text(f'{TOKEN},token-user,uid-7,"team-a,team-b"\n')
    tokens.chmod(0o600)
    flags = ["--proxy", route, "--token-auth-file", str(tokens), *lb.replica_flags(dev_pki, "front-proxy")]
    argv = launch.serve_argv(dev_pki, flags)
    try:
        with deployment(dev_pki, [argv], option="front-proxy") as deployed:
            yield deployed.envoy.url
    finally:
        echo.shutdown()


def mint(dev_pki: pki.DevPKI, root: Path, name: str, subject: x509.Name) -> tuple[Path, Path]:
    """A clientAuth leaf from the development client CA with exactly ``subject``, written to ``root``."""
    issued = issue(load_issued(dev_pki.cert("client_ca"), dev_pki.key("client_ca")), list(subject.rdns))
    paths = root / f"{name}.crt", root / f"{name}.key"
    paths[0].write_bytes(issued.cert_pem())
    paths[1].write_bytes(issued.key_pem())
    return paths


def echo(url: str, dev_pki: pki.DevPKI, cert: tuple[Path, Path] | None, http2: bool, **kw: Any) -> httpx.Response:
    context = ssl.create_default_context(cafile=str(dev_pki.cert("ca")))
    if cert is not None:
        context.load_cert_chain(*cert)
    with httpx.Client(verify=context, http2=http2, timeout=10) as client:
        return client.get(url + "/echo", **kw)


def identity(response: httpx.Response) -> tuple[list[str], list[str]]:
    assert response.status_code == 200, response.text
    pairs = response.json()
    users = [v for k, v in pairs if k == "x-remote-user"]
    groups = [v for k, v in pairs if k == "x-remote-group" and v != AUTHENTICATED]
    assert not [k for k, _ in pairs if k.startswith("x-remote-extra-")]
    assert [v for k, v in pairs if k == "x-remote-uid"] in ([], [UIDS.get(users[0] if users else "")])
    return users, groups


def attr(oid: x509.ObjectIdentifier, value: str) -> x509.NameAttribute:
    return x509.NameAttribute(oid, value)


CN, ORG = NameOID.COMMON_NAME, NameOID.ORGANIZATION_NAME
TRICKS = {
    # name: (subject, user kube reads (Go: the last CN), groups (each O, in order))
    "plain": (x509.Name([attr(ORG, "dev"), attr(CN, "alice")]), "alice", ["dev"]),
    "comma-in-cn": (x509.Name([attr(CN, "alice,O=system:masters")]), "alice,O=system:masters", []),
    "plus-equals-in-cn": (x509.Name([attr(CN, "a+CN=system:admin")]), "a+CN=system:admin", []),
    "quotes-backslash": (x509.Name([attr(CN, 'al"ice\\,O=x')]), 'al"ice\\,O=x', []),
    "two-cns": (x509.Name([attr(CN, "system:admin"), attr(CN, "alice")]), "alice", []),
    "comma-in-o": (x509.Name([attr(ORG, "system:masters,dev"), attr(CN, "bob")]), "bob", ["system:masters,dev"]),
    "multi-valued-rdn": (
        x509.Name(
            [
                x509.RelativeDistinguishedName([attr(ORG, "g1"), attr(CN, "carol")]),
                x509.RelativeDistinguishedName([attr(ORG, "g2")]),
            ]
        ),
        "carol",
        ["g1", "g2"],
    ),
    "non-ascii": (x509.Name([attr(ORG, "équipe"), attr(CN, "José")]), "José", ["équipe"]),
}


@pytest.mark.parametrize("http2", [True, False], ids=["h2", "http1.1"])
@pytest.mark.parametrize("trick", sorted(TRICKS))
def test_identity_is_the_certificates_whatever_its_subject(
    envoy_url: str, dev_pki: pki.DevPKI, tmp_path: Path, trick: str, http2: bool
) -> None:
    subject, user, groups = TRICKS[trick]
    cert = mint(dev_pki, tmp_path, trick, subject)
    forged = [("X-Remote-User", "system:admin"), ("x-remote-GROUP", "system:masters"), ("X-REMOTE-USER", "root")]
    response = echo(envoy_url, dev_pki, cert, http2, headers=[*forged, ("X-Remote-Extra-Scopes", "all")])
    users, seen_groups = identity(response)
    assert users == [user] and seen_groups == groups


@pytest.mark.parametrize("value", [" system:admin", "system:admin ", "line\nbreak", "nul\x00byte"])
def test_a_subject_that_cannot_travel_faithfully_is_refused(
    envoy_url: str, dev_pki: pki.DevPKI, tmp_path: Path, value: str
) -> None:
    cert = mint(dev_pki, tmp_path, "untravelled", x509.Name([attr(CN, value)]))
    response = echo(envoy_url, dev_pki, cert, True)
    assert response.status_code == 400 and "x-remote" not in response.text


@pytest.mark.parametrize("http2", [True, False], ids=["h2", "http1.1"])
def test_token_clients_pass_through_and_are_themselves(envoy_url: str, dev_pki: pki.DevPKI, http2: bool) -> None:
    """Envoy asserts nothing for a client without a certificate: the replica authenticates its token (and, as
    kube does, removes Authorization before proxying), whatever identity headers the client forged."""
    forged = [("X-Remote-User", "system:admin"), ("X-Remote-Group", "system:masters"), ("X-Remote-Uid", "0")]
    headers = [*forged, ("Authorization", f"Bearer {TOKEN}"), ("X-Remote-Extra-Acme", "1")]
    response = echo(envoy_url, dev_pki, None, http2, headers=headers)
    assert identity(response) == (["token-user"], ["team-a", "team-b"])
    assert ["x-remote-uid", "uid-7"] in response.json()
    assert not [k for k, _ in response.json() if k == "authorization"]


@pytest.mark.parametrize("http2", [True, False], ids=["h2", "http1.1"])
def test_anonymous_clients_stay_anonymous(envoy_url: str, dev_pki: pki.DevPKI, http2: bool) -> None:
    forged = [("X-Remote-User", "system:admin"), ("x-remote-group", "system:masters")]
    response = echo(envoy_url, dev_pki, None, http2, headers=forged)
    assert identity(response) == (["system:anonymous"], ["system:unauthenticated"])
