"""A request answered before its body is read must not take its connection down (hypercorn issue 329): a DATA
or trailers frame arriving after the response, or a reset in the middle of a body, touches only its own
stream. Raw h2 frames over real TLS against a real ``serve``; then SIGTERM still stops the server in time."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable

import pytest

from secure_orca import pki
from secure_orca.lab import replicas as launch
from tests.replicas import replica_fixture, run_replicas

from ..conftest import ClientCert, fp_flags
from .h2client import H2Client
from .h2client import Stream as H2Stream

REVIEW = "/apis/authentication.k8s.io/v1/selfsubjectreviews"


replica = replica_fixture(lambda dev: [*fp_flags(dev), "--requestheader-missing-user=unauthorized"])  # kube: 401 early


def after_response_body(client: H2Client, stream: int) -> None:
    client.data(stream, b'{"kind":"SelfSubjectReview"}')


def after_response_trailers(client: H2Client, stream: int) -> None:
    client.trailers(stream, [("x-checksum", "0")])


def after_response_partial_body_then_reset(client: H2Client, stream: int) -> None:
    client.data(stream, b"{", end=False)
    client.reset(stream)


AFTER_RESPONSE: dict[str, Callable[[H2Client, int], None]] = {
    "body": after_response_body,
    "trailers": after_response_trailers,
    "partial-body-then-reset": after_response_partial_body_then_reset,
}


def open_waiting_stream(client: H2Client) -> int:
    """A stream whose request body is half sent: the application is waiting for the rest of it."""
    waiting = client.start("POST", REVIEW, [("content-type", "application/json")])
    client.data(waiting, b'{"kind":', end=False)
    return waiting


def was_reset(client: H2Client, stream: int) -> Callable[[], bool]:
    return lambda: client.streams[stream].reset is not None


@pytest.mark.parametrize("late", AFTER_RESPONSE)
@pytest.mark.parametrize("answered", ["200-demo", "401-front-proxy-without-user"])
def test_frames_after_an_early_response_touch_only_their_stream(
    replica: launch.Replica, dev_pki: pki.DevPKI, client_certs: dict[str, ClientCert], late: str, answered: str
) -> None:
    fp = client_certs["front-proxy"]
    cert = (fp.cert, fp.key) if answered.startswith("401") else None
    client = H2Client.connect(replica, dev_pki.cert("ca"), cert)
    try:
        waiting = open_waiting_stream(client)
        early = client.start("POST", "/version", [("content-type", "application/json")])  # answered unread
        assert client.pump_until_ended(early)
        assert client.streams[early].status == int(answered[:3])
        AFTER_RESPONSE[late](client, early)
        client.data(waiting, b'"SelfSubjectReview"}')  # the other stream goes on
        later = client.start("GET", "/version", end=True)
        assert client.pump_until_ended(waiting, later), "the connection ended"
        expected = 401 if cert else 201
        assert (client.streams[waiting].status, client.streams[later].status) == (expected, int(answered[:3]))
        assert not client.closed
    finally:
        client.close()


def test_an_unread_body_never_blocks_the_other_streams(replica: launch.Replica, dev_pki: pki.DevPKI) -> None:
    """A request answered without reading its body (the demo's /work, which takes a while),
    whose DATA frames arrive before the answer: more than hypercorn's per-stream queue of 10 holds. hypercorn
    awaited that queue inline in the connection's reader, so every other stream of the connection stopped for
    good, and the request never left ``in_flight`` (its task waited to queue http.disconnect)."""
    client = H2Client.connect(replica, dev_pki.cert("ca"))
    try:
        unread = client.conn.get_next_available_stream_id()
        client.conn.send_headers(
            unread,
            [(":method", "POST"), (":path", "/work?cpu_ms=50"), (":scheme", "https"), (":authority", "localhost")],
        )
        client.streams[unread] = H2Stream()
        for _ in range(20):  # one write: every frame is read while the application works
            client.conn.send_data(unread, b"x" * 100)
        client.flush()
        later = client.start("GET", "/version", end=True)
        assert client.pump_until_ended(unread, later), "the connection ended"
        assert (client.streams[unread].status, client.streams[later].status) == (200, 200)
        client.data(unread, b"end")  # the client's side may still be open: refused or ignored, nothing else
        again = client.start("GET", "/version", end=True)
        assert client.pump_until_ended(again) and client.streams[again].status == 200
    finally:
        client.close()


def test_late_bodies_are_acknowledged_so_the_connection_window_never_runs_dry(
    replica: launch.Replica, dev_pki: pki.DevPKI
) -> None:
    """Late DATA still counts against the connection's flow-control window: unless the server hands those bytes
    back (WINDOW_UPDATE), a few late bodies would stall every stream of the connection for good."""
    client = H2Client.connect(replica, dev_pki.cert("ca"))
    chunk = b"x" * 16000
    try:
        for _ in range(8):  # 128,000 late bytes, about twice the 65,535-byte initial connection window
            early = client.start("POST", "/version")
            assert client.pump_until_ended(early)
            assert client.conn.local_flow_control_window(early) >= len(chunk), "the window ran dry"
            client.data(early, chunk, end=False)
            assert client.pump_until(was_reset(client, early)), "the connection ended"
            assert client.streams[early].reset == 0  # NO_ERROR: stop sending, the response is complete
        later = client.start("GET", "/version", end=True)
        assert client.pump_until_ended(later) and client.streams[later].status == 200
    finally:
        client.close()


def test_reset_in_the_middle_of_a_body_touches_only_its_stream(replica: launch.Replica, dev_pki: pki.DevPKI) -> None:
    client = H2Client.connect(replica, dev_pki.cert("ca"))
    try:
        waiting = open_waiting_stream(client)
        dropped = open_waiting_stream(client)
        client.reset(dropped)
        client.data(waiting, b'"SelfSubjectReview"}')
        assert client.pump_until_ended(waiting), "the connection ended"
        assert client.streams[waiting].status == 201
        assert b"system:anonymous" in client.streams[waiting].body
    finally:
        client.close()


def test_sigterm_stops_the_server_after_early_responses_and_stuck_bodies(dev_pki: pki.DevPKI) -> None:
    """Connections left with a late body, and a body that never completes: SIGTERM still ends the process,
    cleanly, once the graceful period is over (the wait below is a bound, not a measurement)."""
    with run_replicas([launch.serve_argv(dev_pki, fp_flags(dev_pki))]) as (server,):
        clients = [H2Client.connect(server, dev_pki.cert("ca")) for _ in range(3)]
        for client in clients:
            early = client.start("POST", "/version")
            assert client.pump_until_ended(early)
            after_response_body(client, early)
            open_waiting_stream(client)  # never completed
        os.kill(server.process.popen.pid, signal.SIGTERM)
        code = server.process.popen.wait(timeout=30)
        for client in clients:
            client.close()
    assert code == 0
    output = "".join(server.process.lines)
    assert "KeyError" not in output, server.process.output(40)


def test_the_hypercorn_names_the_guard_relies_on() -> None:
    """``guard_early_responses`` replaces ``H2Protocol._handle_events`` per instance and wraps
    ``ProtocolWrapper.handle``; both must still be coroutines taking what we pass, and ``streams`` must be the
    dict hypercorn drops finished streams from."""
    import inspect

    from hypercorn.protocol import ProtocolWrapper
    from hypercorn.protocol.h2 import H2Protocol

    assert list(inspect.signature(H2Protocol._handle_events).parameters) == ["self", "events"]
    assert inspect.iscoroutinefunction(H2Protocol._handle_events)
    assert list(inspect.signature(ProtocolWrapper.handle).parameters) == ["self", "event"]
    assert inspect.iscoroutinefunction(ProtocolWrapper.handle)
    assert "self.streams: dict[int, HTTPStream | WSStream] = {}" in inspect.getsource(H2Protocol.__init__)
    assert "self.streams.pop(stream_id)" in inspect.getsource(H2Protocol._close_stream)
