"""Kubernetes manifests for replicas of ``secure-orca serve`` behind Envoy (``secure-orca deploy``)."""
