"""docs/architecture.md's tree names every module, and every module it calls pure is held to the pure contract
(the forbidden contract in pyproject.toml, which lint-imports and tests/test_layering.py check)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import secure_orca

PACKAGE = Path(secure_orca.__file__).parent
DOC = (PACKAGE.parent / "docs" / "architecture.md").read_text()
TREE = DOC.split("## The tree", 1)[1].split("\n## ", 1)[0]
CONTRACT = next(
    c
    for c in tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    if c["type"] == "forbidden"
)["source_modules"]


def modules() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name not in ("__init__.py", "__main__.py"):
            found.append(".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts))
    return found


def called_pure() -> set[str]:
    """Every module (or package) the tree calls pure, as a dotted name."""
    out: set[str] = set()
    package = prefix = ""
    for line in TREE.splitlines():
        top = re.match(r"^  (\w+)(/|\.py)\s", line)
        if top:
            package = prefix = f"secure_orca.{top.group(1)}"
            if re.match(r"^  \w+(/|\.py)\s+pure", line):
                out.add(package)
        for sub, stem in re.findall(r"\b(\w+)/:|\b(\w+) \(pure", line):
            if sub:  # "http/: ..." names the modules of a subpackage from here to the next package
                prefix = f"{package}.{sub}"
            else:
                out.add(f"{prefix}.{stem}")
    return out


def test_the_tree_names_every_module() -> None:
    words = set(re.findall(r"\w+", TREE))
    assert [m for m in modules() if m.rsplit(".", 1)[1] not in words] == []


def test_every_module_called_pure_is_held_to_the_contract() -> None:
    pure = called_pure()
    assert len(pure) > 10  # the parser found the claims
    held = lambda name: any(name == c or name.startswith(c + ".") for c in CONTRACT)  # noqa: E731
    assert sorted(m for m in pure if not held(m)) == []
