"""The HTTP/2 TLS server: configuration, assembly, middleware, sampler, reload, metrics, proxy, demo backend,
and the one adapter module that touches hypercorn's internals."""
