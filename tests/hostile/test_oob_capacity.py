"""The out-of-band stream's slots are shared so that one identity cannot take another's, and a
stream that cannot be written gives its slot back at once. Real TLS and HTTP/2 frame by frame (the h2 library);
a reader that "never reads" announces a zero flow-control window (SETTINGS_INITIAL_WINDOW_SIZE 0): the server
can send it headers but no DATA, so its first report stays unsent for ever."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import h2.errors
import pytest

from secure_orca import pki
from secure_orca.authz.streams import Limits
from secure_orca.h2client import WireFrame
from secure_orca.lab import launcher as lb
from secure_orca.lab import replicas as launch
from secure_orca.orca import oob
from tests import plainhttp
from tests.replicas import replica_fixture, run_replicas
from tests.rotating import replace

from .h2client import H2Client

GRPC = [("content-type", "application/grpc"), ("te", "trailers")]
RESOURCE_EXHAUSTED = str(int(oob.Status.RESOURCE_EXHAUSTED))
FRAME_HEADER, GOAWAY, RST_STREAM = 9, 0x7, 0x3  # RFC 9113 sections 4.1, 6.8, 6.4


class Reader:
    """One connection of a stream client, its response headers and trailers recorded per stream."""

    def __init__(self, replica: launch.Replica, dev: pki.DevPKI, role: str, window: int | None = None) -> None:
        self.client = H2Client.connect(replica, dev.cert("ca"), (dev.cert(role), dev.key(role)), window)
        self.client.reads_past_goaway = True  # a GOAWAY ends no stream it allowed: the client reads on
        self.client.admit = self.admit
        self.goaways = 0

    def admit(self, frame: WireFrame) -> bool:
        """Frames go to h2 up to a GOAWAY; after it, h2 (whose connection is then closed) would refuse every
        frame, so the RST_STREAM frames that end the streams it allowed are read here."""
        if not self.goaways:
            self.goaways += frame.type == GOAWAY
            return True
        if frame.type == RST_STREAM and frame.stream_id in self.client.streams:
            self.client.streams[frame.stream_id].reset = int.from_bytes(frame.raw[FRAME_HEADER : FRAME_HEADER + 4])
        return False

    def open(self, count: int) -> list[int]:
        """``count`` streams, each with its request, read until each is answered (headers, or trailers-only)."""
        streams = [self.client.start("POST", oob.PATH, GRPC) for _ in range(count)]
        for stream in streams:
            self.client.data(stream, oob.request_frame(0.1))
        assert self.client.pump_until(lambda: all(self.client.streams[s].fields.get(":status") for s in streams))
        return streams

    def served(self, streams: list[int]) -> list[int]:
        return [s for s in streams if "grpc-status" not in self.client.streams[s].fields]

    def refused(self, streams: list[int]) -> list[int]:
        return [s for s in streams if self.client.streams[s].fields.get("grpc-status") == RESOURCE_EXHAUSTED]

    def reset(self, streams: list[int]) -> bool:
        """Read until every stream of ``streams`` was reset by the server; False if the connection ended or went
        quiet first (the client's socket timeout: 10 s)."""
        return self.client.pump_until(lambda: all(self.client.streams[s].reset is not None for s in streams))

    def close(self) -> None:
        self.client.close()


def reader_flags(dev: pki.DevPKI, *extra: str) -> list[str]:
    return lb.replica_flags(
        dev,
        "front-proxy,load-reader",
        "--credential-reload-interval",
        "0.1s",
        "--metrics-bind-address",
        "127.0.0.1:0",
        *extra,
    )


def metrics(replica: launch.Replica) -> dict[str, float]:
    """The replica's /metrics samples, by their whole text before the value."""
    found = re.search(r"metrics on (http://\S+/metrics)", "".join(replica.process.lines))
    assert found, replica.process.output()
    text = plainhttp.get(found.group(1), timeout=5).text
    assert pki.FRONT_PROXY_CN not in text  # by identity kind, never by name
    return {line.rpartition(" ")[0]: float(line.rpartition(" ")[2]) for line in text.splitlines() if line[:1] != "#"}


default_replica = replica_fixture(reader_flags)


@pytest.fixture()
def live_pki(dev_pki: pki.DevPKI, tmp_path: Path) -> pki.DevPKI:
    """A copy of the dev PKI whose CA files a test may replace (the server reloads them every 100 ms)."""
    root = tmp_path / "live"
    shutil.copytree(dev_pki.root, root)
    return pki.DevPKI(root)


def test_one_load_reader_cannot_take_the_front_proxys_slots(
    default_replica: launch.Replica, dev_pki: pki.DevPKI
) -> None:
    """The audit's reproduction with the default limits: one load reader opens 64 streams on 16 connections. It
    is served its per-certificate bound and refused the rest; the load balancer's front-proxy certificate is
    then served (before: refused with RESOURCE_EXHAUSTED)."""
    readers = [Reader(default_replica, dev_pki, "load_reader_client") for _ in range(16)]
    balancer = Reader(default_replica, dev_pki, "front_proxy_client")
    try:
        opened = [(reader, reader.open(4)) for reader in readers]
        served = sum(len(reader.served(streams)) for reader, streams in opened)
        refused = sum(len(reader.refused(streams)) for reader, streams in opened)
        assert (served, refused) == (Limits().per_identity, 64 - Limits().per_identity)
        (stream,) = balancer.open(1)
        assert "grpc-status" not in balancer.client.streams[stream].fields
        assert balancer.client.pump_until(lambda: bool(balancer.client.streams[stream].body))
        assert oob.parse_report(balancer.client.streams[stream].body) is not None
        seen = metrics(default_replica)
        refusals = 'secure_orca_oob_stream_refusals_total{kind="load-reader",reason="per-identity",'
        assert seen[refusals + 'status="RESOURCE_EXHAUSTED"}'] == 48
        assert seen['secure_orca_oob_streams_open{kind="load-reader"}'] == 16
        assert seen['secure_orca_oob_streams_open{kind="front-proxy"}'] == 1
        assert seen['secure_orca_oob_reports_sent_total{kind="front-proxy"}'] >= 1
    finally:
        for reader in [*readers, balancer]:
            reader.close()


def test_a_withdrawn_reader_that_reads_nothing_is_reset_and_its_slots_freed(live_pki: pki.DevPKI) -> None:
    """A load reader announces a zero window and holds every load-reader slot (4 of 8; the write deadline is
    an hour, so only the withdrawal can end its streams). Its CA is then reloaded away: each of its streams is
    reset (RST_STREAM CANCEL), though a report waits unsent on each, and a reader of the new CA is served on the
    freed slots. Before: no stream ended (the end waited for the unsent report), and the new reader was refused."""
    flags = reader_flags(
        live_pki,
        *("--endpoint-load-metrics-oob-max-streams", "8", "--endpoint-load-metrics-oob-front-proxy-streams", "4"),
        *("--endpoint-load-metrics-oob-write-deadline", "1h"),
    )
    with run_replicas([launch.serve_argv(live_pki, flags)]) as (replica,):
        stuck = Reader(replica, live_pki, "load_reader_client", window=0)
        try:
            streams = stuck.open(4)
            assert stuck.served(streams) == streams
            new_ca = pki.make_ca("load-reader-ca-2")
            fresh = pki.DevPKI(live_pki.root / "fresh")  # the new CA's reader, as the dev PKI names its files
            fresh.root.mkdir()
            shutil.copy(live_pki.cert("ca"), fresh.cert("ca"))
            issued = pki.issue(new_ca, pki.LOAD_READER_CN)
            fresh.cert("load_reader_client").write_bytes(issued.cert_pem())
            fresh.key("load_reader_client").write_bytes(issued.key_pem())
            replace(live_pki.cert("load_reader_ca"), new_ca.cert_pem(), 0o644)
            assert stuck.reset(streams), "the withdrawn reader's streams were not reset"
            assert {stuck.client.streams[s].reset for s in streams} == {h2.errors.ErrorCodes.CANCEL}
            seen = metrics(replica)
            assert seen['secure_orca_oob_stream_resets_total{cause="withdrawn",kind="load-reader"}'] == 4
            newcomer = Reader(replica, fresh, "load_reader_client")
            try:
                served = newcomer.open(4)
                assert newcomer.served(served) == served  # the 4 freed slots
            finally:
                newcomer.close()
        finally:
            stuck.close()


def test_a_reader_that_reads_nothing_is_reset_at_the_write_deadline(dev_pki: pki.DevPKI) -> None:
    """Zero window, nothing else wrong: each stream's first report stays unsent, and at the write deadline
    (300 ms here) the stream is reset and its slot freed: the same connection is served again, up to its bound
    of 4, three times over. Before: no deadline; the four streams held their slots as long as the connection
    lived."""
    flags = reader_flags(dev_pki, "--endpoint-load-metrics-oob-write-deadline", "300ms")
    with run_replicas([launch.serve_argv(dev_pki, flags)]) as (replica,):
        stuck = Reader(replica, dev_pki, "load_reader_client", window=0)
        try:
            for _ in range(3):
                streams = stuck.open(4)
                assert stuck.served(streams) == streams
                assert stuck.reset(streams), "a stream that could not be written was not reset"
                assert {stuck.client.streams[s].reset for s in streams} == {h2.errors.ErrorCodes.CANCEL}
            seen = metrics(replica)
            assert seen['secure_orca_oob_stream_resets_total{cause="write-deadline",kind="load-reader"}'] == 12
            assert seen['secure_orca_oob_streams_ended_total{cause="write-deadline",kind="load-reader"}'] == 12
            assert seen['secure_orca_oob_streams_open{kind="load-reader"}'] == 0
        finally:
            stuck.close()


@pytest.mark.parametrize("how", ["shutdown", "rotation"])
def test_shutdown_and_rotation_reset_a_stream_that_reads_nothing(dev_pki: pki.DevPKI, how: str) -> None:
    """A zero-window stream when the server stops (SIGTERM) or its connection rotates (the second request on
    it, with --max-requests-per-connection 2): the stream is reset at once rather than held until the drain
    gives up (the graceful timeout, 10 s, or the rotation's drain limit, 60 s), which the client would read
    as a closed connection without any end of its stream."""
    extra = ("--max-requests-per-connection", "2") if how == "rotation" else ()
    flags = reader_flags(dev_pki, "--endpoint-load-metrics-oob-write-deadline", "1h", *extra)
    with run_replicas([launch.serve_argv(dev_pki, flags)]) as (replica,):
        stuck = Reader(replica, dev_pki, "load_reader_client", window=0)
        try:
            (stream,) = stuck.open(1)
            assert stuck.served([stream]) == [stream]
            if how == "shutdown":
                replica.process.terminate()
            else:
                stuck.client.start("GET", "/healthz", end=True)  # the second request: the connection rotates
            assert stuck.reset([stream]), f"{how}: the stream was not reset"
            assert how == "shutdown" or stuck.goaways  # it was the rotation that ended it
            assert stuck.client.streams[stream].reset == h2.errors.ErrorCodes.CANCEL
        finally:
            stuck.close()
