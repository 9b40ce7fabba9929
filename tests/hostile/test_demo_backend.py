"""The demo backend is not a weapon. /work exists only where the operator turned it on, its
parameters are bounded, it burns CPU off the event loop, and no client can make it report errors."""

from __future__ import annotations

import asyncio
import json
import ssl
import threading

import httpx
import pytest

from secure_orca import pki
from secure_orca.lab import replicas as launch
from secure_orca.server import demo
from secure_orca.server.asgi import Message, Receive, Scope, Send
from secure_orca.server.demo import MAX_CPU_MS, work_ms
from tests.replicas import run_replicas

from ..conftest import fp_flags


def client(dev_pki: pki.DevPKI, timeout: float = 10.0) -> httpx.Client:
    context = ssl.create_default_context(cafile=str(dev_pki.cert("ca")))
    return httpx.Client(verify=context, http2=True, timeout=httpx.Timeout(timeout))


def test_work_is_off_unless_the_operator_turns_it_on(dev_pki: pki.DevPKI) -> None:
    argv = launch.serve_argv(dev_pki, fp_flags(dev_pki), demo_work=False)
    with run_replicas([argv]) as (replica,), client(dev_pki) as http:
        assert http.get(replica.url + "/work?cpu_ms=100").status_code == 404
        assert http.get(replica.url + "/healthz").status_code == 200


@pytest.fixture(scope="module")
def working(dev_pki: pki.DevPKI):
    with run_replicas([launch.serve_argv(dev_pki, fp_flags(dev_pki), demo_work=True)]) as (replica,):
        yield replica


@pytest.mark.parametrize(
    "query",
    ["status=503", "cpu_ms=1&status=503", "cpu_ms=-1", f"cpu_ms={MAX_CPU_MS + 1}", "cpu_ms=nan", "cpu_ms=1&cpu_ms=2"],
)
def test_work_parameters_are_bounded(working, dev_pki, query) -> None:
    with client(dev_pki) as http:
        assert http.get(f"{working.url}/work?{query}").status_code == 400


def test_no_client_can_make_work_count_errors(working, dev_pki) -> None:
    """``eps`` and ``rps_fractional`` count 429 and 5xx responses: /work must not produce them on request."""
    with client(dev_pki) as http:
        statuses = {http.get(f"{working.url}/work?cpu_ms=0&status={code}").status_code for code in (429, 500, 503)}
    assert 429 not in statuses and not any(code >= 500 for code in statuses)


def test_work_burns_cpu_off_the_event_loop(working, dev_pki) -> None:
    """Six requests of MAX_CPU_MS each: on the loop, each would hold it for a second and at most one /healthz
    could be answered between two burns. Counted, not timed: /healthz is answered 60 times before they end.
    (Burners that never offered the GIL let 7 through in the same time.)"""
    results: list[int] = []

    def burn() -> None:
        with client(dev_pki, timeout=60) as http:
            results.append(http.get(f"{working.url}/work?cpu_ms={MAX_CPU_MS}").status_code)

    burners = [threading.Thread(target=burn) for _ in range(6)]
    checks, enough = 0, 10 * len(burners)  # a connection's GOAWAY comes after 1000 requests
    with client(dev_pki, timeout=60) as http:
        http.get(working.url + "/healthz")  # connected and warmed before counting
        for thread in burners:
            thread.start()
        try:
            while checks < enough and any(thread.is_alive() for thread in burners):  # while the burns go on
                assert http.get(working.url + "/healthz").status_code == 200
                checks += 1
        finally:
            for thread in burners:
                thread.join(60)
    assert checks == enough, checks
    assert set(results) <= {200, 429} and 200 in results


def test_the_burn_runs_in_a_worker_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """In process, no clock: the burn is called where no event loop runs, and the loop answers meanwhile."""
    where: list[str] = []

    def burn_cpu(milliseconds: float) -> float:
        try:
            asyncio.get_running_loop()
            where.append("event loop")
        except RuntimeError:
            where.append("worker thread")
        return milliseconds / 1000

    async def inner(scope: Scope, receive: Receive, send: Send) -> None:
        raise AssertionError("/work must not reach the inner app")

    async def call() -> list[Message]:
        sent: list[Message] = []

        async def send(message: Message) -> None:
            sent.append(message)

        async def receive() -> Message:
            return {"type": "http.request", "body": b"", "more_body": False}

        scope = {"type": "http", "path": "/work", "query_string": b"cpu_ms=5", "headers": []}
        await demo.with_work(inner)(scope, receive, send)
        return sent

    monkeypatch.setattr(demo, "burn_cpu", burn_cpu)
    sent = asyncio.run(call())
    assert where == ["worker thread"]
    assert sent[0]["status"] == 200 and json.loads(sent[-1]["body"]) == {"cpu_ms": 5.0}


@pytest.mark.parametrize(
    ("query", "expected"),
    [(b"", 10.0), (b"cpu_ms=5", 5.0), (b"cpu_ms=1000", 1000.0), (b"cpu_ms=1001", None), (b"x=1", None)],
)
def test_work_ms_is_pure_and_exact(query: bytes, expected: float | None) -> None:
    assert work_ms(query) == expected
