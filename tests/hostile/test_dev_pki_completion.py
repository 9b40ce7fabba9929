"""The development PKI's writer refuses what it cannot complete without replacing a file: one line naming the
files, exit 2, no traceback, nothing written; a name planted meanwhile is never overwritten."""

from __future__ import annotations

import subprocess
import sys

from secure_orca.credentials import devpki


def _certs(root) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "secure_orca", "certs", "--dir", str(root)], capture_output=True, text=True, timeout=60
    )


def test_a_leaf_whose_ca_is_gone_is_refused_and_nothing_is_written(tmp_path) -> None:
    dev = devpki.generate(tmp_path)
    dev.cert("front_proxy_ca").unlink()
    dev.key("front_proxy_ca").unlink()
    dev.kubeconfig.unlink()
    result = _certs(tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "front-proxy-client.crt but not its CA front-proxy-ca.crt" in result.stderr
    assert devpki.missing(dev) == [dev.cert("front_proxy_ca"), dev.key("front_proxy_ca"), dev.kubeconfig]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary file left


def test_a_symlink_planted_where_a_file_is_missing_is_not_followed_or_replaced(tmp_path) -> None:
    dev = devpki.generate(tmp_path)
    target = tmp_path / "elsewhere"
    dev.kubeconfig.unlink()
    dev.kubeconfig.symlink_to(target)  # dangling: exists() is False, so the writer wants to write it
    result = _certs(tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr and "exists" in result.stderr
    assert dev.kubeconfig.is_symlink() and not target.exists()
