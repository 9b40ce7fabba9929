"""A client of the load balancer must not reach StreamCoreMetrics through it: Envoy forwards requests upstream with
its own client certificate, which is exactly what entitles the stream, so a forwarded call would stream the
replica's load to anyone who can reach Envoy (found by `secure-orca evaluate`'s probe through Envoy: 14 leaking
vectors for the load-reader option). Envoy answers the service's path, and any gRPC call, itself with 404
(UNIMPLEMENTED to a gRPC client)."""

from __future__ import annotations

import ssl

import httpx
import pytest

from secure_orca import pki
from secure_orca.envoy import bootstrap as envoy
from secure_orca.envoy import files
from secure_orca.lab import launcher as lb
from secure_orca.lab import replicas as launch
from secure_orca.orca import oob
from tests.replicas import deployment

CALLS = [  # (path, content type) a client of the load balancer might try
    (oob.PATH, "application/grpc"),
    (oob.PATH, "application/json"),
    ("/xds.service.orca.v3.OpenRcaService/StreamCoreMetric%73", "application/grpc"),
    ("/xds%2Eservice.orca.v3.OpenRcaService/StreamCoreMetrics", "application/GRPC+proto"),
]


@pytest.mark.parametrize("option", envoy.OPTIONS)
def test_every_route_to_the_replicas_comes_after_the_refusal_of_the_stream(dev_pki: pki.DevPKI, option: str) -> None:
    upstreams = [envoy.Upstream("127.0.0.1", 6443, None)]
    routes = envoy.routes(files.dev_config(dev_pki, upstreams, option=option))
    refusals = [r for r in routes if "direct_response" in r]
    assert [r["direct_response"]["status"] for r in refusals] == [404, 404]
    assert routes[: len(refusals)] == refusals  # before any route to the cluster
    assert refusals[0]["match"] == {"prefix": oob.PATH.rsplit("/", 1)[0] + "/"}
    grpc = refusals[1]["match"]["headers"][0]
    assert grpc == {"name": "content-type", "string_match": {"prefix": "application/grpc", "ignore_case": True}}


def test_no_client_of_envoy_gets_the_stream(dev_pki: pki.DevPKI) -> None:
    """Live: Envoy (load-reader, in band) in front of a replica that serves the stream to Envoy's certificate."""
    argv = launch.serve_argv(dev_pki, lb.replica_flags(dev_pki, "load-reader"))
    context = ssl.create_default_context(cafile=str(dev_pki.cert("ca")))
    with (
        deployment(dev_pki, [argv], option="load-reader") as deployed,
        httpx.Client(http2=True, verify=context, trust_env=False, timeout=10.0) as client,
    ):
        for path, content_type in CALLS:
            headers = {"content-type": content_type, "te": "trailers"}
            request = client.build_request(
                "POST", deployed.envoy.url + path, headers=headers, content=oob.request_frame(1.0)
            )
            request.url = request.url.copy_with(raw_path=path.encode())
            response = client.send(request, stream=True)
            try:
                first = next(response.iter_raw(), b"")
            finally:
                response.close()
            # Envoy turns its local 404 into gRPC's form for a gRPC request: 200, grpc-status 12 (UNIMPLEMENTED)
            answer = (response.status_code, response.headers.get("grpc-status"))
            assert answer in ((404, None), (200, "12")) and oob.parse_report(first) is None, (path, content_type)
