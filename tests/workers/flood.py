"""A flood of HTTP/2 POST streams that announce a body and never send it (issue 40's), on real TLS connections,
and its end as a client that gives up: its streams reset, GOAWAY, then closed."""

from __future__ import annotations

import contextlib
import ssl
import time
from typing import Protocol

import h2.connection
import h2.errors
import h2.exceptions

from secure_orca import pki
from secure_orca.lab import replicas as launch
from tests.hostile.wire import connect, h2_client, tls_context

FLOOD_CONNECTIONS, STREAMS = 150, 100

Flood = list[tuple[ssl.SSLSocket, h2.connection.H2Connection]]


class Stop(Protocol):
    """When the flood stops opening connections: a ``threading.Event``, or any condition with its ``is_set``."""

    def is_set(self) -> bool: ...


def flood(
    replica: launch.Replica,
    dev_pki: pki.DevPKI,
    stop: Stop,
    opened: Flood,
    connections: int = FLOOD_CONNECTIONS,
    streams: int = STREAMS,
) -> None:
    """``connections`` of ``streams`` POST streams each that announce a body and never send it, until ``stop``."""
    context = tls_context(dev_pki, "h2")
    headers = [
        (":method", "POST"),
        (":scheme", "https"),
        (":authority", "localhost"),
        (":path", "/version"),
        ("content-length", "1000000"),
    ]
    for _ in range(connections):
        if stop.is_set():
            return
        try:
            sock = connect(replica, context)
            conn = h2_client()
            for index in range(streams):
                conn.send_headers(1 + 2 * index, headers)
            sock.sendall(conn.data_to_send())
            opened.append((sock, conn))
        except (OSError, ssl.SSLError):
            continue


def end(opened: Flood) -> None:
    """Each flood connection ended as a client that gives up does: its streams reset, GOAWAY, then closed."""
    for sock, conn in opened:
        with contextlib.suppress(OSError, ssl.SSLError, h2.exceptions.H2Error):
            for stream_id in list(conn.streams):
                conn.reset_stream(stream_id, h2.errors.ErrorCodes.CANCEL)
            conn.close_connection()
            sock.sendall(conn.data_to_send())
    time.sleep(0.5)
    for sock, _ in opened:
        with contextlib.suppress(OSError):
            sock.close()
    opened.clear()
