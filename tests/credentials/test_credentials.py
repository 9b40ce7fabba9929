"""The credential loader without sockets: start-up and reload read every file through the same function per kind,
and no module outside ``secure_orca.credentials`` opens a credential file."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization

from secure_orca import credential_flags as flags
from secure_orca import pki
from secure_orca.credentials import devpki, loader
from secure_orca.errors import CredentialError

PACKAGE = Path(__file__).resolve().parents[2] / "secure_orca"


@pytest.fixture()
def dev(tmp_path: Path) -> pki.DevPKI:
    return devpki.generate(tmp_path / "pki")


def files(dev: pki.DevPKI, **more: Any) -> loader.CredentialFiles:
    return loader.CredentialFiles(cert=dev.cert("server"), key=dev.key("server"), **more)


def reread(source: loader.Source) -> object:
    """What a reload installs for ``source``: the same read and parse as ``load``."""
    return source.parse(source.read())


def test_start_up_and_reload_read_a_ca_bundle_alike(dev: pki.DevPKI) -> None:
    ca = dev.cert("front_proxy_ca")
    other = pki.make_ca("other").cert_pem()
    ca.write_bytes(
        ca.read_bytes()
        + other.replace(b"BEGIN CERTIFICATE", b"BEGIN X509 CERTIFICATE").replace(
            b"END CERTIFICATE", b"END X509 CERTIFICATE"
        )
    )
    named = files(dev, requestheader_ca=ca, allowed_names=(pki.FRONT_PROXY_CN,))
    material, _ = loader.load(named)
    assert len(material.requestheader_cas) == 1
    (source,) = [s for s in loader.sources(named) if s.flag == flags.REQUESTHEADER_CA]
    assert reread(source) == material.requestheader_cas
    assert material.anchors() == material.requestheader_cas[0].public_bytes(serialization.Encoding.DER)


def test_the_rules_across_files_hold_at_start_and_on_reload(dev: pki.DevPKI) -> None:
    shared = files(dev, client_ca=dev.cert("client_ca"), requestheader_ca=dev.cert("client_ca"))
    with pytest.raises(CredentialError, match=f"^{flags.ALLOWED_NAMES}: must not be empty"):
        loader.load(shared)
    named = files(dev, client_ca=dev.cert("client_ca"), requestheader_ca=dev.cert("front_proxy_ca"))
    material, _ = loader.load(named)
    (source,) = [s for s in loader.sources(named) if s.flag == flags.REQUESTHEADER_CA]
    dev.cert("front_proxy_ca").write_bytes(dev.cert("client_ca").read_bytes())  # now shared, still no names
    with pytest.raises(CredentialError, match=f"^{flags.ALLOWED_NAMES}: must not be empty"):
        loader.with_value(material, source, reread(source))


def test_the_serving_pair_is_loaded_from_the_bytes_checked(dev: pki.DevPKI) -> None:
    import ssl

    material, _ = loader.load(files(dev))
    dev.key("server").write_bytes(b"")  # the file changes after the check: TLS still gets the checked bytes
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    material.serving.load_into(context)


# Client commands hand their own client certificate to their TLS context by path (after the loader checked the
# pair: loader.read_key_pair); the server's files never take that way.
CLIENT_SIDE = {"probe/transport.py", "hpackcost/wire.py", "lab/oobcost.py"}


def test_only_the_loader_opens_credential_files() -> None:
    """``read_credential`` and path-taking TLS loaders are called inside ``secure_orca.credentials`` only."""
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        if path.parent.name == "credentials":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute | ast.Name):
                name = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
                if name == "read_credential" or (
                    name == "load_verify_locations"
                    and node.keywords
                    and any(k.arg in ("cafile", "capath") for k in node.keywords)
                ):
                    offenders.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {name}")
                if name == "load_cert_chain" and str(path.relative_to(PACKAGE)) not in CLIENT_SIDE:
                    offenders.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {name}")
    assert offenders == []
