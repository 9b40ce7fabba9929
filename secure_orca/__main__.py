"""``python -m secure_orca``: the same as the ``secure-orca`` command."""

import sys

from .cli import main

sys.exit(main())
