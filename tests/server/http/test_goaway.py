"""Graceful HTTP/2 connection rotation (--max-requests-per-connection, --goaway-chance), frame by frame with a raw
h2 client, and end to end with httpx: in-flight streams finish, later streams are refused, clients see no error."""

from __future__ import annotations

import contextlib
import ssl
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import h2.errors
import hpack
import httpx
import pytest
from hyperframe.frame import DataFrame, GoAwayFrame, HeadersFrame, RstStreamFrame, SettingsFrame

from secure_orca import pki
from secure_orca.h2client import H2Loop, ReadDeadline, WireFrame, connect
from secure_orca.lab import replicas as launch
from secure_orca.server.http.rotation import MAX_STREAM_ID
from tests.conftest import fp_flags
from tests.replicas import run_replicas


@dataclass
class Outcome:
    status: dict[int, int] = field(default_factory=dict)
    ended: set[int] = field(default_factory=set)
    reset: dict[int, int] = field(default_factory=dict)
    goaways: list[tuple[int, int]] = field(default_factory=list)
    closed: bool = False


class RawH2:
    """A minimal HTTP/2 client over TLS, so the test sees every frame's effect: h2 writes the requests, and every
    frame received is parsed here, none by h2, whose client state machine rejects the frames a server
    legitimately sends after its GOAWAY."""

    def __init__(self, replica: launch.Replica, ca: str) -> None:
        context = ssl.create_default_context(cafile=ca)
        context.set_alpn_protocols(["h2"])
        self.sock = connect(replica.host, replica.port, context, server_hostname=replica.host)
        assert self.sock.selected_alpn_protocol() == "h2"
        self.loop = H2Loop(self.sock, on_frame=self.record, admit=lambda frame: False)
        self.outcome = Outcome()
        self.sent: list[int] = []
        self.decoder = hpack.Decoder()
        self.loop.open()

    def request(self, path: str) -> int:
        headers = [(":method", "GET"), (":path", path), (":scheme", "https"), (":authority", "localhost")]
        self.sent.append(self.loop.request(headers))
        return self.sent[-1]

    def read_until(self, done: Callable[[], bool], timeout: float = 20.0) -> Outcome:
        """Read frames until ``done()``, the server closes, or ``timeout`` seconds pass."""
        with contextlib.suppress(ReadDeadline):
            self.loop.read_until(done, timeout)
        self.outcome.closed = self.loop.eof
        return self.outcome

    def answered(self) -> bool:
        """Every stream sent has ended or been reset: a real client would now close a rotated connection."""
        o = self.outcome
        return all(s in o.ended or s in o.reset for s in self.sent)

    def real_goaway(self) -> int | None:
        """The last stream id of the first GOAWAY after the notice (2**31-1), if one arrived."""
        return next((last for last, _ in self.outcome.goaways if last != MAX_STREAM_ID), None)

    def record(self, wire: WireFrame) -> None:
        if wire.outbound:
            return
        o, frame = self.outcome, wire.parse()
        if isinstance(frame, HeadersFrame):
            o.status[frame.stream_id] = int(dict(self.decoder.decode(frame.data, raw=True))[b":status"])
        if isinstance(frame, HeadersFrame | DataFrame) and "END_STREAM" in frame.flags:
            o.ended.add(frame.stream_id)
        elif isinstance(frame, RstStreamFrame):
            o.reset[frame.stream_id] = frame.error_code
        elif isinstance(frame, GoAwayFrame):
            o.goaways.append((frame.last_stream_id, frame.error_code))
        elif isinstance(frame, SettingsFrame) and "ACK" not in frame.flags:
            self.loop.send_raw(SettingsFrame(0, flags=["ACK"]).serialize())


@pytest.fixture(scope="module")
def rotating(dev_pki: pki.DevPKI):
    with run_replicas([launch.serve_argv(dev_pki, [*fp_flags(dev_pki), "--max-requests-per-connection", "3"])]) as (
        replica,
    ):
        yield replica


def test_goaway_lets_in_flight_streams_finish_and_refuses_later_ones(rotating, dev_pki) -> None:
    client = RawH2(rotating, str(dev_pki.cert("ca")))
    # The third request reaches the limit; it is slow, so it is still in flight when the GOAWAYs go out.
    first = [client.request(path) for path in ("/healthz", "/healthz", "/work?cpu_ms=300")]
    client.read_until(lambda: client.real_goaway() is not None)
    late = [client.request("/healthz") for _ in range(2)]  # h2 never saw the GOAWAYs, so it lets us send
    outcome = client.read_until(lambda: False, timeout=3)  # to the server's close (or 3 s)
    client.sock.close()
    assert outcome.goaways[0] == (MAX_STREAM_ID, h2.errors.ErrorCodes.NO_ERROR)  # the notice first
    last = client.real_goaway()
    assert last is not None and last == max(first)
    assert all(outcome.status.get(s) == 200 and s in outcome.ended for s in first)
    # Streams sent after the real GOAWAY are never processed: refused, or (once the server has closed the
    # h2 session) left unanswered above the last stream id; either way safe for the client to retry.
    assert not any(s in outcome.status for s in late), outcome
    refused = h2.errors.ErrorCodes.REFUSED_STREAM
    assert all(outcome.reset.get(s, refused) == refused and s > last for s in late), outcome


def test_streams_in_flight_during_the_notice_are_served(rotating, dev_pki) -> None:
    """Streams a client opened before it read the notice (the race RFC 9113 section 6.8 describes) are within
    the grace period: they are answered, not refused."""
    client = RawH2(rotating, str(dev_pki.cert("ca")))
    first = [client.request("/healthz") for _ in range(3)]
    client.read_until(lambda: bool(client.outcome.goaways))  # the notice
    racing = [client.request("/healthz") for _ in range(2)]
    outcome = client.read_until(lambda: client.answered() and client.real_goaway() is not None)
    client.sock.close()
    assert all(outcome.status.get(s) == 200 for s in [*first, *racing]), outcome
    assert client.real_goaway() == max(racing)


def test_rotation_costs_a_compliant_client_no_errors(rotating, dev_pki) -> None:
    """300 requests, 10 in flight, over connections rotated every 3 requests. A client that does what RFC 9113
    asks (no new streams after a GOAWAY; retry streams above the last stream id, or refused, on a new
    connection) loses none. (httpx 0.28/httpcore and h2load do not retry; Envoy does, with the retry policy
    secure-orca envoy-config writes.)"""
    pending = list(range(300))
    done: dict[int, int] = {}
    connections = 0
    while pending and connections < 400:
        connections += 1
        client = RawH2(rotating, str(dev_pki.cert("ca")))
        streams = {client.request(f"/version?i={i}"): i for i in pending[:10]}
        outcome = client.read_until(client.answered)
        client.sock.close()
        last = client.real_goaway() or max(streams)
        for stream, i in streams.items():
            if stream in outcome.ended and stream in outcome.status:
                done[i] = outcome.status[stream]
            else:  # never processed: only allowed above the GOAWAY's last stream id
                assert stream > last or outcome.reset.get(stream) == h2.errors.ErrorCodes.REFUSED_STREAM, outcome
        pending = [i for i in pending if i not in done]
    assert Counter(done.values()) == Counter({200: 300})
    assert connections >= 30  # each connection rotated after at most 10 requests


def test_goaway_chance_rebalances_without_errors(dev_pki) -> None:
    flags = [*fp_flags(dev_pki), "--goaway-chance", "0.02"]
    with run_replicas([launch.serve_argv(dev_pki, flags)]) as (replica,):
        client = RawH2(replica, str(dev_pki.cert("ca")))
        sent = []
        for _ in range(400):  # sequential: P(no GOAWAY in 400) = 0.98**400 < 0.0004
            sent.append(client.request("/healthz"))
            client.read_until(lambda: sent[-1] in client.outcome.ended)
            if client.outcome.goaways:
                break
        outcome = client.read_until(lambda: client.real_goaway() is not None)
        client.sock.close()
    assert outcome.goaways[0] == (MAX_STREAM_ID, 0)
    assert client.real_goaway() == sent[-1]
    assert all(outcome.status.get(s) == 200 for s in sent)


def test_http11_rotation_closes_after_the_response(rotating, dev_pki) -> None:
    context = ssl.create_default_context(cafile=str(dev_pki.cert("ca")))
    with httpx.Client(verify=context, http2=False, timeout=10) as http:
        statuses = [http.get(rotating.url + "/healthz") for _ in range(7)]
    assert [r.status_code for r in statuses] == [200] * 7
    assert [r.headers.get("connection") for r in statuses].count("close") == 2


def test_rotation_is_off_by_default(dev_pki: pki.DevPKI) -> None:
    """kube-apiserver has no per-connection request limit (and --goaway-chance 0), so a load
    balancer's connection is never rotated unless asked: 1,050 requests on one connection, no GOAWAY."""
    from tests.hostile.wire import connect, h2_loop, read_streams, tls_context

    headers = [(":method", "GET"), (":path", "/healthz"), (":scheme", "https"), (":authority", "localhost")]
    with run_replicas([launch.serve_argv(dev_pki, fp_flags(dev_pki))]) as (replica,):
        sock = connect(replica, tls_context(dev_pki, "h2"))
        loop = h2_loop(sock)
        replies = {}
        for _ in range(21):  # batches of 50 concurrent streams
            batch = []
            for _ in range(50):
                stream_id = loop.conn.get_next_available_stream_id()
                loop.conn.send_headers(stream_id, headers, end_stream=True)
                batch.append(stream_id)
            loop.flush()
            replies.update(read_streams(loop, batch))
        sock.close()
    assert len(replies) == 1050
    assert not [r for r in replies.values() if r.goaway or r.closed or r.status != 200]
