"""secure_orca: ORCA load reports (KEP-6315) over HTTP/2 TLS for the load balancer only."""

__version__ = "0.1.0"
