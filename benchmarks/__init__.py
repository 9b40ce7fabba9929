"""Performance benchmarks: the cost of the load report on the request path. Run them with
``python -m benchmarks.run`` (see docs/performance.md)."""
