"""Mutation testing of the pure security core: a small AST mutator (scripts/mutation.sh runs it).

Each mutant is one small change to one module (a comparison's boundary or sense, ``and``/``or``, a dropped ``not``,
a dropped guard, an integer off by one, ``+``/``-``, ``min``/``max``, ``any``/``all``, ``True``/``False``). It is
run against the unit tests that cover its module (``TARGETS``), in a forked child of a process that has already
imported pytest and the heavy libraries: the child forgets every ``secure_orca`` and ``tests`` module, imports the
mutated module from the mutated syntax tree, and runs pytest stopping at the first failure. A failing run (or
one past its timeout) kills the mutant; a passing one means it survived, unless docs/mutation.md lists it as
equivalent, with its argument. A mutant is named ``path:function: before -> after`` (``#2`` for the second of the
same name), which stays the same when unrelated lines move.

``--sample N`` runs N non-equivalent mutants per module, drawn with a fixed seed (CI's check); without it, every
mutant, the listed equivalents included (one that is killed is reported: it is not equivalent).
"""

from __future__ import annotations

import argparse
import ast
import copy
import importlib.abc
import importlib.util
import os
import random
import re
import signal
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EQUIVALENTS = ROOT / "docs" / "mutation.md"

AUTHZ = [
    "tests/authz/test_authz.py",
    "tests/authz/test_memo.py",
    "tests/hostile/test_connection_memo.py",
    "tests/orca/test_oob.py",
]
STREAMS = ["tests/authz/test_streams.py", "tests/hostile/test_oob_capacity.py", "tests/orca/test_oob.py"]
OPTIN = ["tests/orca/test_optin.py", "tests/authz/test_authz.py", "tests/orca/test_fuzz.py"]
AUTHN = ["tests/authn/test_authn.py", "tests/hostile/test_certificate_names.py"]
X509 = [
    "tests/x509/test_x509.py",
    "tests/x509/test_x509_differential.py::test_verifier_agrees_with_go",
    "tests/hostile/test_chain_cache.py",
    "tests/hostile/test_verification_cost.py",
]
# Each module and the unit tests that cover it (in-process: no live servers), the likeliest killers first.
TARGETS: dict[str, list[str]] = {
    "secure_orca/authz/authority.py": AUTHZ,
    "secure_orca/authz/memo.py": AUTHZ,
    "secure_orca/authz/policy.py": AUTHZ,
    "secure_orca/authz/reasons.py": AUTHZ,
    "secure_orca/authz/secrets.py": AUTHZ,
    "secure_orca/authz/streams.py": STREAMS,
    "secure_orca/orca/optin.py": OPTIN,
    "secure_orca/orca/headers.py": OPTIN,
    "secure_orca/authn/anonymous.py": AUTHN,
    "secure_orca/authn/authenticator.py": AUTHN,
    "secure_orca/authn/bearertoken.py": AUTHN,
    "secure_orca/authn/group.py": AUTHN,
    "secure_orca/authn/requestheader.py": AUTHN,
    "secure_orca/authn/review.py": AUTHN,
    "secure_orca/authn/tokenfile.py": AUTHN,
    "secure_orca/authn/union.py": AUTHN,
    "secure_orca/authn/user.py": AUTHN,
    "secure_orca/authn/x509.py": AUTHN,
    "secure_orca/x509/verify.py": X509,
    "secure_orca/x509/constraints.py": X509,
    "secure_orca/x509/chainverifier.py": X509,
}

_COMPARE_SWAPS: dict[type[ast.cmpop], tuple[type[ast.cmpop], ...]] = {
    ast.Lt: (ast.LtE, ast.GtE),
    ast.LtE: (ast.Lt, ast.Gt),
    ast.Gt: (ast.GtE, ast.LtE),
    ast.GtE: (ast.Gt, ast.Lt),
    ast.Eq: (ast.NotEq,),
    ast.NotEq: (ast.Eq,),
    ast.In: (ast.NotIn,),
    ast.NotIn: (ast.In,),
    ast.Is: (ast.IsNot,),
    ast.IsNot: (ast.Is,),
}
_BINOP_SWAPS: dict[type[ast.operator], type[ast.operator]] = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.FloorDiv,
    ast.FloorDiv: ast.Mult,
    ast.LShift: ast.RShift,
    ast.RShift: ast.LShift,
    ast.BitAnd: ast.BitOr,
    ast.BitOr: ast.BitAnd,
    ast.Mod: ast.FloorDiv,
}
_CALL_SWAPS = {"min": "max", "max": "min", "any": "all", "all": "any"}


@dataclass(frozen=True)
class Mutant:
    module: str  # path under the repository
    index: int  # its place in the walk of the module (what ``mutate`` applies)
    name: str  # stable: path:function: before -> after


def _short(node: ast.AST) -> str:
    text = ast.unparse(node).replace("\n", " ")
    return text if len(text) <= 90 else text[:87] + "..."


def _is_guard(node: ast.If) -> bool:
    """An ``if`` without ``else`` whose body leaves (return, raise, continue, break): dropping it drops a check."""
    return not node.orelse and isinstance(node.body[-1], ast.Return | ast.Raise | ast.Continue | ast.Break)


def _skipped(node: ast.AST) -> bool:
    """Type annotations and docstrings carry no behaviour."""
    return isinstance(node, ast.AnnAssign) and node.value is None


class _Walker:
    """Enumerates mutation points in a fixed order; ``apply`` edits the tree at one of them."""

    def __init__(self, tree: ast.Module, target: int = -1) -> None:
        self.tree, self.target, self.count = tree, target, 0
        self.names: list[tuple[str, str]] = []  # (function, before -> after)
        self.scope: list[str] = []
        self.parent: ast.AST = tree

    def _point(self, before: str, after: str) -> bool:
        """Record one mutation point; True when it is the one to apply."""
        self.names.append((".".join(self.scope) or "<module>", f"{before} -> {after}"))
        self.count += 1
        return self.count - 1 == self.target

    def walk(self, node: ast.AST) -> None:
        scoped = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        if scoped:
            self.scope.append(node.name)  # type: ignore[attr-defined]
        for field, value in ast.iter_fields(node):
            if field in ("annotation", "returns", "decorator_list", "type_params", "type_comment"):
                continue
            children = value if isinstance(value, list) else [value]
            for position, child in enumerate(children):
                if not isinstance(child, ast.AST) or _skipped(child):
                    continue
                self.parent = node
                replacement = self._visit(child)
                if replacement is not None:
                    if isinstance(value, list):
                        value[position] = replacement
                    else:
                        setattr(node, field, replacement)
                else:
                    self.walk(child)
        if scoped:
            self.scope.pop()

    def _visit(self, node: ast.AST) -> ast.AST | None:
        """The mutation points of ``node`` itself; returns a replacement node when the target is here."""
        if isinstance(node, ast.If) and _is_guard(node):
            if self._point(f"if {_short(node.test)}: ...", "(guard dropped)"):
                return ast.copy_location(ast.Pass(), node)
        elif isinstance(node, ast.Compare):
            for position, op in enumerate(node.ops):
                for swap in _COMPARE_SWAPS.get(type(op), ()):
                    mutated = copy.deepcopy(node)
                    mutated.ops[position] = swap()
                    if self._point(_short(node), _short(mutated)):
                        return mutated
        elif isinstance(node, ast.BoolOp):
            flipped = copy.deepcopy(node)
            flipped.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
            if self._point(_short(node), _short(flipped)):
                return flipped
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            if self._point(_short(node), _short(node.operand)):
                return node.operand
        elif isinstance(node, ast.BinOp | ast.AugAssign) and type(node.op) in _BINOP_SWAPS:
            swapped = copy.deepcopy(node)
            swapped.op = _BINOP_SWAPS[type(node.op)]()
            if self._point(_short(node), _short(swapped)):
                return swapped
        elif isinstance(node, ast.Constant) and isinstance(node.value, bool):
            if self._point(repr(node.value), repr(not node.value)):
                return ast.copy_location(ast.Constant(not node.value), node)
        elif isinstance(node, ast.Constant) and type(node.value) is int:
            context = _short(self.parent) if isinstance(self.parent, ast.expr) else ""
            for delta in (1, -1):
                if self._point(f"{context}: {node.value}" if context else repr(node.value), repr(node.value + delta)):
                    return ast.copy_location(ast.Constant(node.value + delta), node)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _CALL_SWAPS:
            other = copy.deepcopy(node)
            other.func = ast.Name(_CALL_SWAPS[node.func.id], ast.Load())
            if self._point(_short(node), _short(other)):
                return ast.fix_missing_locations(ast.copy_location(other, node))
        return None


def _parse(module: str) -> ast.Module:
    return ast.parse((ROOT / module).read_text(), filename=str(ROOT / module))


def mutants(module: str) -> list[Mutant]:
    walker = _Walker(_parse(module))
    walker.walk(walker.tree)
    seen: dict[str, int] = {}
    found = []
    for index, (function, change) in enumerate(walker.names):
        name = f"{module}:{function}: {change}"
        seen[name] = seen.get(name, 0) + 1
        found.append(Mutant(module, index, name if seen[name] == 1 else f"{name} #{seen[name]}"))
    return found


def mutate(mutant: Mutant) -> ast.Module:
    walker = _Walker(_parse(mutant.module), mutant.index)
    walker.walk(walker.tree)
    return ast.fix_missing_locations(walker.tree)


def equivalents() -> dict[str, str]:
    """The mutants docs/mutation.md argues are equivalent: lines ``- `name` -- argument`` (an em dash)."""
    found = {}
    for line in EQUIVALENTS.read_text().splitlines():
        match = re.match(r"^- `(?P<name>[^`]+)` — (?P<argument>.+)$", line)
        if match:
            found[match["name"]] = match["argument"]
    return found


class _MutantFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves one module from a mutated syntax tree."""

    def __init__(self, name: str, path: Path, tree: ast.Module) -> None:
        self.name, self.path, self.code = name, path, compile(tree, str(path), "exec")

    def find_spec(self, fullname, path, target=None):  # type: ignore[no-untyped-def]
        if fullname != self.name:
            return None
        return importlib.util.spec_from_file_location(fullname, self.path, loader=self)

    def create_module(self, spec):  # type: ignore[no-untyped-def]
        return None

    def exec_module(self, module):  # type: ignore[no-untyped-def]
        exec(self.code, module.__dict__)


KEPT = ("tests.x509corpus",)  # built once in the parent (fresh keys, about 2 s): it imports no mutated module


def _imports(module: object) -> set[str]:
    """The project modules ``module``'s source imports (by its import statements)."""
    path = getattr(module, "__file__", None) or ""
    if not path.startswith(str(ROOT)) or not path.endswith(".py"):
        return set()
    package = module.__name__ if path.endswith("__init__.py") else module.__name__.rpartition(".")[0]  # type: ignore[attr-defined]
    found = set()
    for node in ast.walk(ast.parse(Path(path).read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            found.add(base)
            found |= {f"{base}.{alias.name}" for alias in node.names}
    return {name for name in found if name.split(".")[0] in ("secure_orca", "tests")}


GRAPH: dict[str, set[str]] = {}  # each loaded project module's imports (filled by _preload, before any fork)


def _dependents(target: str) -> set[str]:
    """``target`` and every loaded project module that imports it, directly or not: the ones a child forgets."""
    graph = GRAPH
    stale = {target}
    while True:
        more = {name for name, imported in graph.items() if imported & stale} - stale - set(KEPT)
        if not more:
            return stale
        stale |= more


def _child(mutant: Mutant | None, tests: list[str]) -> None:
    """In the forked child: forget the mutated module and its importers, serve the mutant, run the tests;
    never returns."""
    os.setpgid(0, 0)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if not os.environ.get("MUTATION_VERBOSE"):
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.dup2(null, 2)
    if mutant is not None:
        name = mutant.module.removesuffix(".py").replace("/", ".")
        for stale in _dependents(name):
            sys.modules.pop(stale, None)
            package, _, attribute = stale.rpartition(".")
            if package in sys.modules and hasattr(sys.modules[package], attribute):  # else ``from package import
                delattr(sys.modules[package], attribute)  # module`` would find the unmutated one
        sys.meta_path.insert(0, _MutantFinder(name, ROOT / mutant.module, mutate(mutant)))
    for loaded in list(sys.modules):  # test files are imported by pytest itself (it rewrites their asserts)
        if loaded.rpartition(".")[2].startswith("test_"):
            del sys.modules[loaded]
    import pytest

    args = ["-x", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "-o", "addopts=", "--timeout=60", *tests]
    code = pytest.main(args)
    sys.stdout.flush()
    os._exit(int(code))


def _preload(modules: list[str]) -> None:
    """Import once what every child needs (pytest, the tests' imports, the project), so each fork starts warm;
    build the x509 corpus once."""
    import importlib

    import pytest  # noqa: F401

    sys.path.insert(0, str(ROOT))
    os.chdir(ROOT)
    from tests import x509corpus

    corpus = x509corpus.build()
    x509corpus.build = lambda: corpus  # type: ignore[assignment]
    for test in {t.split("::")[0] for m in modules for t in TARGETS[m]} | {"tests/conftest.py"}:
        importlib.import_module(test.removesuffix(".py").replace("/", "."))
    GRAPH.update((name, _imports(module)) for name, module in list(sys.modules.items()))


@dataclass
class _Running:
    mutant: Mutant | None
    pid: int
    deadline: float
    started: float


def run(
    jobs: Sequence[tuple[Mutant | None, list[str]]], parallel: int, timeout: float
) -> Iterator[tuple[Mutant | None, str, float]]:
    """Run each (mutant, tests) in a forked child, ``parallel`` at once: yields (mutant, outcome, seconds) with
    outcome ``killed``, ``survived`` or ``timeout`` (a kill)."""
    pending = list(jobs)
    running: list[_Running] = []
    try:
        while pending or running:
            while pending and len(running) < parallel:
                mutant, tests = pending.pop(0)
                pid = os.fork()
                if pid == 0:
                    _child(mutant, tests)
                now = time.monotonic()
                running.append(_Running(mutant, pid, now + timeout, now))
            time.sleep(0.02)
            for job in list(running):
                done, status = os.waitpid(job.pid, os.WNOHANG)
                seconds = time.monotonic() - job.started
                if done:
                    running.remove(job)
                    code = os.waitstatus_to_exitcode(status)
                    yield job.mutant, "survived" if code == 0 else "killed", seconds
                elif time.monotonic() > job.deadline:
                    os.killpg(job.pid, signal.SIGKILL)
                    os.waitpid(job.pid, 0)
                    running.remove(job)
                    yield job.mutant, "timeout", seconds

    finally:  # stopped early (an interrupt, a closed pipe): no child outlives the run
        for job in running:
            os.killpg(job.pid, signal.SIGKILL)
            os.waitpid(job.pid, 0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sample", type=int, default=0, help="mutants per module (0: all)")
    parser.add_argument("--seed", default="secure-orca", help="the sample's seed")
    parser.add_argument("--parallel", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--timeout", type=float, default=120, help="seconds per mutant before it counts as killed")
    parser.add_argument("--list", action="store_true", help="list the mutants and stop")
    parser.add_argument("--only", help="run only the mutants whose name contains this")
    parser.add_argument("--names", type=Path, help="run only the mutants named in this file (one a line)")
    parser.add_argument("modules", nargs="*", help="modules to mutate (default: all of TARGETS)")
    options = parser.parse_args()
    modules = options.modules or list(TARGETS)
    equivalent = equivalents()
    every = {module: mutants(module) for module in modules}
    names = {m.name for found in every.values() for m in found}
    filtered = options.modules or options.only or options.names
    stale = sorted(set(equivalent) - names) if not filtered else []
    generated = {module: len(found) for module, found in every.items()}
    if options.list:
        for found in every.values():
            for m in found:
                print(("E " if m.name in equivalent else "  ") + m.name)
        return 0
    chosen: dict[str, list[Mutant]] = {}
    if options.only:
        every = {module: [m for m in found if options.only in m.name] for module, found in every.items()}
    if options.names:
        wanted = set(options.names.read_text().splitlines())
        every = {module: [m for m in found if m.name in wanted] for module, found in every.items()}
    for module, found in every.items():
        if options.sample:
            candidates = [m for m in found if m.name not in equivalent]
            rng = random.Random(f"{options.seed}:{module}")
            chosen[module] = sorted(rng.sample(candidates, min(options.sample, len(candidates))), key=lambda m: m.index)
        else:
            chosen[module] = found
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so that ``run`` ends the children it started
    _preload(modules)
    started = time.monotonic()
    baseline = {tuple(tests) for tests in (TARGETS[m] for m in modules)}
    for tests, outcome in ((list(t), o) for t in baseline for _, o, _ in run([(None, list(t))], 1, options.timeout)):
        if outcome != "survived":
            print(f"mutation: the unmutated tests fail: {' '.join(tests)}", file=sys.stderr)
            return 2
    jobs = [(m, TARGETS[m.module]) for found in chosen.values() for m in found]
    tally = {
        module: {"generated": generated[module], "run": 0, "killed": 0, "survived": 0, "equivalent": 0}
        for module in modules
    }
    survivors, not_equivalent = [], []
    for mutant, outcome, seconds in run(jobs, options.parallel, options.timeout):
        assert mutant is not None
        row = tally[mutant.module]
        row["run"] += 1
        if mutant.name in equivalent:
            row["equivalent"] += 1
            if outcome != "survived":
                not_equivalent.append(mutant.name)
        elif outcome == "survived":
            row["survived"] += 1
            survivors.append(mutant.name)
        else:
            row["killed"] += 1
        print(f"{outcome:8} {seconds:5.1f}s {mutant.name}", flush=True)
    print()
    print("| module | generated | run | killed | survived | equivalent |")
    print("|---|---|---|---|---|---|")
    totals = dict.fromkeys(("generated", "run", "killed", "survived", "equivalent"), 0)
    for module, row in tally.items():
        print(f"| {module.removeprefix('secure_orca/')} | " + " | ".join(str(row[k]) for k in totals) + " |")
        for key in totals:
            totals[key] += row[key]
    print("| all | " + " | ".join(str(v) for v in totals.values()) + " |")
    print(f"\n{time.monotonic() - started:.0f} s; seed {options.seed!r}, sample {options.sample or 'all'}")
    for name in survivors:
        print(f"SURVIVED: {name}")
    for name in not_equivalent:
        print(f"LISTED AS EQUIVALENT BUT KILLED: {name}")
    for name in stale:
        print(f"LISTED AS EQUIVALENT BUT NO SUCH MUTANT: {name}")
    return 1 if survivors or not_equivalent or stale else 0


if __name__ == "__main__":
    sys.exit(main())
