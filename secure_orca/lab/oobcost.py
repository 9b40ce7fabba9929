"""What the out-of-band stream (StreamCoreMetrics) costs, measured on a real ``serve``: bytes on the wire per report
(ciphertext read through a MemoryBIO, HTTP/2 frames, gRPC messages), instructions per streamed report under
callgrind. Used by ``secure-orca evaluate`` (option 4, ``lab.matched``) and by ``benchmarks/oob_wire.py`` and
``benchmarks/oob_instructions.py`` (docs/out-of-band.md)."""

from __future__ import annotations

import socket
import ssl
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import h2.events

from secure_orca import pki
from secure_orca.credentials import devpki
from secure_orca.h2client import H2Loop
from secure_orca.lab import instrcount
from secure_orca.lab import launcher as lb
from secure_orca.lab import replicas as launch
from secure_orca.orca import oob


class CountingTLS:
    """A client TLS connection over a MemoryBIO: ``received`` counts ciphertext bytes read from the socket (an
    :class:`~secure_orca.h2client.H2Loop` runs over it as over a socket)."""

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

    def sendall(self, data: bytes) -> None:
        self.tls.write(data)
        self._flush()

    def recv(self, size: int) -> bytes:
        while True:
            try:
                return self.tls.read(size)
            except ssl.SSLWantReadError:
                self._pump()

    def gettimeout(self) -> float | None:
        return self.sock.gettimeout()

    def settimeout(self, value: float | None) -> None:
        self.sock.settimeout(value)


def load_reader_context(dev: pki.DevPKI) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(dev.cert("ca")))
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    context.set_alpn_protocols(["h2"])
    context.load_cert_chain(dev.cert("load_reader_client"), dev.key("load_reader_client"))
    return context


def open_stream(conn: CountingTLS, interval: float) -> tuple[H2Loop, int]:
    """Call StreamCoreMetrics on ``conn`` asking for ``interval``: the loop and the stream id (the preface and the
    call in one write)."""
    loop = H2Loop(conn)
    loop.conn.initiate_connection()
    headers = [(b":method", b"POST"), (b":scheme", b"https"), (b":authority", b"localhost"),
               (b":path", oob.PATH_BYTES), (b"content-type", b"application/grpc"), (b"te", b"trailers")]  # fmt: skip
    return loop, loop.request(headers, oob.request_frame(interval))


def read_messages(loop: H2Loop, stream: int, count: int, each: Callable[[int], None]) -> None:
    """Read until ``count`` DATA frames of ``stream`` arrived, each acknowledged and its length given to ``each``."""
    got = 0

    def on_event(event: h2.events.Event) -> None:
        nonlocal got
        if isinstance(event, h2.events.DataReceived) and event.stream_id == stream:
            loop.conn.acknowledge_received_data(event.flow_controlled_length, stream)
            got += 1
            each(len(event.data))

    loop.on_event = on_event
    if not loop.read_until(lambda: got >= count):
        raise ConnectionError("closed")


def read_reports(host: str, port: int, dev: pki.DevPKI, count: int) -> None:
    """One stream on a new connection with the load-reader certificate: ``count`` reports at the 10 ms floor,
    then cancel and close."""
    conn = CountingTLS(host, port, load_reader_context(dev))
    loop, stream = open_stream(conn, 0.01)
    read_messages(loop, stream, count, lambda size: None)
    loop.conn.reset_stream(stream)
    loop.conn.close_connection()
    loop.flush()
    conn.sock.close()


def wire_bytes(reports: int, interval: float) -> dict[str, float]:
    """Bytes per streamed report on one real TLS 1.3 connection with the load-reader certificate (an idle replica
    in load-reader mode started for it, its floor at ``interval``): see ``stream_bytes``."""
    with tempfile.TemporaryDirectory() as tmp:
        dev = devpki.generate(Path(tmp))
        floor = f"{int(interval * 1000)}ms"
        flags = lb.replica_flags(dev, "load-reader", "--endpoint-load-metrics-oob-min-interval", floor)
        with launch.replicas([launch.serve_argv(dev, flags)]) as (replica,):
            return stream_bytes(replica.host, replica.port, dev, interval, reports)


def stream_bytes(host: str, port: int, dev: pki.DevPKI, interval: float, reports: int) -> dict[str, float]:
    """Bytes per streamed report on a new TLS 1.3 connection with the load-reader certificate to a running replica,
    the stream asking for ``interval``: counted after the first report, so they hold at any interval; and the
    reports delivered per second and bytes per second over the same span (what arrived, not the nominal period)."""
    conn = CountingTLS(host, port, load_reader_context(dev))
    loop, stream = open_stream(conn, interval)
    started_at = None  # ciphertext bytes when the first report arrived
    first_at = last_at = 0.0  # when the first and the last report arrived
    frame_bytes, messages = 0, list[int]()

    def each(size: int) -> None:
        nonlocal started_at, frame_bytes, first_at, last_at
        last_at = time.monotonic()
        if started_at is None:
            started_at, first_at = conn.received, last_at
        else:
            frame_bytes += 9 + size
        messages.append(size - oob.PREFIX_SIZE)

    try:
        read_messages(loop, stream, reports + 1, each)
    finally:
        conn.sock.close()
    assert started_at is not None
    counted = len(messages) - 1  # the reports after the first one, whose bytes are all on the wire
    elapsed = max(last_at - first_at, 1e-9)
    return {
        "reports_per_s": counted / elapsed,  # delivered, from the first report's arrival to the last one's
        "tls_bytes_per_s": (conn.received - started_at) / elapsed,
        "reports": counted,
        "message_bytes_median": statistics.median(messages[1:]),
        "message_bytes_min": min(messages[1:]),
        "message_bytes_max": max(messages[1:]),
        "grpc_bytes_per_report": statistics.mean(messages[1:]) + oob.PREFIX_SIZE,
        "http2_bytes_per_report": frame_bytes / counted,  # DATA frames; WINDOW_UPDATEs go the other way
        "tls_bytes_per_report": (conn.received - started_at) / counted,  # ciphertext, records included
    }


def report_instructions(long: int, short: int, repeats: int, layout: int = 0) -> list[float]:
    """Instructions per streamed report, one value per repeat: on the pinned counted server (10 ms floor), a
    window reading ``long`` reports minus one reading ``short``, over the difference. Opening the connection and
    the stream, cancelling and closing cancel out; the pinned sampler never ticks, so serializing a sample (once
    per sample, shared by every stream) is not in the figure."""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        dev = devpki.generate(work / "pki")
        flags = lb.replica_flags(dev, "load-reader", "--endpoint-load-metrics-oob-min-interval", "10ms")
        args = instrcount.serve_args(launch.serve_argv(dev, flags, demo_work=False))
        with instrcount.counted_server(args, work / "callgrind.out", layout=layout) as server:
            server.control("--instr=on")
            read_reports(server.host, server.port, dev, short)  # warm-up: imports and first-use caches
            for r in range(repeats):
                for label, count in (("long", long), ("short", short)):
                    with server.window(f"oob,{label},{r}"):
                        read_reports(server.host, server.port, dev, count)
            totals = server.totals()
        return [(totals[f"oob,long,{r}"] - totals[f"oob,short,{r}"]) / (long - short) for r in range(repeats)]
