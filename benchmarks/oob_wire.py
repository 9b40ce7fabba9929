"""Bytes on the wire of the out-of-band stream, measured on a real connection (docs/out-of-band.md).

    python -m benchmarks.oob_wire --reports 50 --interval 0.1

Starts one ``serve`` replica (development PKI in a temporary directory, load-reader mode, the stream's floor at
``--interval``), opens one TLS 1.3 connection with the load-reader certificate, calls StreamCoreMetrics asking for
``--interval``, and reads ``--reports`` reports. Every byte is counted where it is: the ciphertext read from the
socket (through a MemoryBIO: TLS records included), the HTTP/2 frames h2 parsed from it, and the gRPC messages.
The figures are per report after the response headers, so they hold at any report interval: bytes per second per
load-balancer connection is ``per report / interval``, whatever the request rate.
"""

from __future__ import annotations

import argparse
import socket
import ssl
import statistics
import tempfile
from pathlib import Path

import h2.config
import h2.connection
import h2.events

from secure_orca import pki
from secure_orca.lab import launcher as lb
from secure_orca.lab import replicas as launch
from secure_orca.orca import oob


class CountingTLS:
    """A client TLS connection over a MemoryBIO: ``received`` counts ciphertext bytes read from the socket."""

    def __init__(self, host: str, port: int, context: ssl.SSLContext) -> None:
        self.sock = socket.create_connection((host, port), timeout=10)
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.tls = context.wrap_bio(self.incoming, self.outgoing, server_hostname="localhost")
        self.received = 0
        while True:
            try:
                self.tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                self._pump()
        self._flush()

    def _flush(self) -> None:
        data = self.outgoing.read()
        if data:
            self.sock.sendall(data)

    def _pump(self) -> None:
        self._flush()
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionError("closed")
        self.received += len(data)
        self.incoming.write(data)

    def send(self, data: bytes) -> None:
        self.tls.write(data)
        self._flush()

    def recv(self) -> bytes:
        while True:
            try:
                return self.tls.read(65536)
            except ssl.SSLWantReadError:
                self._pump()


def open_stream(
    dev: pki.DevPKI, host: str, port: int, interval: float
) -> tuple[CountingTLS, h2.connection.H2Connection, int]:
    """A new TLS 1.3 connection with the load-reader certificate and one StreamCoreMetrics call on it, sent."""
    context = ssl.create_default_context(cafile=str(dev.cert("ca")))
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    context.set_alpn_protocols(["h2"])
    context.load_cert_chain(dev.cert("load_reader_client"), dev.key("load_reader_client"))
    conn = CountingTLS(host, port, context)
    h2c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding=None))
    h2c.initiate_connection()
    stream = h2c.get_next_available_stream_id()
    headers = [
        (b":method", b"POST"),
        (b":scheme", b"https"),
        (b":authority", b"localhost"),
        (b":path", oob.PATH_BYTES),
        (b"content-type", b"application/grpc"),
        (b"te", b"trailers"),
    ]
    h2c.send_headers(stream, headers)
    h2c.send_data(stream, oob.request_frame(interval), end_stream=True)
    conn.send(h2c.data_to_send())
    return conn, h2c, stream


def measure(reports: int, interval: float) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        dev = pki.generate(Path(tmp))
        floor = f"{int(interval * 1000)}ms"
        flags = lb.replica_flags(dev, "load-reader", "--endpoint-load-metrics-oob-min-interval", floor)
        with launch.replicas([launch.serve_argv(dev, flags)]) as (replica,):
            conn, h2c, stream = open_stream(dev, replica.host, replica.port, interval)
            started_at = None  # ciphertext and frame bytes when the first report arrived
            frame_bytes, messages = 0, list[int]()
            while len(messages) < reports:
                data = conn.recv()
                events = h2c.receive_data(data)
                for event in events:
                    if isinstance(event, h2.events.DataReceived) and event.stream_id == stream:
                        h2c.acknowledge_received_data(event.flow_controlled_length, stream)
                        if started_at is None:
                            started_at = (conn.received, 0)
                        else:
                            frame_bytes += 9 + len(event.data)
                        messages.append(len(event.data) - oob.PREFIX_SIZE)
                conn.send(h2c.data_to_send())
            assert started_at is not None
            counted = len(messages) - 1  # the reports after the first one, whose bytes are all on the wire
            return {
                "reports": counted,
                "message_bytes_median": statistics.median(messages[1:]),
                "message_bytes_min": min(messages[1:]),
                "message_bytes_max": max(messages[1:]),
                "grpc_bytes_per_report": statistics.mean(messages[1:]) + oob.PREFIX_SIZE,
                "http2_bytes_per_report": frame_bytes / counted,  # DATA frames; WINDOW_UPDATEs go the other way
                "tls_bytes_per_report": (conn.received - started_at[0]) / counted,  # ciphertext, records included
            }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reports", type=int, default=50)
    parser.add_argument("--interval", type=float, default=0.1)
    args = parser.parse_args()
    figures = measure(args.reports, args.interval)
    for name, value in figures.items():
        print(f"{name:24} {value:10.1f}")
    tls = figures["tls_bytes_per_report"]
    for period in (0.1, 1.0, 10.0):
        print(f"bytes/s per LB connection at a {period:g} s period: {tls / period:8.1f} (any request rate)")


if __name__ == "__main__":
    main()
