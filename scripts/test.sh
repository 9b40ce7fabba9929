#!/usr/bin/env bash
# The README's test command: set up from scratch if needed, lint, then run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
.venv/bin/ruff check secure_orca tests benchmarks
.venv/bin/mypy secure_orca
.venv/bin/python -m pytest -q "$@"
