"""The probe against model-server stand-ins: "leak" against a Triton-like server alone (it answers
``endpoint-load-metrics-format`` to anyone: tests/probe/test_probe.py probes it directly), "no-leak" against the
gateway in front of it with the backend as report source, every dialect spelling sent through the proxied path."""

from __future__ import annotations

from secure_orca import pki
from secure_orca.lab import replicas as launch
from secure_orca.probe import audit as probe
from tests.conftest import fp_flags, probe_config
from tests.hostile.backends import serving
from tests.replicas import run_replicas
from tests.standin import TritonLike


def test_the_gateway_in_front_of_a_triton_like_server_leaks_nothing(dev_pki: pki.DevPKI) -> None:
    with serving(TritonLike) as triton:
        flags = fp_flags(dev_pki, "front-proxy,shared-secret", "--proxy", f"/v2={triton};report=backend")
        with run_replicas([launch.serve_argv(dev_pki, flags)]) as (replica,):
            config = probe_config(dev_pki, ("/v2/models", "/version"))  # the first path gets every vector
            result = probe.probe(replica.url, config)
    assert result.control_ok, [c.detail for c in result.controls]
    assert result.verdict == "no-leak" and result.exit_code == 0, result.reason
    spelled = {(r.vector.name, r.vector.path): r.outcome for r in result.results if r.vector.group == "spelling"}
    assert any(path == "/v2/models" for _, path in spelled), sorted(spelled)  # asked through the proxied path too
    assert set(spelled.values()) <= {"no-report", "refused", "not-accepted"}, spelled
