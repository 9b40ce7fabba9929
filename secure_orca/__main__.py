"""``python -m secure_orca``: the same as the ``secure-orca`` command."""

import sys

from secure_orca.cli import main

sys.exit(main())
