"""The ``--proxy`` speaks HTTP/1.1 correctly to an upstream we did not write (Python's
``http.server``, keep-alive). A body-less request goes up with no body and no ``Transfer-Encoding`` (it used
to go up chunked with an empty body: the upstream read the trailing ``0`` as a new request, answered 400,
and the next requests on that connection got 502), and a proxied response carries one ``date`` and one
``server`` (it carried the upstream's and hypercorn's)."""

from __future__ import annotations

import ssl
from collections.abc import Iterator

import httpx
import pytest

from secure_orca import pki
from secure_orca.lab import replicas as launch
from tests.replicas import run_replicas

from ..conftest import fp_flags
from .backends import Recorded, stdlib_backend

PROTOCOLS = ["h2", "http1.1"]
REQUESTS = 6  # sequential: every one after the first reuses the pooled upstream connection


@pytest.fixture(scope="module")
def rig(dev_pki: pki.DevPKI) -> Iterator[tuple[launch.Replica, Recorded]]:
    with stdlib_backend() as (url, recorded):
        flags = [*fp_flags(dev_pki), "--proxy", f"/apis/up={url}"]
        with run_replicas([launch.serve_argv(dev_pki, flags)]) as (replica,):
            yield replica, recorded


def client(dev_pki: pki.DevPKI, protocol: str) -> httpx.Client:
    context = ssl.create_default_context(cafile=str(dev_pki.cert("ca")))
    return httpx.Client(verify=context, http2=protocol == "h2", http1=protocol != "h2", timeout=10)


@pytest.mark.parametrize("method", ["GET", "HEAD"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_bodyless_requests_go_upstream_without_a_body(rig, dev_pki, protocol, method) -> None:
    replica, recorded = rig
    before = len(recorded.requests)
    with client(dev_pki, protocol) as http:
        statuses = [http.request(method, f"{replica.url}/apis/up/{i}").status_code for i in range(REQUESTS)]
    assert statuses == [200] * REQUESTS
    assert recorded.requests[before:] == [(method, f"/apis/up/{i}") for i in range(REQUESTS)]
    for headers in recorded.headers[before:]:
        names = {name.lower() for name, _ in headers}
        assert not names & {"transfer-encoding", "content-length"}, headers


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_proxied_response_has_one_date_and_one_server(rig, dev_pki, protocol) -> None:
    replica, _ = rig
    with client(dev_pki, protocol) as http:
        response = http.get(f"{replica.url}/apis/up/x")
    assert (response.status_code, response.text) == (200, "upstream")
    assert len(response.headers.get_list("date")) == 1, response.headers
    assert len(response.headers.get_list("server")) == 1, response.headers
