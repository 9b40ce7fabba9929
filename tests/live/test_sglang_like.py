"""The SGLang-like stand-in (tests/live/sglang_like.py, its own process) and the gateway in front of it: the probe
finds SGLang's unauthenticated ``/v1/loads`` against the stand-in alone, and nothing through the gateway."""

from __future__ import annotations

from secure_orca import pki
from secure_orca.lab import replicas as launch
from secure_orca.probe import audit as probe
from secure_orca.probe.audit import ProbeConfig
from tests.conftest import fp_flags, probe_config
from tests.live.standin_process import running
from tests.replicas import run_replicas


def test_the_probe_finds_sglangs_load_endpoint_and_none_through_the_gateway(dev_pki: pki.DevPKI) -> None:
    """SGLang serves ``GET /v1/loads`` to anyone (PR 16976): the probe's load-endpoint vectors read its answer as
    load ("leak", the cause naming the path) against the SGLang-like stand-in alone (its own process, TLS so the
    probe can reach it), and get 403 from the gateway in front of it ("no-leak")."""
    with running("sglang_like", tls=(dev_pki.cert("server"), dev_pki.key("server"))) as alone:
        direct = probe.probe(alone, ProbeConfig(cacert=dev_pki.cert("ca"), timing_samples=0, timeout=5.0))
    leaked = {r.vector.path for r in direct.results if r.outcome == "leak"}
    assert direct.verdict == "leak" and direct.exit_code == 1, direct.reason
    assert {"/v1/loads", "/v1/load%73"} <= leaked, leaked
    assert all(r.vector.group == "load-endpoint" for r in direct.results if r.outcome == "leak")
    assert "GET /v1/loads" in direct.reason, direct.reason

    with running("sglang_like") as backend:
        flags = fp_flags(dev_pki, "front-proxy,shared-secret", "--proxy", f"/v1={backend}/v1;report=backend")
        with run_replicas([launch.serve_argv(dev_pki, flags)]) as (replica,):
            result = probe.probe(replica.url, probe_config(dev_pki, ("/v1/models", "/version")))
    assert result.control_ok, [c.detail for c in result.controls]
    assert result.verdict == "no-leak" and result.exit_code == 0, result.reason
    asked = {r.vector.path: r.status for r in result.results if r.vector.group == "load-endpoint"}
    assert {asked[path] for path in ("/v1/loads", "/v1/load%73", "/v1//loads/", "/v1/LOADS")} == {403}, asked
