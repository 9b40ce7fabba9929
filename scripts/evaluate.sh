#!/usr/bin/env bash
# The README's main command: set up from scratch if needed, then evaluate the options of KEP-6315 and the
# out-of-band stream (option 4).
# Extra arguments go to `secure-orca evaluate` (e.g. --quick, --output DIR). The committed document:
#   ./scripts/evaluate.sh --publish docs/security-options.md   (a full run; writes docs/security-options.json too)
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
.venv/bin/secure-orca evaluate "$@"
