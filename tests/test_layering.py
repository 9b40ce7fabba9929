"""The layering, read from the source: pure modules import no I/O and no shell, and only ``cli`` imports ``cli``."""

from __future__ import annotations

import ast
import functools
import tomllib
from pathlib import Path

import pytest

import secure_orca

PACKAGE = Path(secure_orca.__file__).parent
PYPROJECT = PACKAGE.parent / "pyproject.toml"
# Parsing, formats, decisions: no sockets, threads, processes, clocks or files; only other pure modules. One list:
# the forbidden contract's source modules in pyproject.toml, which lint-imports checks as well.
PURE = tuple(
    next(
        c for c in tomllib.loads(PYPROJECT.read_text())["tool"]["importlinter"]["contracts"] if c["type"] == "forbidden"
    )["source_modules"]
)
IO = {
    "socket",
    "ssl",
    "_ssl",
    "asyncio",
    "selectors",
    "threading",
    "subprocess",
    "multiprocessing",
    "os",
    "shutil",
    "tempfile",
    "time",
    "signal",
    "httpx",
    "hypercorn",
    "h2",
    "urllib.request",
    "http.client",
}
ENTRY = {"secure_orca.__main__"}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """Every module ``path`` imports, at any depth (lazy imports inside functions included)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            assert node.level == 0, f"{path}: relative import"
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return found


PATHS = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


@functools.cache
def imports_of(name: str) -> frozenset[str]:
    """What module ``name`` imports, parsed when a test first asks (not while every xdist worker collects)."""
    return frozenset(imports(PATHS[name]))


def is_pure(name: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in PURE)


def within(name: str, prefixes: set[str]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def test_every_pure_module_exists() -> None:
    assert all(any(is_pure(m) and (m == p or m.startswith(p + ".")) for m in PATHS) for p in PURE)


@pytest.mark.parametrize("name", sorted(m for m in PATHS if is_pure(m)))
def test_pure_modules_import_no_io_and_no_shell(name: str) -> None:
    used = imports_of(name)
    assert not {m for m in used if within(m, IO)}, f"{name} imports I/O"
    ours = {m for m in used if m.startswith("secure_orca.") and m in PATHS}
    shells = sorted(m for m in ours if not is_pure(m) and imports_of(m))  # a package that imports nothing is harmless
    assert not shells, f"{name} imports shells: {shells}"


@pytest.mark.parametrize("name", sorted(m for m in PATHS if not m.startswith("secure_orca.cli") and m not in ENTRY))
def test_only_cli_imports_cli(name: str) -> None:
    assert not {m for m in imports_of(name) if within(m, {"secure_orca.cli"})}


HTTP2_INTERNALS = {"h2", "hpack", "hyperframe"}
HTTP2_OWNERS = {"secure_orca.server.http", "secure_orca.server.hpack"}  # the contract in pyproject.toml, also here


def test_only_http_and_hpack_import_h2_in_server() -> None:
    """In ``server``, h2, hpack and hyperframe are imported by ``server.http`` and ``server.hpack`` alone."""
    server = (m for m in PATHS if within(m, {"secure_orca.server"}))
    owners = {m for m in server if any(within(used, HTTP2_INTERNALS) for used in imports_of(m))}
    strays = sorted(m for m in owners if not within(m, HTTP2_OWNERS))
    assert strays == [] and owners, owners


def test_lazy_and_from_imports_are_seen(tmp_path: Path) -> None:
    """A violation cannot hide in a function body or behind ``from ... import``."""
    source = tmp_path / "m.py"
    source.write_text("def f():\n    from secure_orca import cli\n    import socket\n")
    found = imports(source)
    assert {"secure_orca.cli", "socket"} <= found
