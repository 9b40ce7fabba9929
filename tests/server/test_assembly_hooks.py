"""The layers' hooks are given to their constructors (server.assembly's ``Hooks``), never assigned afterwards:
reordering a layer cannot then silently lose the metrics and audit hooks (issue 38, item 3)."""

from __future__ import annotations

import ast
from pathlib import Path

import secure_orca

HOOKS = frozenset({"on_decision", "on_stripped", "observe"})
PACKAGE = Path(secure_orca.__file__).parent


def hook_assignments(tree: ast.AST) -> list[str]:
    """``x.hook = ...`` where ``x`` is not ``self``: a hook set from outside its object's class."""
    found = []
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else []
        for target in targets:
            for element in target.elts if isinstance(target, ast.Tuple) else [target]:
                outside = not (isinstance(element, ast.Attribute) and ast.unparse(element.value) == "self")
                if isinstance(element, ast.Attribute) and element.attr in HOOKS and outside:
                    found.append(f"{ast.unparse(element)} (line {element.lineno})")
    return found


def test_the_finder_sees_the_old_wiring() -> None:
    assert hook_assignments(ast.parse("app.on_decision, app.on_stripped = a, b\nauth.observe = c")) == [
        "app.on_decision (line 1)",
        "app.on_stripped (line 1)",
        "auth.observe (line 2)",
    ]


def test_no_hook_is_assigned_after_construction() -> None:
    found = {
        str(path.relative_to(PACKAGE)): hits
        for path in sorted(PACKAGE.rglob("*.py"))
        if (hits := hook_assignments(ast.parse(path.read_text())))
    }
    assert found == {}
