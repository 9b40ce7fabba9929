"""Every connection task ends. h2spec http2/6.9.1/1 (SETTINGS_INITIAL_WINDOW_SIZE=1, then a
request, then the client leaves) left the response waiting for flow control forever: its task, its buffers and
its request in ``in_flight_requests`` stayed (about 530 KB per connection). Then SIGTERM: the server ends the
connections still open after the graceful period itself, with no traceback."""

from __future__ import annotations

import os
import signal

import h2.events
import h2.settings

from secure_orca import pki
from secure_orca.lab import replicas as launch
from tests.replicas import assert_no_traceback, replica_fixture, run_replicas

from ..conftest import fp_flags
from .wire import assert_nothing_in_flight, connect, h2_loop, log_text, tls_context

replica = replica_fixture(fp_flags)


def starve_and_leave(replica: launch.Replica, dev_pki: pki.DevPKI) -> int:
    """h2spec http2/6.9.1/1: a window of one byte, one request, one byte of the response read, then gone."""
    with connect(replica, tls_context(dev_pki, "h2")) as sock:
        loop = h2_loop(sock)
        loop.conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 1})
        loop.request([(":method", "GET"), (":path", "/version"), (":scheme", "https"), (":authority", "localhost")])
        sizes: list[int] = []
        loop.on_event = lambda e: sizes.append(len(e.data)) if isinstance(e, h2.events.DataReceived) else None
        loop.read_until(lambda: sum(sizes) >= 1)
        return sum(sizes)


def test_a_response_starved_of_window_ends_with_its_connection(replica, dev_pki) -> None:
    assert [starve_and_leave(replica, dev_pki) for _ in range(5)] == [1] * 5
    assert_nothing_in_flight(replica, dev_pki)
    assert_no_traceback(replica)


def test_sigterm_ends_connections_left_open(dev_pki) -> None:
    """A starved response on a connection the client keeps open: after the graceful period the server ends
    it and exits 0, without a CancelledError traceback."""
    with run_replicas([launch.serve_argv(dev_pki, fp_flags(dev_pki))]) as (server,):
        sock = connect(server, tls_context(dev_pki, "h2"))
        loop = h2_loop(sock)
        loop.conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 1})
        loop.request([(":method", "GET"), (":path", "/version"), (":scheme", "https"), (":authority", "localhost")])
        assert sock.recv(65536)  # the server's preface and the response's first byte: the stream is running
        os.kill(server.process.popen.pid, signal.SIGTERM)
        code = server.process.popen.wait(timeout=30)
        sock.close()
    assert code == 0
    assert "CancelledError" not in log_text(server), server.process.output(40)
