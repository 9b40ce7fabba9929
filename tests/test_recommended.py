"""The recommendation and the tools' defaults are one thing: secure_orca/recommended.py equals the option the
evaluation recommends (docs/security-options.json if present, else docs/security-options.md), and serve,
envoy-config and deploy default to it."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from types import ModuleType

from secure_orca import recommended
from secure_orca.cli import deploy, envoy, serve
from secure_orca.lab.options import TITLES

DOCS = Path(__file__).resolve().parents[1] / "docs"


def evaluation_recommends() -> str:
    """The option the evaluation's recommendation names as the default."""
    data = DOCS / "security-options.json"
    text = json.dumps(json.loads(data.read_text())) if data.exists() else (DOCS / "security-options.md").read_text()
    found = re.search(r"Recommendation for the KEP: resolve the open question with (.+?) as the default", text)
    assert found, "the evaluation's recommendation was not found"
    return next(option for option, title in TITLES.items() if title == found.group(1))


def _defaults(module: ModuleType) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    module.add_arguments(parser)
    return parser.parse_args([])


def test_the_evaluation_recommends_what_recommended_py_says() -> None:
    assert evaluation_recommends() == recommended.OPTION
    data = DOCS / "security-options.json"
    if data.exists():
        assert json.loads(data.read_text())["recommended_option"] == recommended.OPTION
    assert TITLES[recommended.OPTION] == recommended.TITLE


def test_every_tool_defaults_to_the_recommendation() -> None:
    assert _defaults(serve).endpoint_load_metrics_auth == ",".join(recommended.SERVE_MODES) == recommended.OPTION
    assert _defaults(envoy).option == recommended.OPTION
    assert _defaults(deploy).option == recommended.OPTION
