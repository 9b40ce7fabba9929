"""Graceful HTTP/2 connection rotation (--max-requests-per-connection, --goaway-chance), frame by frame with a raw
h2 client, and end to end with httpx: in-flight streams finish, later streams are refused, clients see no error."""

from __future__ import annotations

import socket
import ssl
import time
from collections import Counter
from dataclasses import dataclass, field

import h2.connection
import h2.errors
import hpack
import httpx
import pytest
from hyperframe.frame import DataFrame, Frame, GoAwayFrame, HeadersFrame, RstStreamFrame, SettingsFrame

from secure_orca import launch, pki

from .conftest import fp_flags


@dataclass
class Outcome:
    status: dict[int, int] = field(default_factory=dict)
    ended: set[int] = field(default_factory=set)
    reset: dict[int, int] = field(default_factory=dict)
    goaways: list[tuple[int, int]] = field(default_factory=list)
    closed: bool = False


class RawH2:
    """A minimal HTTP/2 client over TLS, so the test sees every frame's effect."""

    def __init__(self, replica: launch.Replica, ca: str) -> None:
        context = ssl.create_default_context(cafile=ca)
        context.set_alpn_protocols(["h2"])
        raw = socket.create_connection((replica.host, replica.port), timeout=10)
        self.sock = context.wrap_socket(raw, server_hostname=replica.host)
        assert self.sock.selected_alpn_protocol() == "h2"
        self.conn = h2.connection.H2Connection()
        self.conn.initiate_connection()
        self.outcome = Outcome()
        self.buffer = b""
        self.sent: list[int] = []
        self.decoder = hpack.Decoder()
        self.flush()

    def flush(self) -> None:
        self.sock.sendall(self.conn.data_to_send())

    def request(self, path: str) -> int:
        stream = self.conn.get_next_available_stream_id()
        headers = [(":method", "GET"), (":path", path), (":scheme", "https"), (":authority", "localhost")]
        self.conn.send_headers(stream, headers, end_stream=True)
        self.flush()
        self.sent.append(stream)
        return stream

    def read_until_closed(self, timeout: float = 20.0) -> Outcome:
        """Read frames until the server closes, or every stream is answered and the final GOAWAY (last stream
        id below 2**31-1 after all streams) is in. Frames are parsed here, not by h2, whose client state
        machine rejects the frames a server legitimately sends after its GOAWAY."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not self.outcome.closed and not self.finished():
            self.read_frames()
        self.sock.close()
        return self.outcome

    def finished(self) -> bool:
        o = self.outcome
        answered = all(s in o.ended or s in o.reset or (o.goaways and s > o.goaways[0][0]) for s in self.sent)
        return answered and len(o.goaways) >= 2  # the first GOAWAY and the final one

    def read_frames(self) -> None:
        data = self.sock.recv(65536)
        if not data:
            self.outcome.closed = True
            return
        self.buffer += data
        while len(self.buffer) >= 9:
            frame, length = Frame.parse_frame_header(memoryview(self.buffer[:9]))
            if len(self.buffer) < 9 + length:
                return
            frame.parse_body(memoryview(self.buffer[9 : 9 + length]))
            self.buffer = self.buffer[9 + length :]
            self.record(frame)

    def record(self, frame: Frame) -> None:
        o = self.outcome
        if isinstance(frame, HeadersFrame):
            o.status[frame.stream_id] = int(dict(self.decoder.decode(frame.data))[":status"])
        if isinstance(frame, HeadersFrame | DataFrame) and "END_STREAM" in frame.flags:
            o.ended.add(frame.stream_id)
        elif isinstance(frame, RstStreamFrame):
            o.reset[frame.stream_id] = frame.error_code
        elif isinstance(frame, GoAwayFrame):
            o.goaways.append((frame.last_stream_id, frame.error_code))
        elif isinstance(frame, SettingsFrame) and "ACK" not in frame.flags:
            self.sock.sendall(SettingsFrame(0, flags=["ACK"]).serialize())


@pytest.fixture(scope="module")
def rotating(dev_pki: pki.DevPKI):  # type: ignore[no-untyped-def]
    with launch.replicas([launch.serve_argv(dev_pki, [*fp_flags(dev_pki), "--max-requests-per-connection", "3"])]) as (
        replica,
    ):
        yield replica


def test_goaway_lets_in_flight_streams_finish_and_refuses_later_ones(rotating, dev_pki) -> None:  # type: ignore[no-untyped-def]
    client = RawH2(rotating, str(dev_pki.cert("ca")))
    # The third request reaches the limit; it is slow, so it is still in flight when we send more.
    first = [client.request(path) for path in ("/healthz", "/healthz", "/work?cpu_ms=300")]
    while not client.outcome.goaways:  # the GOAWAY is on the wire before the slow request starts working
        client.read_frames()
    late = [client.request("/healthz") for _ in range(2)]  # h2 never saw the GOAWAY, so it lets us send
    outcome = client.read_until_closed()
    assert outcome.goaways[0] == (max(first), h2.errors.ErrorCodes.NO_ERROR)
    assert all(outcome.status.get(s) == 200 and s in outcome.ended for s in first)
    # Later streams are never processed: refused, or (arriving after the close) covered by the GOAWAY's last
    # stream id, which tells the client they are safe to retry. At least one is refused explicitly here.
    assert not any(s in outcome.status for s in late), outcome
    assert all(outcome.reset.get(s, h2.errors.ErrorCodes.REFUSED_STREAM) == h2.errors.ErrorCodes.REFUSED_STREAM
               for s in late)  # fmt: skip
    assert outcome.reset.get(late[0]) == h2.errors.ErrorCodes.REFUSED_STREAM, outcome
    assert len(outcome.goaways) == 2  # then the final GOAWAY; the client closes


def test_rotation_costs_a_compliant_client_no_errors(rotating, dev_pki) -> None:  # type: ignore[no-untyped-def]
    """300 requests, 10 in flight, over connections rotated every 3 requests. A client that does what RFC 9113
    allows (retry streams above the GOAWAY's last stream id, or refused, on a new connection) loses none.
    (httpx 0.28/httpcore and h2load do not retry; Envoy does, with the retry policy secure-orca envoy-config
    writes.)"""
    pending = list(range(300))
    done: dict[int, int] = {}
    connections = 0
    while pending and connections < 400:
        connections += 1
        client = RawH2(rotating, str(dev_pki.cert("ca")))
        streams = {client.request(f"/version?i={i}"): i for i in pending[:10]}
        outcome = client.read_until_closed()
        last = outcome.goaways[0][0] if outcome.goaways else max(streams)
        for stream, i in streams.items():
            if stream in outcome.ended and stream in outcome.status:
                done[i] = outcome.status[stream]
            else:  # never processed: only allowed above the GOAWAY's last stream id
                assert stream > last or outcome.reset.get(stream) == h2.errors.ErrorCodes.REFUSED_STREAM, outcome
        pending = [i for i in pending if i not in done]
    assert Counter(done.values()) == Counter({200: 300})
    assert connections >= 30  # each connection rotated after at most 10 requests


def test_goaway_chance_rebalances_without_errors(dev_pki) -> None:  # type: ignore[no-untyped-def]
    flags = [*fp_flags(dev_pki), "--goaway-chance", "0.02"]
    with launch.replicas([launch.serve_argv(dev_pki, flags)]) as (replica,):
        client = RawH2(replica, str(dev_pki.cert("ca")))
        sent = []
        for _ in range(400):  # sequential: P(no GOAWAY in 400) = 0.98**400 < 0.0004
            sent.append(client.request("/healthz"))
            while sent[-1] not in client.outcome.ended and not client.outcome.closed:
                client.read_frames()
            if client.outcome.goaways:
                break
        outcome = client.read_until_closed()
    assert outcome.goaways and outcome.goaways[0] == (sent[-1], 0)
    assert all(outcome.status.get(s) == 200 for s in sent)
    assert len(outcome.goaways) == 2  # then the final GOAWAY; the client closes


def test_http11_rotation_closes_after_the_response(rotating, dev_pki) -> None:  # type: ignore[no-untyped-def]
    context = ssl.create_default_context(cafile=str(dev_pki.cert("ca")))
    with httpx.Client(verify=context, http2=False, timeout=10) as http:
        statuses = [http.get(rotating.url + "/healthz") for _ in range(7)]
    assert [r.status_code for r in statuses] == [200] * 7
    assert [r.headers.get("connection") for r in statuses].count("close") == 2
