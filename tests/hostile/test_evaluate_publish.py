"""``secure-orca evaluate --publish`` writes the committed document: it refuses a shortened or partial run (it
would commit figures that the document does not describe) and a name that is not markdown, before measuring
anything, with one clear line, no traceback and no file written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.parametrize(
    ("extra", "name", "message"),
    [
        (["--quick"], "doc.md", "a full run only"),
        (["--no-instructions"], "doc.md", "a full run only"),
        (["--no-envoy"], "doc.md", "a full run only"),
        ([], "doc.txt", "must end in .md"),
    ],
)
def test_publish_refuses_before_measuring(tmp_path: Path, extra: list[str], name: str, message: str) -> None:
    target = tmp_path / name
    argv = [
        sys.executable,
        "-m",
        "secure_orca",
        "evaluate",
        *extra,
        "--output",
        str(tmp_path / "out"),
        "--publish",
        str(target),
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 2, done.stderr[-2000:]
    assert message in done.stderr and "Traceback" not in done.stderr
    assert not target.exists() and not target.with_suffix(".json").exists() and not (tmp_path / "out").exists()
