#!/usr/bin/env bash
# The README's test command: set up from scratch if needed, lint, then run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
.venv/bin/ruff check secure_orca tests benchmarks
.venv/bin/mypy secure_orca tests benchmarks
.venv/bin/lint-imports  # the architecture's layers and the pure core's ban on I/O (pyproject.toml)
# Two workers or more (pytest-xdist; -n 0 to run in one process): replicas and Envoy bind port 0, files go to
# tmp_path, the Go helpers are built once under a lock (tests/gohelpers.py). Modules stay on one worker
# (loadscope), so a module-scoped replica starts once.
.venv/bin/python -m pytest -q -n auto --dist loadscope "$@"
