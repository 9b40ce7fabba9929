"""Ingress NetworkPolicy semantics (networking.k8s.io/v1, as the API reference defines them), for tests (not a test
module): a Pod that no Ingress policy selects admits every connection; a Pod that some select admits a connection
when any rule of any of them matches both its peer and its port. Only what the generated policies use is modelled
(matchLabels selectors, numbered TCP ports, no ipBlock): anything else raises, so nothing is guessed."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Peer:
    """Where a connection comes from: a Pod's namespace (and that namespace's labels) and the Pod's labels."""

    namespace: str
    labels: dict[str, str] = field(default_factory=dict)
    namespace_labels: dict[str, str] = field(default_factory=dict)

    def namespace_labels_with_name(self) -> dict[str, str]:
        return {**self.namespace_labels, "kubernetes.io/metadata.name": self.namespace}  # kube sets it on each


def _matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    if set(selector) - {"matchLabels"}:
        raise NotImplementedError(f"selector {selector}: only matchLabels is modelled")
    return all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items())


def _peer_matches(peer: dict[str, Any], source: Peer, namespace: str) -> bool:
    if "ipBlock" in peer:
        raise NotImplementedError("ipBlock is not modelled")
    if "namespaceSelector" in peer:
        if not _matches(peer["namespaceSelector"], source.namespace_labels_with_name()):
            return False
    elif source.namespace != namespace:  # a podSelector alone selects Pods of the policy's namespace
        return False
    return _matches(peer.get("podSelector") or {}, source.labels)


def _port_matches(entry: dict[str, Any], port: int) -> bool:
    if entry.get("protocol", "TCP") != "TCP" or not isinstance(entry.get("port"), int) or "endPort" in entry:
        raise NotImplementedError(f"port {entry}: only numbered TCP ports are modelled")
    return bool(entry["port"] == port)


def admits(policies: list[dict[str, Any]], namespace: str, labels: dict[str, str], port: int, source: Peer) -> bool:
    """Whether a Pod with ``labels`` in ``namespace`` admits a TCP connection to ``port`` from ``source``."""
    selecting = [
        p
        for p in policies
        if p["kind"] == "NetworkPolicy"
        and p["metadata"]["namespace"] == namespace
        and "Ingress" in p["spec"].get("policyTypes", ["Ingress"])
        and _matches(p["spec"]["podSelector"], labels)
    ]
    if not selecting:
        return True
    for policy in selecting:
        for rule in policy["spec"].get("ingress") or []:
            peers = rule.get("from") or []
            ports = rule.get("ports") or []
            if (not peers or any(_peer_matches(p, source, namespace) for p in peers)) and (
                not ports or any(_port_matches(e, port) for e in ports)
            ):
                return True
    return False
