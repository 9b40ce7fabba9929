"""scripts/mutation.py's mutator (docs/mutation.md), without running any mutant: the mutants it makes, and the
equivalents docs/mutation.md lists."""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).parents[1]


@pytest.fixture(scope="module")
def tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mutation_tool", ROOT / "scripts" / "mutation.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_every_listed_equivalent_is_a_mutant_with_an_argument(tool: ModuleType) -> None:
    names = {m.name for module in tool.TARGETS for m in tool.mutants(module)}
    listed = tool.equivalents()
    assert listed, "docs/mutation.md lists no equivalent mutant: the parser or the file changed"
    assert set(listed) <= names, f"listed but no such mutant: {set(listed) - names}"
    assert all(len(argument) > 20 for argument in listed.values())


@pytest.mark.parametrize(
    "name",
    [
        "secure_orca/authz/memo.py:ConnectionMemo.steady: now <= end -> now < end",
        "secure_orca/authz/policy.py:Policy.decide: self.secrets is None or Mode.SHARED_SECRET not in self.modes"
        " -> self.secrets is None and Mode.SHARED_SECRET not in self.modes",
        "secure_orca/authn/x509.py:user_of: if uids == ['']: ... -> (guard dropped)",
        "secure_orca/x509/verify.py:_policies_valid: explicit -= 1 -> explicit += 1",
    ],
)
def test_the_audit_s_four_survivors_are_among_the_mutants(tool: ModuleType, name: str) -> None:
    module = name.split(":")[0]
    found = [m for m in tool.mutants(module) if m.name == name]
    assert len(found) == 1
    original, mutated = ast.unparse(tool._parse(module)), ast.unparse(tool.mutate(found[0]))
    assert original != mutated
