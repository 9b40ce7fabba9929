"""The gateway's own refusals on an ``errors=openai`` route are OpenAI error objects (issue 39, "errors are kube
Status JSON, where an OpenAI client expects OpenAI's error shape"): the 401 of authentication and the 408 of the
body deadline come before the proxy runs, and used to be kube's ``Status`` whatever the route said."""

from __future__ import annotations

import json
import ssl
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from secure_orca import pki
from secure_orca.lab import replicas as launch
from secure_orca.server.refusals import RouteDialects
from tests import proxied
from tests.replicas import run_replicas

from ..conftest import ClientCert, fp_flags
from .backends import recording_backend
from .h2client import H2Client


@pytest.fixture(scope="module")
def replica(dev_pki: pki.DevPKI) -> Iterator[launch.Replica]:
    with recording_backend() as (url, _):
        flags = [
            *fp_flags(dev_pki),
            "--anonymous-auth=false",
            "--request-timeout",
            "1s",
            "--proxy",
            f"/openai={url}/v1;errors=openai",
            "--proxy",
            f"/openai/kube={url}",
            "--proxy",
            f"/kube={url}",
        ]
        with run_replicas([launch.serve_argv(dev_pki, flags)]) as (replica,):
            yield replica


def openai_error(body: dict[str, Any], code: int) -> bool:
    """vLLM's ErrorResponse shape, as the openai client reads it (``body["error"]["message"]``)."""
    error = body.get("error")
    return isinstance(error, dict) and error.get("code") == code and isinstance(error.get("message"), str)


def test_an_unauthenticated_caller_gets_an_openai_401_on_an_openai_route(replica, dev_pki) -> None:
    with proxied.client(dev_pki.cert("ca"), "h2") as http:
        openai = http.post(f"{replica.url}/openai/v1/completions", json={"prompt": "x"})
        kube = http.get(f"{replica.url}/kube/v1/models")
        nested = http.get(f"{replica.url}/openai/kube/v1/models")  # the longest prefix decides, as in the proxy
        demo = http.get(f"{replica.url}/version")
    assert openai.status_code == 401 and openai_error(openai.json(), 401), openai.text
    assert openai.json()["error"]["type"] == "UnauthorizedError"
    for response in (kube, nested, demo):
        assert response.status_code == 401 and response.json()["kind"] == "Status", response.text


def test_a_body_that_never_comes_gets_an_openai_408_on_an_openai_route(
    replica, dev_pki, client_certs: dict[str, ClientCert]
) -> None:
    lb = client_certs["front-proxy"]
    client = H2Client.connect(replica, dev_pki.cert("ca"), (lb.cert, lb.key))
    try:
        user = [("x-remote-user", "envoy-lb"), ("content-type", "application/json")]
        openai = client.start("POST", "/openai/v1/completions", user)  # headers, then no body
        kube = client.start("POST", "/kube/v1/completions", user)
        assert client.pump_until_ended(openai, kube)
    finally:
        client.close()
    answered = client.streams[openai]
    assert answered.status == 408 and openai_error(json.loads(answered.body), 408), answered
    assert json.loads(client.streams[kube].body)["reason"] == "Timeout"


@pytest.mark.parametrize(
    ("path", "dialect"),
    [("/openai", "openai"), ("/openai/v1", "openai"), ("/openai/kube/x", "kube"), ("/openaix", "kube"), ("/", "kube")],
)
def test_route_dialects_follow_the_longest_prefix(path: str, dialect: str) -> None:
    dialects = RouteDialects([("/openai", "openai"), ("/openai/kube", "kube")])
    assert dialects.of(path) == dialect


def test_the_openai_client_reads_the_refusal(replica, dev_pki) -> None:
    """The refusal as the openai Python client parses it (a parser we did not write), when installed."""
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(
        base_url=f"{replica.url}/openai/v1",
        api_key="sk-anything",
        http_client=httpx.Client(verify=ssl.create_default_context(cafile=str(dev_pki.cert("ca")))),
        max_retries=0,
    )
    with pytest.raises(openai.AuthenticationError) as refused:
        client.completions.create(model="m", prompt="x", max_tokens=1)
    error = refused.value  # the openai client takes body["error"] apart: its type and code are ours
    assert error.status_code == 401 and error.type == "UnauthorizedError" and str(error.code) == "401", error.body
