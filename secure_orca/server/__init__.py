"""The HTTP/2 TLS server: configuration, assembly, middleware, sampler, reload, metrics, demo backend, and its
wings: audit, proxy, hpack (the server's header coding) and http (the one package touching hypercorn's internals)."""
