"""The built wheel holds every subpackage and its data: each imports from the wheel itself, not from the
editable install."""

from __future__ import annotations

import fcntl
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
IMPORT_ALL = """
import importlib, json, pkgutil, sys
wheel = sys.argv[1]
sys.path.insert(0, wheel)
import secure_orca
modules = pkgutil.walk_packages(secure_orca.__path__, "secure_orca.")
names = ["secure_orca"] + [m.name for m in modules if not m.name.endswith("__main__")]
origins = {name: importlib.import_module(name).__file__ for name in names}
print(json.dumps(origins))
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # setuptools builds in the source tree's build/: two xdist workers building at once collide there
    with open(tmp_path_factory.getbasetemp().parent / "wheel-build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        build = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", str(out), str(ROOT)],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    if build.returncode != 0:
        pytest.fail(f"pip wheel failed:\n{build.stderr[-2000:]}")
    (built,) = out.glob("secure_orca-*.whl")
    return built


def test_every_subpackage_imports_from_the_wheel(wheel: Path, tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-c", IMPORT_ALL, str(wheel)], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr
    origins = json.loads(run.stdout)
    inits = (ROOT / "secure_orca").rglob("__init__.py")
    packages = {p.parent.relative_to(ROOT).as_posix().replace("/", ".") for p in inits}
    assert packages <= set(origins), f"missing from the wheel: {sorted(packages - set(origins))}"
    assert all(origin.startswith(str(wheel)) for origin in origins.values()), origins


def test_wheel_carries_the_package_data(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    assert "secure_orca/lab/h2load_client_cert.c" in names
    assert "secure_orca/envoy/identity.lua" in names  # the identity filter's program, read by envoy/bootstrap.py
    assert not [n for n in names if n.startswith(("tests/", "benchmarks/"))]
