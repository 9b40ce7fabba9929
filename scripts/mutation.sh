#!/usr/bin/env bash
# Mutation testing of the pure security core (scripts/mutation.py; docs/mutation.md lists the equivalent mutants).
#   ./scripts/mutation.sh                 every mutant of every module (long: see docs/mutation.md)
#   ./scripts/mutation.sh --sample 3      3 mutants per module, drawn with a fixed seed (what .ci/run runs)
#   ./scripts/mutation.sh secure_orca/authz/memo.py --only steady   one module, mutants whose name has "steady"
# Exits 1 when a non-equivalent mutant survives (or a listed equivalent is killed, or no longer exists).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || ./scripts/setup.sh
# Bytecode caches on: every mutant's child imports the tests and the project again.
unset PYTHONDONTWRITEBYTECODE
.venv/bin/python -m compileall -q secure_orca tests >/dev/null
exec .venv/bin/python scripts/mutation.py "$@"
