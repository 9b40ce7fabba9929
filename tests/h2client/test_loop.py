"""The client-side HTTP/2 loop (``secure_orca.h2client``) against the real server over real TLS: a request and
its response, the frame hook against the bytes the socket itself carried, raw frames past h2, the deadline."""

from __future__ import annotations

import socket
import ssl

import h2.events
import pytest
from hyperframe.frame import DataFrame, GoAwayFrame, HeadersFrame, PingFrame, SettingsFrame, WindowUpdateFrame

from secure_orca import pki
from secure_orca.h2client import PREFACE, H2Loop, ReadDeadline, WireFrame, connect
from secure_orca.lab import replicas as launch

GET = [(b":method", b"GET"), (b":path", b"/healthz"), (b":scheme", b"https"), (b":authority", b"localhost")]


class Counted:
    """The TLS socket, its traffic counted here rather than by the loop."""

    def __init__(self, sock: ssl.SSLSocket) -> None:
        self.sock, self.sent, self.received = sock, 0, 0

    def sendall(self, data: bytes) -> None:
        self.sock.sendall(data)
        self.sent += len(data)

    def recv(self, size: int) -> bytes:
        data = self.sock.recv(size)
        self.received += len(data)
        return data

    def gettimeout(self) -> float | None:
        return self.sock.gettimeout()

    def settimeout(self, value: float | None) -> None:
        self.sock.settimeout(value)


def tls(replica: launch.Replica, dev_pki: pki.DevPKI) -> ssl.SSLSocket:
    context = ssl.create_default_context(cafile=str(dev_pki.cert("ca")))
    context.set_alpn_protocols(["h2"])
    sock = connect(replica.host, replica.port, context)
    assert sock.selected_alpn_protocol() == "h2"
    return sock


def test_a_request_and_its_response(secured_replica: launch.Replica, dev_pki: pki.DevPKI) -> None:
    events: list[h2.events.Event] = []
    with tls(secured_replica, dev_pki) as sock:
        loop = H2Loop(sock, on_event=events.append).open()
        stream = loop.request(GET)
        assert loop.read_until(lambda: any(isinstance(e, h2.events.StreamEnded) for e in events), timeout=10)
    response = next(e for e in events if isinstance(e, h2.events.ResponseReceived))
    assert (response.stream_id, dict(response.headers)[b":status"]) == (stream, b"200")
    assert b"".join(e.data for e in events if isinstance(e, h2.events.DataReceived)) == b"ok"
    assert not loop.closed


def test_the_frame_hook_sees_every_byte_both_ways(secured_replica: launch.Replica, dev_pki: pki.DevPKI) -> None:
    frames: list[WireFrame] = []
    with tls(secured_replica, dev_pki) as sock:
        counted = Counted(sock)
        loop = H2Loop(counted, on_frame=frames.append).open()
        ended: list[int] = []
        loop.on_event = lambda e: ended.append(e.stream_id) if isinstance(e, h2.events.StreamEnded) else None
        for _ in range(3):
            loop.request(GET)
        assert loop.read_until(lambda: len(ended) == 3, timeout=10)
        loop.conn.ping(b"12345678")  # read to its ACK: the server has nothing more to send
        loop.flush()
        acked: list[bool] = []
        loop.on_event = lambda e: acked.append(isinstance(e, h2.events.PingAckReceived))
        assert loop.read_until(lambda: any(acked), timeout=10)
    received = [f for f in frames if not f.outbound]
    sent = [f for f in frames if f.outbound]
    assert sum(len(f.raw) for f in received) == loop.bytes_received == counted.received > 0
    assert len(PREFACE) + sum(len(f.raw) for f in sent) == loop.bytes_sent == counted.sent
    parsed = [f.parse() for f in received]
    assert [type(p) for p in parsed][:1] == [SettingsFrame]
    assert sorted(p.stream_id for p in parsed if isinstance(p, HeadersFrame)) == [1, 3, 5]
    assert [p.data for p in parsed if isinstance(p, DataFrame) and p.data] == [b"ok"] * 3
    assert [(f.type, f.stream_id) for f in sent if f.type == HeadersFrame.type] == [(1, 1), (1, 3), (1, 5)]


def test_raw_frames_past_h2(secured_replica: launch.Replica, dev_pki: pki.DevPKI) -> None:
    """``send_raw`` sends a frame h2 would never write (a PING of 7 bytes); with ``admit`` refusing all, the
    server's answer is read as frames, which h2 never sees."""
    frames: list[WireFrame] = []
    with tls(secured_replica, dev_pki) as sock:
        loop = H2Loop(sock, on_frame=frames.append, admit=lambda frame: False).open()
        loop.send_raw(b"\x00\x00\x07" + bytes([PingFrame.type, 0]) + b"\x00\x00\x00\x00" + b"1234567")
        assert loop.read_until(lambda: any(f.type == GoAwayFrame.type for f in frames), timeout=10)
    goaway = next(f.parse() for f in frames if f.type == GoAwayFrame.type)
    assert isinstance(goaway, GoAwayFrame) and goaway.error_code == 6  # FRAME_SIZE_ERROR
    assert not loop.terminated  # h2 never saw the GOAWAY


def test_the_deadline_ends_the_read_with_a_clear_error(secured_replica: launch.Replica, dev_pki: pki.DevPKI) -> None:
    with tls(secured_replica, dev_pki) as sock:
        loop = H2Loop(sock).open()
        with pytest.raises(ReadDeadline, match="read deadline passed before the condition held"):
            loop.read_until(lambda: False, timeout=0.5)
        assert sock.gettimeout() == 10.0  # the socket's own timeout is back
        assert not loop.closed
        assert loop.read_until(lambda: True, timeout=0)  # a condition that holds needs no read


def test_frames_split_across_reads_are_shown_whole_and_in_order() -> None:
    """Over a real socket pair, a peer's frames arrive in pieces that cut them anywhere: the hook sees each whole
    frame once, in order, and h2 gets exactly the admitted ones."""
    ping = PingFrame(0)
    ping.opaque_data = b"12345678"
    update = WindowUpdateFrame(0)
    update.window_increment = 1000
    frames = [SettingsFrame(0).serialize(), ping.serialize(), update.serialize()]
    wire = b"".join(frames)
    seen: list[WireFrame] = []
    near, far = socket.socketpair()
    with near, far:
        loop = H2Loop(near, on_frame=seen.append, admit=lambda frame: frame.type != PingFrame.type).open()
        events = []
        for piece in (wire[:5], wire[5:20], wire[20:]):
            far.sendall(piece)
            events += loop.read()
    assert [f.raw for f in seen if not f.outbound] == frames
    assert loop.bytes_received == len(wire)
    assert [type(e) for e in events] == [h2.events.RemoteSettingsChanged, h2.events.WindowUpdated]
