#!/usr/bin/env bash
# The README's test command: set up from scratch if needed, lint, type-check, check the architecture's
# contracts, then run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
.venv/bin/ruff check secure_orca tests benchmarks
.venv/bin/ruff format --check secure_orca tests benchmarks
.venv/bin/mypy secure_orca tests benchmarks
.venv/bin/lint-imports  # the architecture's layers and the pure core's ban on I/O (pyproject.toml)
# One pytest-xdist worker per CPU (-n 0 runs in one process): replicas and Envoy bind port 0, files go to
# tmp_path, the Go helpers are built once under a file lock (secure_orca/lab/gobuild.py); idle workers take tests
# from busy ones (worksteal), as a few live runs take far longer than the rest.
.venv/bin/python -m pytest -q -n auto --dist worksteal "$@"
