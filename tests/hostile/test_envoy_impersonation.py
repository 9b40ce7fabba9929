"""Through the generated Envoy, a client must not be able to name its own identity. Today it can: Envoy
presents the front-proxy certificate upstream and forwards client-sent X-Remote-* unchanged, so the replica
believes them. This test states the requirement and is expected to fail until issue 11 makes Envoy an
authenticating proxy (strict: it will report when that lands, so the marker is removed then)."""

from __future__ import annotations

import ssl

import httpx
import pytest

from secure_orca import pki
from secure_orca.envoy import bootstrap as envoy
from secure_orca.envoy import launcher as lb
from secure_orca.lab import replicas as launch

pytestmark = pytest.mark.skipif(not lb.envoy_available(), reason="envoy not installed (extra 'envoy')")


@pytest.mark.xfail(strict=True, reason="issue 11: Envoy forwards client-sent X-Remote-* with the front-proxy cert")
def test_a_client_cannot_name_itself_through_envoy(dev_pki: pki.DevPKI) -> None:
    argv = [launch.serve_argv(dev_pki, lb.replica_flags(dev_pki, "front-proxy"))]
    with lb.deployment(dev_pki, argv, option="front-proxy", timing=envoy.TEST_TIMING) as deployed:
        trust = ssl.create_default_context(cafile=str(dev_pki.cert("ca")))
        with httpx.Client(verify=trust, http2=True, trust_env=False) as client:
            review = client.post(
                deployed.envoy.url + "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                headers={"X-Remote-User": "system:admin", "X-Remote-Group": "system:masters"},
                content=b"{}",
            )
    assert review.status_code in (201, 401)
    if review.status_code == 201:
        info = review.json()["status"]["userInfo"]
        assert info["username"] != "system:admin" and "system:masters" not in info.get("groups", [])
