"""A backend's load endpoint, polled for the out-of-band stream and never passed to the unentitled (issue 39,
items 4 and 5), against the SGLang-like and vLLM-like stand-ins as separate processes.

- Many subscribers do not multiply polls: one poll per period for the whole server (``server.proxy.poller``).
- A failed poll is never served as fresh: once the backend is gone, its figure leaves the stream within
  ``--proxy-report-max-age`` and never comes back; the polls are counted by result.
- A load endpoint that answers too much, redirects, fails, holds a NaN or never answers fails every poll and
  puts nothing on the stream (the non-200 case failed with the status check removed).
- ``/v1/loads`` and ``/metrics`` under a route reach the backend only for a request whose report the policy
  granted; every other caller gets 403, in each spelling the backend reads as the same path. Before the fix
  the gateway passed them to anyone, unauthenticated as SGLang and vLLM serve them."""

from __future__ import annotations

import http.server
import itertools
import json
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack

import grpc
import pytest

from secure_orca import pki
from secure_orca.lab import replicas as launch
from secure_orca.orca.headers import OPTIN
from tests import oobcalls, plainhttp, proxied
from tests.live.standin_process import running
from tests.live.test_vllm_proxy import vllm_like
from tests.replicas import run_replicas

from ..conftest import ClientCert, fp_flags
from .backends import serving

pytestmark = pytest.mark.timeout(120)
PERIOD = 0.5  # the stream's floor, and so the poll period
POLLED = "report=merged;load-poll=sglang-loads;utilization-metric=kv_cache_usage_perc"


def polls(backend: str) -> int:
    return int(plainhttp.get(f"{backend}/stand-in/polls").json()["polls"])


def gateway(dev_pki: pki.DevPKI, route: str, *extra: str) -> list[str]:
    flags = fp_flags(
        dev_pki,
        "front-proxy,shared-secret",
        "--proxy",
        route,
        "--endpoint-load-metrics-oob-min-interval",
        f"{int(PERIOD * 1000)}ms",
        *extra,
    )
    return launch.serve_argv(dev_pki, flags)


def read_reports(call: grpc.Call, into: list[object], stop: threading.Event) -> None:
    try:
        for report in call:
            into.append(report)
            if stop.is_set():
                return
    except grpc.RpcError:
        return  # cancelled at the end


def test_many_subscribers_share_one_poll_per_period(dev_pki: pki.DevPKI, client_certs: dict[str, ClientCert]) -> None:
    """Eight streams on two connections for about 4 s: the backend is polled about once per period (at most the
    window's periods plus two, counted until the count is read), not once per stream and period (64 polls with a
    poll per stream's report, checked); every stream carries the backend's KV-cache use as
    application_utilization (the route's utilization-metric, applied out of band as in band)."""
    fp = client_certs["front-proxy"]
    with ExitStack() as stack:
        backend = stack.enter_context(running("sglang_like", "--busy", "0.3"))
        (replica,) = stack.enter_context(run_replicas([gateway(dev_pki, f"/v1={backend}/v1;{POLLED}")]))
        channels = [stack.enter_context(oobcalls.channel(replica, dev_pki, fp.cert, fp.key)) for _ in range(2)]
        before = polls(backend)
        started = time.monotonic()
        calls = [oobcalls.stream_core_metrics(ch)(oobcalls.ask(0.1), timeout=60) for ch in channels for _ in range(4)]
        received: list[list[object]] = [[] for _ in calls]
        stop = threading.Event()
        readers = [
            threading.Thread(target=read_reports, args=(c, r, stop)) for c, r in zip(calls, received, strict=True)
        ]
        for reader in readers:
            reader.start()
        time.sleep(4.0)
        stop.set()
        for call in calls:
            call.cancel()
        for reader in readers:
            reader.join(timeout=10)
        polled, window = polls(backend) - before, time.monotonic() - started  # the poller may go on a while
        at = plainhttp.get(f"{backend}/stand-in/polls").json()["at"]
    gaps = [round(b - a, 3) for a, b in itertools.pairwise(at)]
    print(f"\n{len(calls)} streams, {window:.1f} s at a {PERIOD} s period: {polled} polls, gaps {gaps}")
    assert all(len(reports) >= 3 for reports in received), [len(r) for r in received]
    assert 1 <= polled <= window / PERIOD + 2, (polled, window)
    last = [reports[-1] for reports in received]
    assert all(r.named_metrics["kv_cache_usage_perc"] == pytest.approx(0.3) for r in last), last  # type: ignore[attr-defined]
    assert all(r.application_utilization == pytest.approx(0.3) for r in last), last  # type: ignore[attr-defined]


def test_a_failed_poll_is_never_served_as_fresh(dev_pki: pki.DevPKI, client_certs: dict[str, ClientCert]) -> None:
    """The backend goes away: its figure leaves the stream within --proxy-report-max-age (1 s) and never comes
    back; the gateway's own report goes on (the route is ``merged``)."""
    fp = client_certs["front-proxy"]
    with ExitStack() as stack, ExitStack() as backend:
        sglang = backend.enter_context(running("sglang_like", "--busy", "0.4"))
        route, metrics_port = f"/v1={sglang}/v1;{POLLED}", launch.free_port()
        flags = ("--proxy-report-max-age", "1s", "--metrics-bind-address", f"127.0.0.1:{metrics_port}")
        (replica,) = stack.enter_context(run_replicas([gateway(dev_pki, route, *flags)]))
        channel = stack.enter_context(oobcalls.channel(replica, dev_pki, fp.cert, fp.key))
        reports = iter(oobcalls.stream_core_metrics(channel)(oobcalls.ask(PERIOD), timeout=60))
        carried = next(r for r in reports if "kv_cache_usage_perc" in r.named_metrics)
        backend.close()  # the stand-in process ends: every poll from now on fails
        gone_at = time.monotonic()
        after = [(time.monotonic() - gone_at, r) for r in (next(reports) for _ in range(10))]
        counted = {
            result: plainhttp.metric(f"http://127.0.0.1:{metrics_port}/metrics", POLLS, route="/v1", result=result)
            for result in ("ok", "failed")
        }
    carrying = ["kv_cache_usage_perc" in r.named_metrics for _, r in after]
    assert carried.named_metrics["kv_cache_usage_perc"] == pytest.approx(0.4)
    assert not carrying[-1] and carrying == sorted(carrying, reverse=True), carrying  # once stale, never again
    last_carrying = max((t for t, r in after if "kv_cache_usage_perc" in r.named_metrics), default=0.0)
    assert last_carrying <= 1.0 + PERIOD * 2 + 1.0, after  # max-age, one poll period, one report period
    assert all("in_flight_requests" in r.named_metrics for _, r in after)  # the gateway's own report goes on
    assert counted["ok"] >= 1 and counted["failed"] >= 2, counted  # secure_orca_proxy_load_polls_total


POLLS = "secure_orca_proxy_load_polls_total"


def _sample(text: str, result: str) -> float:
    return plainhttp.value(text, POLLS, route="/v1", result=result)


UNENTITLED_PATHS = [
    "/v1/loads",
    "/v1/loads?format=prometheus",
    "/v1/load%73",
    "/v1//loads",
    "/v1/loads/",
    "/v1/LOADS",
    "/metrics",
    "/metrics/",
    "/%6detrics",
    "//metrics",
    "/Metrics",
]


@pytest.fixture(scope="module")
def load_rig(dev_pki: pki.DevPKI) -> Iterator[tuple[launch.Replica, str, str]]:
    with ExitStack() as stack:
        sglang = stack.enter_context(running("sglang_like"))
        vllm = stack.enter_context(vllm_like())
        flags = fp_flags(
            dev_pki,
            "front-proxy,shared-secret",
            "--proxy",
            f"/v1={sglang}/v1;report=backend",
            "--proxy",
            f"/={vllm};report=backend",
        )
        (replica,) = stack.enter_context(run_replicas([launch.serve_argv(dev_pki, flags)]))
        yield replica, sglang, vllm


@pytest.mark.parametrize("protocol", ["h2", "http1.1"])
@pytest.mark.parametrize("path", UNENTITLED_PATHS)
def test_load_endpoints_refused_to_the_unentitled(
    load_rig: tuple[launch.Replica, str, str], dev_pki: pki.DevPKI, path: str, protocol: str
) -> None:
    replica, sglang, _ = load_rig
    before = polls(sglang)
    with proxied.client(dev_pki.cert("ca"), protocol) as http:
        plain = http.get(f"{replica.url}{path}")
        opted = http.get(f"{replica.url}{path}", headers={OPTIN: "TEXT"})  # asked, but not granted
    for response in (plain, opted):
        assert response.status_code == 403, (path, response.status_code, response.text[:200])
        assert response.json()["reason"] == "Forbidden"
        assert "loads" not in response.text and "kv_cache" not in response.text
    assert polls(sglang) == before  # never reached the backend


def test_load_endpoints_served_to_the_entitled(
    load_rig: tuple[launch.Replica, str, str], dev_pki: pki.DevPKI, client_certs: dict[str, ClientCert]
) -> None:
    """The front proxy's granted request reaches the backend's load endpoints (the policy's one decision)."""
    replica, sglang, _ = load_rig
    before = polls(sglang)
    with proxied.client(dev_pki.cert("ca"), "h2", client_certs["front-proxy"]) as http:
        loads = http.get(f"{replica.url}/v1/loads", headers={OPTIN: "TEXT"})
        metrics = http.get(f"{replica.url}/metrics", headers={OPTIN: "TEXT"})
    assert loads.status_code == 200 and loads.json()["loads"][0]["dp_rank"] == 0
    assert metrics.status_code == 200 and "vllm:kv_cache_usage_perc" in metrics.text
    assert polls(sglang) == before + 1


def test_other_paths_pass_unchanged(load_rig: tuple[launch.Replica, str, str], dev_pki: pki.DevPKI) -> None:
    """Only the load endpoints are gated: a path beside them still reaches the backend (its own 404 here)."""
    replica, _, _ = load_rig
    with proxied.client(dev_pki.cert("ca"), "h2") as http:
        models = http.get(f"{replica.url}/v1/models")
        beside = http.get(f"{replica.url}/v1/loadsx")
    assert models.status_code == 200 and models.json()["data"]
    assert beside.status_code == 404 and beside.json() == {
        "error": {"message": "/v1/loadsx not found", "type": "NotFoundError", "param": None, "code": 404}
    }


# --- hostile or broken load endpoints: each poll fails, nothing of theirs reaches the stream ----------------

GOOD_RANK = {"dp_rank": 0, "num_running_reqs": 1, "num_waiting_reqs": 0, "token_usage": 0.5}


def _answer(handler: http.server.BaseHTTPRequestHandler, status: int, body: bytes, *extra: tuple[str, str]) -> None:
    handler.send_response(status)
    for name, value in (("content-length", str(len(body))), *extra):
        handler.send_header(name, value)
    handler.end_headers()
    handler.wfile.write(body)


ANSWERS = {
    "oversized": lambda h: _answer(h, 200, json.dumps({"loads": [GOOD_RANK], "pad": "x" * 5_000_000}).encode()),
    "redirect": lambda h: _answer(h, 302, b"", ("location", "http://127.0.0.1:1/v1/loads")),
    "error status": lambda h: _answer(h, 500, json.dumps({"loads": [GOOD_RANK]}).encode()),
    "nan": lambda h: _answer(
        h, 200, b'{"loads": [{"num_running_reqs": 1, "num_waiting_reqs": 0, "token_usage": NaN}]}'
    ),
    "never answers": lambda h: time.sleep(20),
}


@pytest.mark.parametrize("answer", sorted(ANSWERS))
def test_a_hostile_load_endpoint_never_reaches_the_stream(
    dev_pki: pki.DevPKI, client_certs: dict[str, ClientCert], answer: str
) -> None:
    """A backend whose /v1/loads answers too much, redirects, fails, holds a NaN or never answers: every poll fails
    (counted), the stream goes on with the gateway's own report, never a backend figure."""

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            ANSWERS[answer](self)

        def log_message(self, *args: object) -> None:
            pass

    fp = client_certs["front-proxy"]
    with ExitStack() as stack:
        backend = stack.enter_context(serving(Handler))
        route, metrics_port = f"/v1={backend}/v1;{POLLED}", launch.free_port()
        flags = ("--metrics-bind-address", f"127.0.0.1:{metrics_port}")
        (replica,) = stack.enter_context(run_replicas([gateway(dev_pki, route, *flags)]))
        channel = stack.enter_context(oobcalls.channel(replica, dev_pki, fp.cert, fp.key))
        reports = iter(oobcalls.stream_core_metrics(channel)(oobcalls.ask(PERIOD), timeout=60))
        seen = [next(reports) for _ in range(6)]  # 3 s at the floor: at least two polls, each bounded by 1 s
        text = plainhttp.get(f"http://127.0.0.1:{metrics_port}/metrics").text
    assert not [r for r in seen if "kv_cache_usage_perc" in r.named_metrics], seen
    assert all("in_flight_requests" in r.named_metrics for r in seen)
    assert _sample(text, "failed") >= 2 and _sample(text, "ok") == 0, text
