"""SIGTERM while clients hold connections that carry no request the server is answering (issue 40: h2spec's
sessions): TLS done and nothing sent, or POST streams whose bodies never come. Shutdown ends them at once
instead of waiting the whole grace period for them, says so, and logs no traceback. Before: the server waited
its 10 s grace period, then cut them (and a batch read at shutdown from a client that had gone made hypercorn
reset a stream on a closed connection: a traceback)."""

from __future__ import annotations

import re
import threading

from secure_orca import pki
from secure_orca.lab import replicas as launch
from tests.hostile.wire import connect, tls_context
from tests.replicas import run_replicas
from tests.workers.flood import Flood, end, flood


def test_connections_without_a_request_being_answered_end_at_once_at_sigterm(dev_pki: pki.DevPKI) -> None:
    with run_replicas([launch.serve_argv(dev_pki, [])]) as (replica,):
        opened: Flood = []
        flood(replica, dev_pki, threading.Event(), opened, connections=6, streams=20)
        silent = [connect(replica, tls_context(dev_pki, "h2")) for _ in range(2)]  # handshake, then nothing
        try:
            assert len(opened) == 6
            assert replica.process.stop(30) == 0
        finally:
            end(opened)
            for sock in silent:
                sock.close()
        log = "".join(replica.process.lines)
    ended = re.search(r"at shutdown, (\d+) connections held no request being answered; ended them", log)
    assert ended is not None and int(ended.group(1)) >= 6, log[-2000:]
