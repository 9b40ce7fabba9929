"""Load and faults on loopback, bounded in count and time: mixed front-proxy and bypass clients under
concurrency, clients that vanish mid-stream, slow readers, proxied backends that hang or reset, SIGTERM with
requests in flight. A soak (h2load's 24,000 requests, about 15 s, run with the rest) checks that memory stays flat."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import ssl
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import h2.settings
import httpx
import pytest

from secure_orca import h2client, pki
from secure_orca.lab import loadgen
from secure_orca.lab import replicas as launch
from secure_orca.lab.procfs import rss_kib
from tests.conftest import ClientCert, fp_flags
from tests.replicas import run_replicas

OPT_IN = "endpoint-load-metrics-request"


def context(dev_pki: pki.DevPKI, cert: ClientCert | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(dev_pki.cert("ca")))
    if cert is not None:
        ctx.load_cert_chain(cert.cert, cert.key)
    return ctx


async def mixed_load(url: str, dev_pki: pki.DevPKI, fp: ClientCert, clients: int, requests: int) -> Counter[str]:
    """``clients`` front-proxy and ``clients`` bypass HTTP/2 clients, each with 10 streams in flight; every
    request opts in. Returns outcome counts: a bypass response with a report is a leak."""
    outcomes: Counter[str] = Counter()

    async def run_client(proxy: bool) -> None:
        async with httpx.AsyncClient(verify=context(dev_pki, fp if proxy else None), http2=True, timeout=30) as http:
            gate = asyncio.Semaphore(10)

            async def one(i: int) -> None:
                async with gate:
                    response = await http.get(f"{url}/version?i={i}", headers={OPT_IN: "TEXT"})
                has_report = "endpoint-load-metrics" in response.headers
                if response.status_code != 200:
                    outcomes["error"] += 1
                elif proxy:
                    outcomes["proxy-with-report" if has_report else "proxy-missing-report"] += 1
                else:
                    outcomes["LEAK" if has_report else "bypass-clean"] += 1

            await asyncio.gather(*(one(i) for i in range(requests)))

    await asyncio.gather(*(run_client(proxy) for proxy in (True, False) for _ in range(clients)))
    return outcomes


def test_mixed_concurrent_clients_no_leak_no_misattribution(secured_replica, dev_pki, client_certs) -> None:
    outcomes = asyncio.run(mixed_load(secured_replica.url, dev_pki, client_certs["front-proxy"], 8, 60))
    assert outcomes == Counter({"proxy-with-report": 480, "bypass-clean": 480})


def soak_round(url: str, fp: ClientCert, workdir: Path) -> None:
    """4,000 requests that opt in, from h2load (C: the server's work, not the client's, fills the round): 4
    front-proxy and 4 bypass connections at once, 10 streams each. Every request must succeed."""
    load = loadgen.Load(clients=4, streams=10, requests=2000)
    who = [loadgen.Identity("front-proxy", fp.cert, fp.key, "TEXT"), loadgen.Identity("bypass", optin="TEXT")]
    for identity in who:
        (workdir / identity.name).mkdir(exist_ok=True)
    with ThreadPoolExecutor(len(who)) as pool:
        list(pool.map(lambda i: loadgen.run_h2load(f"{url}/version", load, i, workdir / i.name), who))


@pytest.mark.timeout(300)  # a hang guard only, as the instruction guard's (which once went past 120 s under load)
@pytest.mark.starts_first  # about 15 s of the server's CPU: started at once on a worker of its own
def test_soak_memory_is_stable(dev_pki, client_certs, tmp_path: Path) -> None:
    """20,000 mixed requests after a warm-up of 4,000, then a round that checks every response's report."""
    fp = client_certs["front-proxy"]
    with run_replicas([launch.serve_argv(dev_pki, fp_flags(dev_pki))]) as (replica,):
        pid = replica.process.popen.pid
        soak_round(replica.url, fp, tmp_path)  # warm-up
        before = rss_kib(pid)
        for _ in range(5):
            soak_round(replica.url, fp, tmp_path)
        growth = rss_kib(pid) - before
        outcomes = asyncio.run(mixed_load(replica.url, dev_pki, fp, 4, 100))
    assert outcomes == Counter({"proxy-with-report": 400, "bypass-clean": 400})
    assert growth < 20 * 1024, f"RSS grew by {growth} KiB over 20,000 requests"


def raw_h2_request(replica: launch.Replica, dev_pki: pki.DevPKI, path: str, window: int = 65535) -> ssl.SSLSocket:
    """Open an HTTP/2 connection, send one request, and return the socket without reading the response."""
    ctx = context(dev_pki)
    ctx.set_alpn_protocols(["h2"])
    sock = h2client.connect(replica.host, replica.port, ctx)
    loop = h2client.H2Loop(sock)
    loop.open({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: window})
    loop.request([(":method", "GET"), (":path", path), (":scheme", "https"), (":authority", "x"), (OPT_IN, "TEXT")])
    return sock


def healthy(replica: launch.Replica, dev_pki: pki.DevPKI) -> bool:
    with httpx.Client(verify=context(dev_pki), http2=True, timeout=10) as http:
        return http.get(replica.url + "/healthz").status_code == 200


def test_clients_vanishing_mid_stream_and_slow_readers(dev_pki) -> None:
    with run_replicas([launch.serve_argv(dev_pki, fp_flags(dev_pki))]) as (replica,):
        for _ in range(20):  # the client closes while the server is still working on its request
            raw_h2_request(replica, dev_pki, "/work?cpu_ms=20").close()
        stalled = [raw_h2_request(replica, dev_pki, "/version", window=0) for _ in range(20)]  # never read
        assert healthy(replica, dev_pki)
        for sock in stalled:
            sock.close()
        assert healthy(replica, dev_pki)
        assert replica.process.popen.poll() is None


@pytest.fixture()
def bad_backend() -> Iterator[tuple[str, str]]:
    """A backend on two ports: one accepts and never answers, one resets every connection."""
    hang = socket.create_server(("127.0.0.1", 0))
    reset = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()
    held: list[socket.socket] = []

    def serve(server: socket.socket, action: str) -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            if action == "hang":
                held.append(conn)
            else:
                conn.recv(4096)
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                conn.close()  # RST

    threads = [threading.Thread(target=serve, args=(s, a), daemon=True) for s, a in ((hang, "hang"), (reset, "rst"))]
    for thread in threads:
        thread.start()
    try:
        yield f"http://127.0.0.1:{hang.getsockname()[1]}", f"http://127.0.0.1:{reset.getsockname()[1]}"
    finally:
        stop.set()
        for thread in threads:
            thread.join()
        for sock in [hang, reset, *held]:
            sock.close()


def test_hanging_and_resetting_backends(dev_pki, client_certs, bad_backend) -> None:
    hang, reset = bad_backend
    flags = [
        *fp_flags(dev_pki),
        "--proxy",
        f"/hang={hang}",
        "--proxy",
        f"/reset={reset}",
        "--proxy-first-byte-timeout",
        "500ms",
    ]
    with run_replicas([launch.serve_argv(dev_pki, flags)]) as (replica,):
        fp = client_certs["front-proxy"]
        with httpx.Client(verify=context(dev_pki, fp), http2=True, timeout=10) as http:
            hung = http.get(replica.url + "/hang/x", headers={OPT_IN: "TEXT"})
            broken = http.get(replica.url + "/reset/x", headers={OPT_IN: "TEXT"})
            fine = http.get(replica.url + "/version", headers={OPT_IN: "TEXT"})
    assert (hung.status_code, broken.status_code, fine.status_code) == (504, 502, 200)
    # The server's own report still rides on its own error responses to the front proxy: it is about the
    # server, and the load balancer needs it most when backends fail.
    assert all("endpoint-load-metrics" in r.headers for r in (hung, broken, fine))


def test_sigterm_finishes_in_flight_requests(dev_pki) -> None:
    with run_replicas([launch.serve_argv(dev_pki, fp_flags(dev_pki))]) as (replica,):
        result: dict[str, int] = {}

        def slow_request() -> None:
            with httpx.Client(verify=context(dev_pki), http2=True, timeout=30) as http:
                result["status"] = http.get(replica.url + "/work?cpu_ms=600").status_code

        worker = threading.Thread(target=slow_request)
        worker.start()
        time.sleep(0.3)  # the request is being served
        os.kill(replica.process.popen.pid, signal.SIGTERM)
        worker.join(timeout=30)
        code = replica.process.popen.wait(timeout=30)
    assert result == {"status": 200}
    assert code == 0
    with pytest.raises(OSError):
        socket.create_connection((replica.host, replica.port), timeout=2)
