"""The gateway in front of a vLLM-like server (``tests/live/vllm_like.py``, its own process): an entitled load
reader gets the backend's KV-cache figure, nobody else gets a report and the backend sees no dialect header from
them; 200 concurrent streaming completions from the load balancer's one address all complete; a cancel reaches
the backend over both protocols. Measured figures are printed (``-s``); nothing asserts on wall time."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from secure_orca import pki
from secure_orca.h2client import ReadDeadline
from secure_orca.lab import replicas as launch
from secure_orca.orca.headers import OPTIN
from secure_orca.orca.report import parse_text
from tests import plainhttp, proxied
from tests.conftest import ClientCert, fp_flags
from tests.hostile.h2client import H2Client
from tests.live.standin_process import running
from tests.replicas import run_replicas

LB = [("x-remote-user", "envoy-lb")]


def vllm_like(*args: str) -> contextlib.AbstractContextManager[str]:
    """The stand-in on a free loopback port, as a separate process: its URL."""
    return running("vllm_like", *args)


def generations(url: str) -> list[dict[str, Any]]:
    return list(plainhttp.get(f"{url}/stand-in/generations").json())


@dataclass
class Rig:
    replica: launch.Replica
    backend: str
    dev_pki: pki.DevPKI
    lb: ClientCert

    def http(self, protocol: str = "h2", entitled: bool = True) -> httpx.Client:
        return proxied.client(self.dev_pki.cert("ca"), protocol, self.lb if entitled else None)

    def h2(self) -> H2Client:
        return H2Client.connect(self.replica, self.dev_pki.cert("ca"), (self.lb.cert, self.lb.key))


@pytest.fixture(scope="module")
def rig(dev_pki: pki.DevPKI, client_certs: dict[str, ClientCert]) -> Iterator[Rig]:
    with vllm_like("--token-interval", "0.05") as backend:
        route = f"/v1={backend}/v1;report=backend;errors=openai;first-byte-timeout=10m"
        flags = [*fp_flags(dev_pki), "--proxy", route, "--http2-max-streams-per-connection", str(ONE_CONNECTION)]
        with run_replicas([launch.serve_argv(dev_pki, flags)]) as (replica,):
            yield Rig(replica, backend, dev_pki, client_certs["front-proxy"])


COMPLETION = {"model": "stand-in/vllm-like", "prompt": "hello", "max_tokens": 3}


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_an_entitled_reader_gets_the_backends_kv_cache_figure(rig: Rig, path: str) -> None:
    with rig.http() as http:
        response = http.post(f"{rig.replica.url}{path}", json=COMPLETION, headers={OPTIN: "TEXT", **dict(LB)})
    assert response.status_code == 200
    report = parse_text(response.headers["endpoint-load-metrics"])
    assert set(report.named_metrics) == {"kv_cache_usage_perc", "num_requests_waiting"}
    assert generations(rig.backend)[-1]["dialect"] == [["endpoint-load-metrics-format", "text"]]


@pytest.mark.parametrize("protocol", ["h2", "http1.1"])
def test_nobody_else_gets_a_report_and_the_backend_sees_no_dialect(rig: Rig, protocol: str) -> None:
    asks = {"endpoint-load-metrics-format": "text", "Endpoint-Load-Metrics-Format": "json", OPTIN: "TEXT"}
    with rig.http(protocol, entitled=False) as http:
        response = http.post(f"{rig.replica.url}/v1/completions", json=COMPLETION, headers=asks)
    assert response.status_code == 200 and response.json()["choices"][0]["text"] == " t0 t1 t2"
    assert "endpoint-load-metrics" not in response.headers
    assert generations(rig.backend)[-1]["dialect"] == []


def test_the_stand_in_alone_answers_anyone(rig: Rig) -> None:
    """The leak the gateway closes: directly, any caller gets the backend's report."""
    response = plainhttp.post(
        f"{rig.backend}/v1/completions", json=COMPLETION, headers={"endpoint-load-metrics-format": "text"}
    )
    assert response.headers["endpoint-load-metrics"].startswith("TEXT named_metrics.kv_cache_usage_perc=")


def test_streams_carry_no_load_header_and_arrive_as_produced(rig: Rig) -> None:
    body = {**COMPLETION, "max_tokens": 5, "stream": True}
    with (
        rig.http() as http,
        http.stream(
            "POST", f"{rig.replica.url}/v1/completions", json=body, headers={OPTIN: "TEXT", **dict(LB)}
        ) as response,
    ):
        events = [line for line in response.iter_lines() if line.startswith("data: ")]
        headers = response.headers
    assert events[-1] == "data: [DONE]" and len(events) == 6
    assert json.loads(events[0][6:])["choices"][0]["text"] == " t0"
    assert "endpoint-load-metrics" not in headers  # vLLM reports on non-streaming responses only


STREAMS = 200


def test_200_concurrent_streams_from_one_load_balancer_all_complete(rig: Rig) -> None:
    body = json.dumps({**COMPLETION, "max_tokens": 10, "stream": True}).encode()
    clients = [rig.h2() for _ in range(2)]  # 100 concurrent streams per connection (hypercorn's bound)
    started = time.monotonic()
    try:
        streams: list[tuple[H2Client, int]] = []
        for client in clients:
            for _ in range(STREAMS // 2):
                stream = client.start("POST", "/v1/completions", [*LB, ("content-type", "application/json")])
                client.data(stream, body)
                streams.append((client, stream))
        for client in clients:
            assert client.pump_until_ended(*(s for c, s in streams if c is client))
    finally:
        for client in clients:
            client.close()
    elapsed = time.monotonic() - started
    statuses = [c.streams[s].status for c, s in streams]
    assert statuses == [200] * STREAMS, {status: statuses.count(status) for status in set(statuses)}
    assert all(c.streams[s].body.endswith(b"data: [DONE]\n\n") for c, s in streams)
    print(f"{STREAMS} streams of 10 tokens 50 ms apart, one load balancer: all complete in {elapsed:.2f} s")


ONE_CONNECTION = 256  # SETTINGS_MAX_CONCURRENT_STREAMS: above the 200 of the target


def test_200_concurrent_streams_on_one_connection_all_complete(rig: Rig) -> None:
    """One HTTP/2 connection, as one Envoy cluster connection carries them: every request's headers first, its
    body only after every request waits for one (a load balancer forwards headers before the client's upload
    ends). Failed before: 408 TooManyPendingBodies beyond 32 waiting bodies per connection (and 100 streams)."""
    body = json.dumps({**COMPLETION, "max_tokens": 10, "stream": True}).encode()
    client = rig.h2()
    started = time.monotonic()
    try:
        headers = [*LB, ("content-type", "application/json")]
        streams = [client.start("POST", "/v1/completions", headers) for _ in range(STREAMS)]
        with contextlib.suppress(ReadDeadline):
            client.read_until(lambda: False, 0.5)  # every request now waits for its body
        for stream in streams:
            client.data(stream, body)
        assert client.pump_until_ended(*streams)
    finally:
        client.close()
    elapsed = time.monotonic() - started
    statuses = [client.streams[s].status for s in streams]
    assert statuses == [200] * STREAMS, {status: statuses.count(status) for status in set(statuses)}
    assert all(client.streams[s].body.endswith(b"data: [DONE]\n\n") for s in streams)
    print(f"{STREAMS} streams on one connection, bodies after their headers: all complete in {elapsed:.2f} s")


def test_h2_reset_reaches_the_backend(rig: Rig) -> None:
    body = json.dumps({**COMPLETION, "max_tokens": 100, "stream": True}).encode()
    client = rig.h2()
    try:
        stream = client.start("POST", "/v1/completions", [*LB, ("content-type", "application/json")])
        client.data(stream, body)
        assert client.pump_until(lambda: client.streams[stream].body.count(b"data:") >= 5)
        client.reset(stream)
        cancelled_at = time.monotonic()
    finally:
        client.close()
    generation = wait_ended(rig.backend)
    assert generation["cancelled"] and generation["tokens"] < 100, generation
    print(f"h2 reset reached the backend after {1000 * (generation['ended_at'] - cancelled_at):.0f} ms")


def test_http1_close_reaches_the_backend(rig: Rig) -> None:
    body = {**COMPLETION, "max_tokens": 100, "stream": True}
    with rig.http("http1.1") as http:
        with http.stream("POST", f"{rig.replica.url}/v1/completions", json=body, headers=LB) as response:
            for line in response.iter_lines():
                if line.startswith("data: ") and " t4" in line:
                    break
        http.close()
        cancelled_at = time.monotonic()
    generation = wait_ended(rig.backend)
    assert generation["cancelled"] and generation["tokens"] < 100, generation
    print(f"HTTP/1.1 close reached the backend after {1000 * (generation['ended_at'] - cancelled_at):.0f} ms")


def wait_ended(backend: str, seconds: float = 10.0) -> dict[str, Any]:
    """The last generation, once it ended (bounded wait)."""
    deadline = time.monotonic() + seconds
    while True:
        last = generations(backend)[-1]
        if last["ended_at"] or time.monotonic() > deadline:
            return last
        time.sleep(0.01)
