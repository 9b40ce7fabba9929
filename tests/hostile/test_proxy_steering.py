"""A request reaches only its route's upstream, under its prefix, whatever its raw path.

Before the fix the upstream URL was the route's URL joined with the raw path: ``%2F...@host:port`` turned
the upstream's address into userinfo and sent the request to the loopback metrics listener, which answered
every load value to a client without certificate or secret; ``..`` segments were resolved by httpx and
left the prefix. Every variant is sent over HTTP/2 and HTTP/1.1.
"""

from __future__ import annotations

import contextlib
import gzip
import zlib
from collections.abc import Iterator

import pytest

from secure_orca import pki
from secure_orca.lab import replicas as launch
from secure_orca.server.proxy.forward import steered_path
from tests.replicas import assert_no_traceback, run_replicas

from ..conftest import fp_flags
from .backends import Recorded, recording_backend
from .wire import get_h2, h1_get, h1_status

PREFIX = "/apis/x"
LEAK_MARKER = "secure_orca_sampler_ticks_total"  # /metrics reached through the proxy


@pytest.fixture(scope="module")
def rig(dev_pki: pki.DevPKI) -> Iterator[tuple[launch.Replica, Recorded, int]]:
    metrics_port = launch.free_port()
    with recording_backend() as (url, recorded):
        metrics = f"127.0.0.1:{metrics_port}"
        flags = [*fp_flags(dev_pki), "--proxy", f"{PREFIX}={url}", "--metrics-bind-address", metrics]
        with run_replicas([launch.serve_argv(dev_pki, flags)]) as (replica,):
            yield replica, recorded, metrics_port


def steering_paths(metrics_port: int) -> dict[str, str]:
    to_metrics = f"@127.0.0.1:{metrics_port}/metrics"
    return {
        "encoded-slash-userinfo": "%2Fapis%2Fx%2F" + to_metrics,
        "encoded-slash-userinfo-lower": "%2fapis%2fx%2f" + to_metrics,
        "dot-dot": "/apis/x/../y",
        "dot-dot-deep": "/apis/x/a/../../../metrics",
        "dot": "/apis/x/./y",
        "encoded-dot-dot": "/apis/x/%2e%2e/y",
        "encoded-dot-dot-upper": "/apis/x/%2E%2E/y",
        "half-encoded-dot-dot": "/apis/x/.%2e/y",
        "encoded-slash": "/apis/x/a%2Fb",
        "encoded-backslash": "/apis/x/a%5Cb",
        "backslash": "/apis/x/a\\..\\..\\y",
        "fragment": "/apis/x/#" + to_metrics,
        "bad-escape": "/apis/x/%zz",
    }


VARIANTS = list(steering_paths(0))


def leaks(data: bytes) -> bool:
    """Whether ``data`` holds the metrics listener's load values (plain, or gzip as the proxy relays it)."""
    texts = [data]
    start = data.find(b"\x1f\x8b")
    if start >= 0:
        with contextlib.suppress(OSError, EOFError, zlib.error):
            texts.append(gzip.decompress(data[start:]))
    return any(LEAK_MARKER.encode() in text for text in texts)


def assert_kept_in(recorded: Recorded, since: int) -> None:
    for path in recorded.paths[since:]:
        assert path == PREFIX or path.startswith(PREFIX + "/"), path
        assert steered_path(path.split("?")[0].encode(), PREFIX) is not None, path


@pytest.mark.parametrize("variant", VARIANTS)
def test_h2_paths_cannot_steer_the_proxy(rig, dev_pki, variant) -> None:
    replica, recorded, metrics_port = rig
    before = len(recorded.requests)
    reply = get_h2(replica, dev_pki, steering_paths(metrics_port)[variant])
    assert not leaks(reply.body)
    assert reply.status == 400 or reply.reset is not None
    assert_kept_in(recorded, before)


@pytest.mark.parametrize("variant", VARIANTS)
def test_http1_paths_cannot_steer_the_proxy(rig, dev_pki, variant) -> None:
    replica, recorded, metrics_port = rig
    before = len(recorded.requests)
    response = h1_get(replica, dev_pki, steering_paths(metrics_port)[variant])
    assert not leaks(response)
    assert h1_status(response) == 400
    assert_kept_in(recorded, before)


def test_ordinary_paths_still_reach_the_upstream(rig, dev_pki) -> None:
    replica, recorded, _ = rig
    before = len(recorded.requests)
    reply = get_h2(replica, dev_pki, "/apis/x/v1/a%20b;c=d@e?watch=1&q=%2F")
    response = h1_get(replica, dev_pki, "/apis/x")
    assert (reply.status, reply.body) == (200, b"backend")
    assert h1_status(response) == 200 and response.endswith(b"backend")
    assert recorded.paths[before:] == ["/apis/x/v1/a%20b;c=d@e?watch=1&q=%2F", "/apis/x"]
    assert_no_traceback(replica)


@pytest.mark.parametrize(
    ("raw", "kept"),
    [
        (b"/apis/x", True),
        (b"/apis/x/y", True),
        (b"/apis/xy", False),
        (b"/apis/x/..", False),
        (b"/apis/x/%2E", False),
        (b"/apis/x/%2f", False),
        (b"apis/x/y", False),
        (b"/apis/x/\xff", False),
        (b"/apis/x/a b", False),
        (b"/apis/x/%", False),
    ],
)
def test_steered_path_is_pure_and_exact(raw: bytes, kept: bool) -> None:
    assert (steered_path(raw, PREFIX) is not None) is kept
