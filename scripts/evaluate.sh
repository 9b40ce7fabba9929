#!/usr/bin/env bash
# The README's main command: set up from scratch if needed, then evaluate the three options of KEP-6315.
# Extra arguments go to `secure-orca evaluate` (e.g. --quick, --output DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
.venv/bin/secure-orca evaluate "$@"
