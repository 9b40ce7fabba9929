"""Issue 14 item 8: the demo backend is not a weapon. /work exists only where the operator turned it on, its
parameters are bounded, it burns CPU off the event loop, and no client can make it report errors."""

from __future__ import annotations

import ssl
import threading

import httpx
import pytest

from secure_orca import pki
from secure_orca.lab import replicas as launch
from secure_orca.server.demo import MAX_CPU_MS, work_ms

from ..conftest import fp_flags


def client(dev_pki: pki.DevPKI, timeout: float = 10.0) -> httpx.Client:
    context = ssl.create_default_context(cafile=str(dev_pki.cert("ca")))
    return httpx.Client(verify=context, http2=True, timeout=httpx.Timeout(timeout))


def test_work_is_off_unless_the_operator_turns_it_on(dev_pki: pki.DevPKI) -> None:
    argv = launch.serve_argv(dev_pki, fp_flags(dev_pki), demo_work=False)
    with launch.replicas([argv]) as (replica,), client(dev_pki) as http:
        assert http.get(replica.url + "/work?cpu_ms=100").status_code == 404
        assert http.get(replica.url + "/healthz").status_code == 200


@pytest.fixture(scope="module")
def working(dev_pki: pki.DevPKI):  # type: ignore[no-untyped-def]
    with launch.replicas([launch.serve_argv(dev_pki, fp_flags(dev_pki), demo_work=True)]) as (replica,):
        yield replica


@pytest.mark.parametrize(
    "query",
    ["status=503", "cpu_ms=1&status=503", "cpu_ms=-1", f"cpu_ms={MAX_CPU_MS + 1}", "cpu_ms=nan", "cpu_ms=1&cpu_ms=2"],
)
def test_work_parameters_are_bounded(working, dev_pki, query) -> None:  # type: ignore[no-untyped-def]
    with client(dev_pki) as http:
        assert http.get(f"{working.url}/work?{query}").status_code == 400


def test_no_client_can_make_work_count_errors(working, dev_pki) -> None:  # type: ignore[no-untyped-def]
    """``eps`` and ``rps_fractional`` count 429 and 5xx responses: /work must not produce them on request."""
    with client(dev_pki) as http:
        statuses = {http.get(f"{working.url}/work?cpu_ms=0&status={code}").status_code for code in (429, 500, 503)}
    assert 429 not in statuses and not any(code >= 500 for code in statuses)


def test_work_burns_cpu_off_the_event_loop(working, dev_pki) -> None:  # type: ignore[no-untyped-def]
    """Six requests of MAX_CPU_MS each on the loop would hold it for seconds; /healthz must still answer
    within a bound well under one of them."""
    results: list[int] = []

    def burn() -> None:
        with client(dev_pki, timeout=60) as http:
            results.append(http.get(f"{working.url}/work?cpu_ms={MAX_CPU_MS}").status_code)

    burners = [threading.Thread(target=burn) for _ in range(6)]
    for thread in burners:
        thread.start()
    checks = 0
    try:
        with client(dev_pki) as http:
            http.get(working.url + "/healthz")  # connected and warmed before the bound applies
            bounded = httpx.Timeout(MAX_CPU_MS / 1000 * 0.8)
            while any(thread.is_alive() for thread in burners):  # for as long as the burns go on
                assert http.get(working.url + "/healthz", timeout=bounded).status_code == 200
                checks += 1
    finally:
        for thread in burners:
            thread.join(60)
    assert checks >= 1
    assert set(results) <= {200, 429} and 200 in results


@pytest.mark.parametrize(
    ("query", "expected"),
    [(b"", 10.0), (b"cpu_ms=5", 5.0), (b"cpu_ms=1000", 1000.0), (b"cpu_ms=1001", None), (b"x=1", None)],
)
def test_work_ms_is_pure_and_exact(query: bytes, expected: float | None) -> None:
    assert work_ms(query) == expected
