"""Performance benchmarks of issue 6: run with ``python -m benchmarks.run`` (see docs/performance.md)."""
