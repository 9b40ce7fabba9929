"""The proxy's pure parts: route options, the upstream path, error dialects, forwarded headers, in-flight keys."""

from __future__ import annotations

import pytest

from secure_orca.authn.user import UserInfo
from secure_orca.errors import FlagError
from secure_orca.server.authentication import FRONT_PROXY_KEY, USER_KEY
from secure_orca.server.flags import parse_proxy
from secure_orca.server.proxy.forward import InFlight, forwarded_headers, limit_key, load_endpoint, upstream_target
from secure_orca.server.refusals import error_body


def test_route_options_are_parsed_and_checked() -> None:
    route = parse_proxy("/v1=http://h:8100/v1;first-byte-timeout=off;idle-timeout=2s;errors=openai;report=backend")
    assert (route.prefix, route.upstream) == ("/v1", "http://h:8100/v1")
    assert route.option("first-byte-timeout", "5m") == "off"
    assert route.option("errors", "kube") == "openai"
    assert route.option("authorization", "strip") == "strip"
    for bad in [
        "/v1=http://h/v1;errors=xml",
        "/v1=http://h/v1;colour=blue",
        "/v1=http://h/v1;idle-timeout=soon",
        "/v1=http://h/v1;errors=openai;errors=kube",
        "/v1=http://h/v1?x=1",
        "/v1=http://h/a/../b",
        "/v1=http://h/a%2Fb",
        "/v1=http://h/v1;utilization-metric=kv cache",
    ]:
        with pytest.raises(FlagError):
            parse_proxy(bad)


@pytest.mark.parametrize(
    ("base", "prefix", "path", "target"),
    [
        (b"", "/v1", b"/v1/models", b"/v1/models"),  # no URL path: the request's own
        (b"/v1", "/v1", b"/v1/models", b"/v1/models"),  # the same path: never doubled
        (b"/v1", "/v1", b"/v1", b"/v1"),
        (b"/v1", "/openai", b"/openai/chat/completions", b"/v1/chat/completions"),  # the prefix replaced
        (b"/base", "/apis/x/", b"/apis/x/y", b"/base/y"),
    ],
)
def test_the_upstream_path(base: bytes, prefix: str, path: bytes, target: bytes) -> None:
    assert upstream_target(base, prefix, path) == target


def test_errors_in_each_dialect() -> None:
    status = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "reason": "TooManyRequests"}
    assert error_body("kube", 429) == {**status, "code": 429}
    openai = error_body("openai", 504, "the backend did not answer in time")
    assert openai == {
        "error": {
            "message": "the backend did not answer in time",
            "type": "GatewayTimeoutError",
            "param": None,
            "code": 504,
        }
    }
    assert error_body("openai", 400)["error"]["type"] == "BadRequestError"  # type: ignore[index]


def scope(client: str = "10.0.0.7", extra: dict[str, object] | None = None) -> dict[str, object]:
    return {"client": (client, 5555), "extensions": {}, **(extra or {})}


def test_forwarded_headers_from_a_client_are_replaced() -> None:
    incoming = [(b"x-forwarded-for", b"1.2.3.4"), (b"forwarded", b"for=1.2.3.4"), (b"host", b"gw.example")]
    out = dict(forwarded_headers(scope(), incoming))
    assert out[b"x-forwarded-for"] == b"10.0.0.7"
    assert out[b"forwarded"] == b"for=10.0.0.7;proto=https;host=gw.example"
    assert out[b"x-forwarded-host"] == b"gw.example"


def test_forwarded_headers_from_the_front_proxy_are_extended() -> None:
    incoming = [(b"x-forwarded-for", b"1.2.3.4"), (b"forwarded", b"for=1.2.3.4")]
    out = dict(forwarded_headers(scope("::1", {FRONT_PROXY_KEY: True}), incoming))
    assert out[b"x-forwarded-for"] == b"1.2.3.4, ::1"
    assert out[b"forwarded"] == b'for=1.2.3.4, for="[::1]";proto=https'


def test_in_flight_keys_and_limits() -> None:
    assert limit_key(scope(extra={USER_KEY: UserInfo("envoy-lb")})) == ("user", "envoy-lb")
    anonymous = scope(extra={USER_KEY: UserInfo("system:anonymous")})
    assert limit_key(anonymous) == ("anonymous", "10.0.0.7")
    in_flight = InFlight(per_user=3, anonymous=1)
    assert in_flight.acquire(("anonymous", "a")) and not in_flight.acquire(("anonymous", "a"))
    assert all(in_flight.acquire(("user", "lb")) for _ in range(3)) and not in_flight.acquire(("user", "lb"))
    in_flight.release(("anonymous", "a"))
    assert in_flight.acquire(("anonymous", "a"))
    assert in_flight.counts == {("anonymous", "a"): 1, ("user", "lb"): 3}


@pytest.mark.parametrize(
    ("target", "gated"),
    [
        (b"/v1/loads", True),
        (b"/v1/loads?format=prometheus", True),
        (b"/v1/load%73", True),
        (b"/v1//loads/", True),
        (b"/V1/LOADS", True),
        (b"/v1/loads/x", True),
        (b"/metrics", True),
        (b"//metrics/", True),
        (b"/%6Detrics", True),
        (b"/metrics/foo", True),
        (b"/v1/loadsx", False),
        (b"/v1/models", False),
        (b"/metricsx", False),
        (b"/v2/metrics", False),
        (b"/?/metrics", False),
    ],
)
def test_the_backends_load_endpoints_are_recognised_in_every_spelling(target: bytes, gated: bool) -> None:
    assert load_endpoint(target) is gated


def test_a_polled_route_carries_the_backends_load_and_only_one_route_is_polled() -> None:
    from secure_orca.server.options.backend import _poll_problems

    assert _poll_problems(["/v1=http://h/v1;report=merged;load-poll=sglang-loads"]) == []
    assert _poll_problems(["/v1=http://h/v1;load-poll=vllm-metrics"]) == [
        "--proxy /v1: load-poll needs report=backend or report=merged"
    ]
    two = ["/a=http://h;report=backend;load-poll=vllm-metrics", "/b=http://i;report=merged;load-poll=sglang-loads"]
    assert _poll_problems(two) == [
        "--proxy: load-poll on more than one route (the out-of-band stream carries one backend's load)"
    ]
    with pytest.raises(FlagError):
        parse_proxy("/v1=http://h/v1;load-poll=triton")
