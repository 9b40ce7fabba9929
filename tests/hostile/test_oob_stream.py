"""Hostile clients of StreamCoreMetrics, frame by frame over real TLS and HTTP/2: refusals read nothing of the
body and keep the connection serving, an announced oversized message is refused at its prefix, and a cancelled
stream gives its slot back (a client cannot exhaust the bounds by resetting)."""

from __future__ import annotations

from secure_orca import pki
from secure_orca.lab import launcher as lb
from secure_orca.lab import replicas as launch
from secure_orca.orca import oob
from tests.replicas import replica_fixture

from .h2client import H2Client

GRPC = [("content-type", "application/grpc"), ("te", "trailers")]


replica = replica_fixture(
    lambda dev: lb.replica_flags(
        dev,
        "front-proxy,load-reader",
        "--endpoint-load-metrics-oob-min-interval",
        "100ms",
        "--endpoint-load-metrics-oob-max-streams-per-connection",
        "2",
    )
)


def connect(replica: launch.Replica, dev: pki.DevPKI, role: str | None) -> H2Client:
    """A client with ``role``'s certificate (none: a bypass client)."""
    return H2Client.connect(replica, dev.cert("ca"), (dev.cert(role), dev.key(role)) if role else None)


def test_a_refusal_reads_no_body_and_the_connection_serves_on(replica: launch.Replica, dev_pki: pki.DevPKI) -> None:
    """A bypass client (no certificate) opens the stream and then pushes 32 KiB on it, 20 times (640 KiB): each
    was answered trailers-only before any of it, and the same connection answers a request after each."""
    client = connect(replica, dev_pki, None)
    try:
        for _ in range(20):
            stream = client.start("POST", oob.PATH, GRPC)
            assert client.pump_until_ended(stream)
            assert client.streams[stream].fields["grpc-status"] == "16" and client.streams[stream].body == b""
            for _ in range(2):  # within the connection window h2 reopens after each round
                client.data(stream, b"\0" * 16384, end=False)  # after the refusal: acknowledged, then reset
            probe = client.start("GET", "/healthz", end=True)  # reading its answer reads the WINDOW_UPDATEs too
            assert client.pump_until_ended(probe) and client.streams[probe].status == 200
    finally:
        client.close()


def test_an_oversized_message_is_refused_at_its_prefix(replica: launch.Replica, dev_pki: pki.DevPKI) -> None:
    client = connect(replica, dev_pki, "load_reader_client")
    try:
        stream = client.start("POST", oob.PATH, GRPC)
        client.data(stream, b"\0" + (1 << 30).to_bytes(4, "big"), end=False)  # announces 1 GiB, sends 5 bytes
        assert client.pump_until_ended(stream)
        assert client.streams[stream].fields["grpc-status"] == str(int(oob.Status.RESOURCE_EXHAUSTED))
        assert client.streams[stream].body == b""
    finally:
        client.close()


def test_cancelled_streams_give_their_slots_back(replica: launch.Replica, dev_pki: pki.DevPKI) -> None:
    """Bound 2 per connection: open 2, cancel both, three times over; every new pair is served a report."""
    client = connect(replica, dev_pki, "load_reader_client")
    try:
        for _ in range(3):
            pair = [client.start("POST", oob.PATH, GRPC) for _ in range(2)]
            for stream in pair:
                client.data(stream, oob.request_frame(0.1))
            done = lambda pair=pair: all(client.streams[s].body or client.streams[s].ended for s in pair)  # noqa: E731
            assert client.pump_until(done)
            statuses = [client.streams[s].fields.get("grpc-status") for s in pair]
            assert statuses == [None, None]  # not RESOURCE_EXHAUSTED (8)
            assert all(oob.parse_report(client.streams[s].body) is not None for s in pair)
            for stream in pair:
                client.reset(stream)
        third = client.start("POST", oob.PATH, GRPC)
        client.data(third, oob.request_frame(0.1))
        assert client.pump_until(lambda: bool(client.streams[third].body) or client.streams[third].ended)
        assert "grpc-status" not in client.streams[third].fields  # served, not RESOURCE_EXHAUSTED
    finally:
        client.close()
