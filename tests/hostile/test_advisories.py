"""The advisories of peer gateways, each held as a test against a live ``serve`` with a
``--proxy`` upstream that records what it receives.

- CVE-2023-27493 (Envoy): certificate fields copied into headers unescaped. A client certificate whose CN or
  O holds CR, LF or a comma never splits or injects an upstream identity header.
- CVE-2021-32777 (Envoy): a repeated header read one way by one layer and another way by the next. Repeated
  opt-in, repeated ``X-Remote-User`` from the front proxy, repeated ``Authorization``: kube's rule (the first
  value, docs/authentication.md), and the upstream sees only what we built.
- CVE-2018-1002105, CVE-2022-3172, CVE-2020-8559 (kube): the proxy never follows an upstream redirect nor
  relays one (502, as kube's RejectForwardingRedirects), never tunnels after an upgrade (a 101 it did not
  ask for is refused), and bytes sent after a refused upgrade are a new, re-authenticated request.
- oauth2-proxy CVE-2026-40575 and GHSA-5hvv-m4w4-gf6v: no X-Forwarded-* header, source address or User-Agent
  grants a report or an identity.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator

import httpx
import pytest

from secure_orca import pki
from secure_orca.lab import replicas as launch
from secure_orca.server.proxy.forward import UNSENDABLE_USER
from tests.replicas import run_replicas

from ..conftest import ClientCert, fp_flags, load_issued, write_client
from .backends import Recorded, hostile_backend
from .wire import connect, tls_context, write_private

REVIEW = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
UP = "/apis/up"
OPT_IN = "endpoint-load-metrics-request"
REPORT = "endpoint-load-metrics"
TOKENS = {"good-token": "tokenuser", "other-token": "otheruser"}
PROTOCOLS = ["h2", "http1.1"]


@pytest.fixture(scope="module")
def rig(dev_pki: pki.DevPKI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[launch.Replica, Recorded]]:
    tokens = tmp_path_factory.mktemp("tokens") / "tokens.csv"
    write_private(tokens, "".join(f"{t},{u},uid-{u}\n" for t, u in TOKENS.items()).encode())
    with hostile_backend() as (url, recorded):
        flags = [
            *fp_flags(dev_pki),
            "--requestheader-missing-user=unauthorized",
            "--token-auth-file",
            str(tokens),
            "--proxy",
            f"{UP}={url}",
        ]
        with run_replicas([launch.serve_argv(dev_pki, flags)]) as (replica,):
            yield replica, recorded


def client(dev_pki: pki.DevPKI, protocol: str, cert: ClientCert | None = None) -> httpx.Client:
    context = ssl.create_default_context(cafile=str(dev_pki.cert("ca")))
    if cert is not None:
        context.load_cert_chain(cert.cert, cert.key)
    return httpx.Client(verify=context, http2=protocol == "h2", http1=protocol != "h2", timeout=10)


def remote(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The identity headers an upstream received, names lowercased and ``_`` read as ``-``."""
    return [(n.lower().replace("_", "-"), v) for n, v in headers if n.lower().replace("_", "-").startswith("x-remote-")]


Seen = list[list[tuple[str, str]]]


def proxied(
    rig: tuple[launch.Replica, Recorded],
    dev_pki: pki.DevPKI,
    protocol: str,
    cert: ClientCert | None,
    headers: list[tuple[str, str]],
    path: str = "/x",
) -> tuple[httpx.Response, Seen]:
    """One GET through the proxy, and the headers of every request the upstream received for it."""
    replica, recorded = rig
    before = len(recorded.headers)
    with client(dev_pki, protocol, cert) as http:
        response = http.get(replica.url + UP + path, headers=headers)
    return response, recorded.headers[before:]


# --- CVE-2023-27493: certificate fields in upstream headers -------------------------------------------------

HOSTILE_NAMES = {
    "crlf-cn": ("alice\r\nX-Remote-Group: system:masters", None),
    "lf-cn": ("alice\nX-Remote-User: system:admin", None),
    "cr-o": ("bob", "devs\rX-Remote-Group: system:masters"),
    "comma-cn": ("carol, system:admin", None),
    "comma-o": ("dave", "devs,system:masters"),
}


@pytest.fixture(scope="module")
def hostile_certs(dev_pki: pki.DevPKI, tmp_path_factory: pytest.TempPathFactory) -> dict[str, ClientCert]:
    root = tmp_path_factory.mktemp("hostile-names")
    client_ca = load_issued(dev_pki.cert("client_ca"), dev_pki.key("client_ca"))
    return {
        key: write_client(root, key, pki.issue(client_ca, cn, organization=o)) for key, (cn, o) in HOSTILE_NAMES.items()
    }


@pytest.mark.parametrize("name", HOSTILE_NAMES)
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_certificate_fields_never_split_or_inject_an_upstream_header(rig, dev_pki, hostile_certs, protocol, name):
    cn, organization = HOSTILE_NAMES[name]
    response, seen = proxied(rig, dev_pki, protocol, hostile_certs[name], [])
    if any(c in cn + (organization or "") for c in "\r\n"):
        # No HTTP/1.1 header can carry the name: the upstream is never asked (kube's Go transport refuses
        # such a field value too), and the client gets a refusal, not a forged identity.
        assert seen == [] and response.status_code == 502, (response.status_code, seen)
        assert response.json()["message"] == UNSENDABLE_USER  # refused by us, before any transport
        return
    assert response.status_code == 200
    (headers,) = seen
    groups = [organization] if organization else []
    assert sorted(remote(headers)) == sorted(
        [
            ("x-remote-user", cn),
            *[("x-remote-group", g) for g in [*groups, "system:authenticated"]],
            ("x-remote-extra-authentication.kubernetes.io%2fcredential-id", remote(headers)[-1][1]),
        ]
    ), headers


# --- CVE-2021-32777: repeated headers -----------------------------------------------------------------------


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_repeated_opt_in_gets_no_report_and_never_reaches_the_upstream(rig, dev_pki, client_certs, protocol):
    for values in (["TEXT", "TEXT"], ["TEXT", "BIN"], ["TEXT", ""]):
        response, (headers,) = proxied(
            rig,
            dev_pki,
            protocol,
            client_certs["front-proxy"],
            [(OPT_IN, v) for v in values] + [("x-remote-user", "lb")],
        )
        assert response.status_code == 200 and REPORT not in response.headers, values
        assert not [n for n, _ in headers if n.lower().startswith("endpoint-load-metrics")], headers
    single, _ = proxied(
        rig, dev_pki, protocol, client_certs["front-proxy"], [(OPT_IN, "TEXT"), ("x-remote-user", "lb")]
    )
    assert REPORT in single.headers  # the positive control


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_repeated_front_proxy_user_is_read_as_kube_reads_it(rig, dev_pki, client_certs, protocol) -> None:
    """kube's headerValue: the first value of the first configured header whose first value is non-empty."""
    response, (headers,) = proxied(
        rig, dev_pki, protocol, client_certs["front-proxy"], [("X-Remote-User", "alice"), ("x-remote-user", "mallory")]
    )
    assert response.status_code == 200
    assert [v for n, v in remote(headers) if n == "x-remote-user"] == ["alice"]
    # An empty first value is no user, even with a second one: not the requestheader's request, so 401.
    empty_first, seen = proxied(
        rig, dev_pki, protocol, client_certs["front-proxy"], [("X-Remote-User", ""), ("x-remote-user", "mallory")]
    )
    assert empty_first.status_code == 401 and seen == []


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_repeated_authorization_is_read_as_go_reads_it(rig, dev_pki, protocol) -> None:
    """Go's Header.Get: the first Authorization header decides; none goes upstream."""

    def bearers(*tokens: str) -> tuple[httpx.Response, Seen]:
        return proxied(rig, dev_pki, protocol, None, [("Authorization", f"Bearer {token}") for token in tokens])

    first_good, (headers,) = bearers("good-token", "nope")
    assert first_good.status_code == 200
    assert [v for n, v in remote(headers) if n == "x-remote-user"] == ["tokenuser"]
    assert not [n for n, _ in headers if n.lower() == "authorization"], headers
    first_bad, seen = bearers("nope", "good-token")
    assert first_bad.status_code == 401 and seen == []
    _, (headers,) = bearers("other-token", "good-token")
    assert [v for n, v in remote(headers) if n == "x-remote-user"] == ["otheruser"]


# --- CVE-2018-1002105, CVE-2022-3172, CVE-2020-8559: redirects and upgrades ---------------------------------


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_an_upstream_redirect_is_neither_followed_nor_relayed(rig, dev_pki, protocol) -> None:
    _, recorded = rig
    response, seen = proxied(rig, dev_pki, protocol, None, [], "/redirect")
    assert len(seen) == 1 and "/stolen" not in recorded.paths
    assert response.status_code == 502 and "location" not in response.headers, response.headers
    assert "redirect" in response.text


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_an_unrequested_101_is_refused_and_never_tunnelled(rig, dev_pki, protocol) -> None:
    response, seen = proxied(rig, dev_pki, protocol, None, [], "/switch")
    assert len(seen) == 1 and response.status_code == 502
    assert b"raw tunnel bytes" not in response.content
    after, _ = proxied(rig, dev_pki, protocol, None, [], "/after")  # the proxy still serves
    assert (after.status_code, after.text) == (200, "upstream")


@pytest.mark.parametrize("upgrade", ["websocket", "SPDY/3.1", "h2c"])
def test_bytes_after_a_refused_upgrade_are_a_new_authenticated_request(rig, dev_pki, upgrade) -> None:
    """kubectl exec's upgrade, a WebSocket and h2c, each followed at once by a request that forges an identity:
    no upgrade header reaches the upstream, and what follows is authenticated afresh or dropped."""
    replica, recorded = rig
    before = len(recorded.headers)
    smuggled = f"GET {UP}/smuggled HTTP/1.1\r\nHost: localhost\r\nX-Remote-User: system:admin\r\n\r\n"
    request = (
        f"GET {UP}/upgrade HTTP/1.1\r\nHost: localhost\r\nConnection: Upgrade\r\nUpgrade: {upgrade}\r\n"
        "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        "HTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA\r\n\r\n" + smuggled
    )
    with connect(replica, tls_context(dev_pki, "http/1.1"), timeout=3) as sock:
        sock.sendall(request.encode())
        answer = b""
        try:
            while chunk := sock.recv(65536):
                answer += chunk
        except TimeoutError:
            pass
    assert not answer.startswith(b"HTTP/1.1 101"), answer[:200]
    for headers in recorded.headers[before:]:
        names = {n.lower() for n, _ in headers}
        assert not names & {"upgrade", "http2-settings"}, headers  # both connection-specific (RFC 9113 3.2.1)
        assert remote(headers) == [("x-remote-user", "system:anonymous"), ("x-remote-group", "system:unauthenticated")]


# --- oauth2-proxy CVE-2026-40575, GHSA-5hvv-m4w4-gf6v: forwarded headers, source address, User-Agent --------

SPOOFS = [
    ("X-Forwarded-For", "127.0.0.1"),
    ("X-Real-IP", "127.0.0.1"),
    ("Forwarded", "for=127.0.0.1;proto=https"),
    ("X-Forwarded-Proto", "https"),
    ("X-Forwarded-Host", "localhost"),
    ("X-Forwarded-User", "system:admin"),
    ("X-Forwarded-Email", "admin@example.com"),
    ("X-Forwarded-Groups", "system:masters"),
    ("X-Auth-Request-User", "system:admin"),
    ("X-Forwarded-Preferred-Username", "system:admin"),
    ("X-Forwarded-Client-Cert", f'Subject="CN={pki.FRONT_PROXY_CN}";URI='),
    ("X-Client-Cert", f"CN={pki.FRONT_PROXY_CN}"),
    ("X-SSL-Client-Verify", "SUCCESS"),
    ("X-SSL-Client-S-DN", f"CN={pki.FRONT_PROXY_CN}"),
    ("User-Agent", "envoy"),
]
AGENTS = ["envoy", "kube-probe/1.38", "Go-http-client/2.0", "grpc-go/1.70", "kube-apiserver-admission"]


@pytest.mark.parametrize("agent", AGENTS)
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_no_forwarded_header_address_or_agent_grants_anything(rig, dev_pki, protocol, agent) -> None:
    """From loopback (the address a sidecar load balancer would use), with every spoof at once."""
    headers = [*[(n, v) for n, v in SPOOFS if n != "User-Agent"], ("User-Agent", agent), (OPT_IN, "TEXT")]
    response, (seen,) = proxied(rig, dev_pki, protocol, None, headers)
    assert response.status_code == 200 and REPORT not in response.headers
    assert remote(seen) == [("x-remote-user", "system:anonymous"), ("x-remote-group", "system:unauthenticated")]
    replica, _ = rig
    with client(dev_pki, protocol) as http:
        review = http.post(replica.url + REVIEW, headers=headers, content=b"{}")
    assert review.status_code == 201 and REPORT not in review.headers
    assert review.json()["status"]["userInfo"] == {"username": "system:anonymous", "groups": ["system:unauthenticated"]}
