"""The listening socket: bound once, by ``serve`` itself or by the supervisor of ``serve --workers``, whose
workers all accept on it (one accept queue in the kernel)."""

from __future__ import annotations

import socket

BACKLOG = socket.SOMAXCONN


def listen(host: str, port: int, backlog: int = BACKLOG) -> socket.socket:
    """A non-blocking listening socket on ``host``:``port`` (an OSError is the caller's to word)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind((host, port))
        sock.listen(backlog)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock
