"""The listening socket: bound once, by ``serve`` itself or by the supervisor of ``serve --workers``, whose
workers all accept on it (one accept queue in the kernel)."""

from __future__ import annotations

import resource
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


def raise_descriptor_limit() -> int:
    """RLIMIT_NOFILE's soft limit raised to its hard limit, as Go's runtime does at start (``os/rlimit.go`` from
    Go 1.19, ``syscall/rlimit.go`` from 1.21, go.dev/issue/46279): the soft limit exists for programs that use
    select(2); the loop uses epoll. A hard limit is the operator's to set, and is kept. Returns the soft limit in
    force (a failure to raise it is ignored, as Go ignores it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (OSError, ValueError):
            pass
    return soft
