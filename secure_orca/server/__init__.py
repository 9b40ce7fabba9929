"""The HTTP/2 TLS server: configuration, assembly, middleware, sampler, reload, metrics, proxy, demo backend,
and the one package that touches hypercorn's internals (http)."""
