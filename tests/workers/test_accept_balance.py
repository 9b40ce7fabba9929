"""Accepting in turn: the rule on its own, the counts on the board, and two live workers that split a load
balancer's few connections, opened one after another, evenly (before, the first worker awake took them)."""

from __future__ import annotations

import ssl
from collections.abc import Iterator

import httpx
import pytest

from secure_orca import pki
from secure_orca.lab import launcher as lb
from secure_orca.lab import replicas as launch
from secure_orca.lab.sockets import children, connections, listening
from secure_orca.server.http.accept import defer
from secure_orca.workers.balance import BoardBalance
from secure_orca.workers.board import Board, Slot
from tests.replicas import run_replicas


@pytest.mark.parametrize(
    ("held", "siblings", "deferred"),
    [(0, [], False), (3, [], False), (0, [0], False), (1, [0], True), (1, [1], False), (2, [1, 5], True)],
)
def test_a_worker_leaves_the_next_connection_to_a_sibling_that_holds_fewer(
    held: int, siblings: list[int], deferred: bool
) -> None:
    assert defer(held, siblings) is deferred


def test_the_board_carries_each_live_workers_count_and_forgets_a_dead_one() -> None:
    board = Board(3)
    first, second = BoardBalance(board, 0), BoardBalance(board, 1)
    assert first.siblings() == []  # nobody else has written: no live sibling
    second.publish(4)
    first.publish(2)
    board.write(1, Slot(second.pid, 10, 0, 1))  # the counters beside it are untouched
    assert first.siblings() == [4] and second.siblings() == [2]
    assert board.read(1) == Slot(second.pid, 10, 0, 1)
    board.clear(1)  # the supervisor reaped worker 1
    assert first.siblings() == []


@pytest.fixture(scope="module")
def workers(dev_pki: pki.DevPKI) -> Iterator[launch.Replica]:
    argv = launch.serve_argv(dev_pki, lb.replica_flags(dev_pki, "front-proxy", "--workers", "2"))
    with run_replicas([argv]) as (replica,):
        yield replica


def test_connections_opened_one_after_another_alternate(workers: launch.Replica, dev_pki: pki.DevPKI) -> None:
    context = ssl.create_default_context(cafile=str(dev_pki.cert("ca")))
    context.load_cert_chain(dev_pki.cert("front_proxy_client"), dev_pki.key("front_proxy_client"))
    held: list[httpx.Client] = []
    try:
        for _ in range(8):
            client = httpx.Client(verify=context, http2=True, timeout=20)
            held.append(client)
            client.get(workers.url + "/healthz").raise_for_status()
        pids = listening(children(workers.process.popen.pid), workers.port)
        split = connections(pids, workers.port)
        assert sorted(split.values()) == [4, 4], split
    finally:
        for client in held:
            client.close()
