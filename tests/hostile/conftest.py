"""Fixtures shared with the main suite."""

from ..test_rotation import rig  # noqa: F401  (a live server with credential files to rotate)
