"""The reverse proxy (``--proxy PREFIX=URL``): the ASGI app (forward), its HTTP/1.1 upstream client (upstream),
its per-route metrics (metrics) and a backend's own load report for the entitled (backendload)."""
