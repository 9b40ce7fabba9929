"""The generated manifests against a hostile cluster neighbour: both Pods pass Pod Security "restricted" as the
admission plugin evaluates it (tests/podsecurity.py mirrors its checks), in a namespace that enforces it; neither
mounts a service-account token; and NetworkPolicies let only the load balancer reach the replicas' serving port,
only the operator's monitoring selector reach their metrics, and nothing but clients reach Envoy's listener."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from secure_orca import pki
from secure_orca.cli import build_parser
from secure_orca.cli import deploy as deploy_cli
from secure_orca.deploy import manifests as m
from secure_orca.deploy import yamltext
from tests import podsecurity
from tests.networkpolicy import Peer, admits

OPTIONS = ("front-proxy,shared-secret", "load-reader", "header-only")
MONITORING = [
    "--metrics-namespace-selector",
    "kubernetes.io/metadata.name=monitoring",
    "--metrics-pod-selector",
    "app.kubernetes.io/name=prometheus",
]


def _documents(certs: Path, *flags: str) -> list[dict[str, Any]]:
    files = deploy_cli.generate(build_parser().parse_args(["deploy", "--certs-dir", str(certs), *flags]))
    return [doc for name, text in files.items() if name.endswith(".yaml") for doc in yamltext.load(text)]


@pytest.fixture(scope="module", params=OPTIONS)
def documents(request: pytest.FixtureRequest, dev_pki: pki.DevPKI) -> list[dict[str, Any]]:
    return _documents(dev_pki.root, "--option", request.param)


def test_both_pods_pass_restricted(documents: list[dict[str, Any]]) -> None:
    templates = podsecurity.pod_templates(documents)
    assert sorted(templates) == [m.APP, m.LB]
    for name, (meta, spec) in templates.items():
        assert podsecurity.evaluate(meta, spec) == {}, name


def _container(spec: dict[str, Any]) -> dict[str, Any]:
    return dict(spec["containers"][0].setdefault("securityContext", {}))


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """A mutation of a Pod spec: ``pod.a.b`` or ``container.a.b`` set to ``value`` (None: removed)."""
    where, *keys = path.split(".")

    def mutate(spec: dict[str, Any]) -> None:
        node = spec if where == "pod" else spec["containers"][0]
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        if value is None:
            del node[keys[-1]]
        else:
            node[keys[-1]] = value

    return mutate


# One violation per control of the restricted profile (pod-security-standards table), each as kube spells it.
VIOLATIONS: dict[str, Callable[[dict[str, Any]], None]] = {
    "windowsHostProcess": _set("pod.securityContext.windowsOptions", {"hostProcess": True}),
    "hostNamespaces": _set("pod.hostNetwork", True),
    "privileged": _set("container.securityContext.privileged", True),
    "hostPorts": _set("container.ports", [{"containerPort": 6443, "hostPort": 6443}]),
    "appArmorProfile": _set("container.securityContext.appArmorProfile", {"type": "Unconfined"}),
    "seLinuxOptions": _set("pod.securityContext.seLinuxOptions", {"type": "spc_t"}),
    "sysctls": _set("pod.securityContext.sysctls", [{"name": "kernel.msgmax", "value": "65536"}]),
    "hostProbesAndHostLifecycle": _set("container.readinessProbe.httpGet.host", "10.0.0.1"),
    "restrictedVolumes": lambda spec: spec["volumes"].append({"name": "root", "hostPath": {"path": "/"}}),
    "allowPrivilegeEscalation": _set("container.securityContext.allowPrivilegeEscalation", None),
    "runAsNonRoot": _set("pod.securityContext.runAsNonRoot", None),
    "runAsUser": _set("container.securityContext.runAsUser", 0),
    "seccompProfile_restricted": _set("pod.securityContext.seccompProfile", None),
    "capabilities_restricted": _set("container.securityContext.capabilities.add", ["NET_ADMIN"]),
    "procMount_restricted": _set("container.securityContext.procMount", "Unmasked"),
}


def test_every_control_of_the_profile_has_a_violation() -> None:
    assert set(VIOLATIONS) == set(podsecurity.RESTRICTED)


@pytest.mark.parametrize("control", sorted(VIOLATIONS))
def test_each_control_refuses_its_violation(dev_pki: pki.DevPKI, control: str) -> None:
    """The checker is not vacuous: a schema-valid Pod that breaks one control is refused by that control alone."""
    deployment = next(
        d for d in _documents(dev_pki.root) if d["kind"] == "Deployment" and d["metadata"]["name"] == m.APP
    )
    broken = copy.deepcopy(deployment)
    spec = broken["spec"]["template"]["spec"]
    VIOLATIONS[control](spec)
    kubernetes_validate.validate(broken, "1.37.0", strict=True)
    assert set(podsecurity.evaluate(broken["spec"]["template"]["metadata"], spec)) == {control}


def test_the_namespace_enforces_restricted(documents: list[dict[str, Any]]) -> None:
    (namespace,) = [d for d in documents if d["kind"] == "Namespace"]
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def test_no_pod_mounts_a_service_account_token(documents: list[dict[str, Any]]) -> None:
    for name, (_, spec) in podsecurity.pod_templates(documents).items():
        assert spec.get("automountServiceAccountToken") is False, name


def _labels(documents: list[dict[str, Any]], name: str) -> dict[str, str]:
    (deployment,) = [d for d in documents if d["kind"] == "Deployment" and d["metadata"]["name"] == name]
    return dict(deployment["spec"]["template"]["metadata"]["labels"])


NAMESPACE = "secure-orca"
PROMETHEUS = {"app.kubernetes.io/name": "prometheus"}


def test_only_the_load_balancer_reaches_the_serving_port(dev_pki: pki.DevPKI) -> None:
    docs = _documents(dev_pki.root, *MONITORING)
    server, lb = _labels(docs, m.APP), _labels(docs, m.LB)
    assert admits(docs, NAMESPACE, server, m.SERVE_PORT, Peer(NAMESPACE, lb))
    for stranger in (
        Peer(NAMESPACE, {"app": "anything"}),  # another Pod of the namespace
        Peer("default", lb),  # the load balancer's labels, but another namespace
        Peer("monitoring", PROMETHEUS),  # the monitoring Pods: metrics only
        Peer(NAMESPACE, server),  # another replica
    ):
        assert not admits(docs, NAMESPACE, server, m.SERVE_PORT, stranger), stranger


def test_only_the_monitoring_selector_reaches_metrics(dev_pki: pki.DevPKI) -> None:
    docs = _documents(dev_pki.root, *MONITORING)
    server, lb = _labels(docs, m.APP), _labels(docs, m.LB)
    assert admits(docs, NAMESPACE, server, m.METRICS_PORT, Peer("monitoring", PROMETHEUS))
    for stranger in (Peer("default", PROMETHEUS), Peer("monitoring", {"app": "other"}), Peer(NAMESPACE, lb)):
        assert not admits(docs, NAMESPACE, server, m.METRICS_PORT, stranger), stranger
    unset = _documents(dev_pki.root)  # no selector given: no Pod scrapes
    assert not admits(unset, NAMESPACE, server, m.METRICS_PORT, Peer("monitoring", PROMETHEUS))


def test_envoy_admits_clients_on_its_listener_only(dev_pki: pki.DevPKI) -> None:
    docs = _documents(dev_pki.root)
    lb = _labels(docs, m.LB)
    client = Peer("elsewhere", {"app": "client"})
    assert admits(docs, NAMESPACE, lb, m.LB_PORT, client)
    for port in (m.READY_PORT, 9901):  # the readiness listener (kubelet comes from the node) and the admin port
        assert not admits(docs, NAMESPACE, lb, port, client), port


@pytest.mark.parametrize("value", ["monitoring", "=x", "a b=c", "kubernetes.io/=x", "k=" + "v" * 64, "-k=v"])
def test_a_selector_that_is_not_a_label_is_refused(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["deploy", f"--metrics-pod-selector={value}"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "is not KEY=VALUE with a Kubernetes label key and value" in err and "Traceback" not in err


def test_only_the_replicas_reach_the_model_server(dev_pki: pki.DevPKI) -> None:
    """``--backend-pod-selector``: the model server behind ``serve --proxy`` admits the replicas alone, so a client
    that bypasses the gateway cannot ask it for its report (it answers anyone) or reach it at all."""
    vllm = {"app": "vllm"}
    docs = _documents(dev_pki.root, "--backend-pod-selector", "app=vllm", "--backend-port", "8000")
    server, lb = _labels(docs, m.APP), _labels(docs, m.LB)
    assert admits(docs, NAMESPACE, vllm, 8000, Peer(NAMESPACE, server))
    for stranger in (Peer(NAMESPACE, lb), Peer(NAMESPACE, {"app": "client"}), Peer("default", server)):
        assert not admits(docs, NAMESPACE, vllm, 8000, stranger), stranger
    assert not admits(docs, NAMESPACE, vllm, 9000, Peer(NAMESPACE, server))  # its other ports: no one
    assert not any(doc["metadata"]["name"] == f"{m.APP}-backend" for doc in _documents(dev_pki.root))
