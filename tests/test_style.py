"""The formatter does the layout: ruff formats every line to the enforced length (120, pyproject.toml; E501 in the
lint selection), and no statement opts out of it with ``# fmt: skip`` or ``# fmt: off``, except in code that
changes only together with the measurement it made: secure_orca/lab/ (docs/security-options.md, a full published
evaluation run) and benchmarks/go_options.py (docs/kep-6315-go.json)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OPT_OUT = re.compile(r"#\s*fmt:\s*(skip|off)\b")


def test_the_line_length_is_one_and_ruff_enforces_it() -> None:
    ruff = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]
    assert ruff["line-length"] == 120
    selected = ruff["lint"]["select"]
    assert "E" in selected or "E501" in selected
    assert "E501" not in ruff["lint"].get("ignore", [])


def test_no_statement_opts_out_of_the_formatter() -> None:
    lab = ROOT / "secure_orca" / "lab"
    measured = {ROOT / "benchmarks" / "go_options.py"}
    found = [
        f"{path.relative_to(ROOT)}:{number}"
        for tree in ("secure_orca", "tests", "benchmarks")
        for path in sorted((ROOT / tree).rglob("*.py"))
        if lab not in path.parents and path not in measured and path != Path(__file__).resolve()
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if OPT_OUT.search(line)
    ]
    assert found == []
