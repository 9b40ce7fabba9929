"""``serve``'s start-up imports only what every start needs: prometheus-client with --metrics-bind-address,
protobuf's JSON parser with the first JSON report, httpx with a --proxy route (each imported where it is used),
and the server itself (hypercorn, h2, the workers) once the flags are valid. About 280 starts of serve run in
the suite, and each refused start pays the same."""

from __future__ import annotations

import subprocess
import sys

from secure_orca import pki

# each imported where its flag, report or route needs it
DEFERRED = (
    "prometheus_client",
    "secure_orca.server.metrics",
    "secure_orca.workers.metrics",
    "google.protobuf.json_format",
    "httpx",
)
# imported by serve's run once the flags are valid, not by its parser nor by a refused start
SERVER = ("hypercorn", "h2", "secure_orca.server.assembly", "secure_orca.workers.supervisor")

# a server assembled as `serve` assembles it, with no /metrics, proxy route or JSON report
_ASSEMBLE = """
import sys
from secure_orca.cli import build_parser
from secure_orca.cli.serve import dev_pki
from secure_orca.server.assembly import Server
from secure_orca.server.config import build_config
args = build_parser("serve").parse_args(["serve", "--certs-dir", sys.argv[1], "--secure-port", "0"])
Server.assemble(build_config(args, dev_pki(args)), verbose=False)
print(" ".join(sys.modules))
"""


def _modules(code: str, *argv: str) -> set[str]:
    result = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return set(result.stdout.split())


def test_importing_serve_leaves_the_server_and_the_deferred_modules_out() -> None:
    loaded = _modules("import sys, secure_orca.cli.serve; print(' '.join(sys.modules))")
    assert "secure_orca.server.options" in loaded  # the import did happen
    assert sorted(loaded.intersection(DEFERRED + SERVER)) == []


def test_a_refused_value_leaves_the_server_out(dev_pki: pki.DevPKI) -> None:
    argv = ["serve", "--certs-dir", str(dev_pki.root), "--secure-port", "70000"]
    code = f"import sys; from secure_orca.cli import main; status = main({argv!r}); print(' '.join(sys.modules))"
    loaded = _modules(code + "; sys.exit(status != 2)")
    assert "secure_orca.server.config" in loaded
    assert sorted(loaded.intersection(DEFERRED + SERVER)) == []


def test_an_assembled_server_without_metrics_leaves_them_out(dev_pki: pki.DevPKI) -> None:
    loaded = _modules(_ASSEMBLE, str(dev_pki.root))
    assert "secure_orca.server.middleware" in loaded
    assert sorted(loaded.intersection(DEFERRED)) == []


def test_metrics_bind_address_imports_prometheus_client(dev_pki: pki.DevPKI) -> None:
    code = _ASSEMBLE.replace('"--secure-port", "0"', '"--secure-port", "0", "--metrics-bind-address", "127.0.0.1:0"')
    assert "prometheus_client" in _modules(code, str(dev_pki.root))
