#!/usr/bin/env bash
# The README's test command: set up from scratch if needed, then the static checks (lint, format, types, the
# architecture's contracts) and the whole test suite side by side; either failing fails the command.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
# Bytecode caches on, whatever the environment says: every forkserver and fresh replica the suite starts and every
# xdist worker would otherwise compile the package and rewrite the tests' asserts again (__pycache__ is ignored by
# git).
unset PYTHONDONTWRITEBYTECODE
.venv/bin/python -m compileall -q secure_orca tests benchmarks >/dev/null
checks() {
  .venv/bin/ruff check secure_orca tests benchmarks
  .venv/bin/ruff format --check secure_orca tests benchmarks
  .venv/bin/mypy secure_orca tests benchmarks
  .venv/bin/lint-imports  # the architecture's layers and the pure core's ban on I/O (pyproject.toml)
}
# The checks take about 15 s and run beside the tests; their output follows the tests'.
checks_log=$(mktemp)
checks >"$checks_log" 2>&1 &
checks_pid=$!
# Two pytest-xdist workers per CPU (-n 0 runs in one process), plus one: most live tests wait on servers, Envoy and
# clock-driven reports rather than compute, so one worker per CPU left the CPUs idle 40% of the time (measured:
# 8 min 56 s with 2 workers on 2 CPUs, 6 min 29 s with 4). The one more is for the quick evaluation
# (tests/lab/test_evaluate.py), which holds its worker for over 3 minutes at under half a CPU: with replicas
# forked from a pre-imported server (tests/forked.py) the suite used 1.4-1.5 CPUs of 2. In fresh clones of one
# commit, pytest took 283.6 s with 5 workers and 289.4 s with 4 (one run each: a gain within the noise, 2%); warm,
# 5 workers took 292-301 s, 4 took 317 s and 6 took 315 s. Three per CPU starved the tests that compare a rate
# with a model or a clock (hpackcost, workers) when every replica was a fresh interpreter: 4 failed in two runs.
# Replicas and Envoy bind port 0, files go to tmp_path,
# the Go helpers are built once under a file lock (secure_orca/lab/gobuild.py); idle workers take tests from busy
# ones (worksteal), and the longest tests start at once, one per worker (tests/conftest.py).
# One collection first, in one process: it writes pytest's rewritten test modules to __pycache__, which each xdist
# worker would otherwise rewrite again at once (in a fresh clone, 5 workers took 17 s to their first test, 8 s
# warm). Its failures, if any, are reported by the run that follows.
.venv/bin/python -m pytest -q --collect-only -p no:cacheprovider >/dev/null 2>&1 || true
tests=0
.venv/bin/python -m pytest -q -n "$(( 2 * $(nproc) + 1 ))" --dist worksteal "$@" || tests=$?
checked=0
wait "$checks_pid" || checked=$?
cat "$checks_log"
rm -f "$checks_log"
if [ "$checked" != 0 ]; then
  echo "test.sh: the static checks failed (above)" >&2
fi
if [ "$tests" != 0 ]; then exit "$tests"; fi
exit "$checked"
