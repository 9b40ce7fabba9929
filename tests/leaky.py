"""A test-only HTTP/2 server over TLS whose secret comparison leaks time on purpose: the positive control of the
probe's timing check. It compares the secret in the opt-in header character by character, stops at the first
difference, and spends ``PER_CHARACTER`` seconds (busy) on each character that matched, so a wrong secret that
differs at the last character takes about len(secret) x PER_CHARACTER longer than one that differs at the first.
It never sends a load report (the timing check refuses a server that does)."""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import trustme

from secure_orca.orca.headers import OPTIN

PER_CHARACTER = 50e-6  # seconds per matching character: 32 characters, at least 1.6 ms of difference


def leaky_equal(given: str, secret: str) -> bool:
    """The comparison a secure server must not make: early exit, and time per matching character."""
    if len(given) != len(secret):
        return False
    for a, b in zip(given, secret, strict=True):
        if a != b:
            return False
        end = time.perf_counter() + PER_CHARACTER
        while time.perf_counter() < end:
            pass
    return True


def _serve_connection(sock: ssl.SSLSocket, secret: str) -> None:
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding=None))
    conn.initiate_connection()
    sock.sendall(conn.data_to_send())
    with suppress(OSError, h2.exceptions.ProtocolError):
        while data := sock.recv(65536):
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.RequestReceived):
                    value = dict(event.headers or []).get(OPTIN.encode(), b"").decode("latin-1")
                    leaky_equal(value.partition("secret=")[2], secret)
                    conn.send_headers(event.stream_id, [(":status", "200"), ("content-length", "2")])
                    conn.send_data(event.stream_id, b"ok", end_stream=True)
            sock.sendall(conn.data_to_send())
    sock.close()


@contextmanager
def leaky_server(secret: str) -> Iterator[tuple[str, str]]:
    """(URL, CA file) of the leaky server on a loopback port; it stops on exit."""
    ca = trustme.CA()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.set_alpn_protocols(["h2"])
    ca.issue_cert("localhost", "127.0.0.1").configure_cert(context)
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def accept() -> None:
        with suppress(OSError):
            while True:
                raw, _ = listener.accept()
                try:
                    sock = context.wrap_socket(raw, server_side=True)
                except (OSError, ssl.SSLError):
                    raw.close()
                    continue
                threading.Thread(target=_serve_connection, args=(sock, secret), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    with ca.cert_pem.tempfile() as cafile:
        try:
            yield f"https://127.0.0.1:{port}", cafile
        finally:
            listener.close()
