"""StreamCoreMetrics on a real ``serve`` (TLS, HTTP/2, loopback), read by a gRPC client we did not write: grpcio,
with the method bound to the xds-protos message classes exactly as a generated stub binds it (xds-protos ships
the messages but no ``orca_pb2_grpc``). Messages are counted, never timed."""

from __future__ import annotations

import signal
import ssl
from pathlib import Path

import grpc
import httpx
import pytest
from xds.data.orca.v3 import orca_load_report_pb2

from secure_orca import pki
from secure_orca.lab import launcher as lb
from secure_orca.lab import replicas as launch
from secure_orca.orca import oob
from secure_orca.orca.headers import REPORT, REPORT_BIN
from tests.conftest import ClientCert, load_issued
from tests.oobcalls import ask, channel, ended, stream_core_metrics
from tests.replicas import replica_fixture, run_replicas

FLOOR = 0.2  # --endpoint-load-metrics-oob-min-interval of the replicas here


def flags(dev: pki.DevPKI, *extra: str) -> list[str]:
    return lb.replica_flags(
        dev,
        "front-proxy,load-reader",
        "--endpoint-load-metrics-oob-min-interval",
        f"{int(FLOOR * 1000)}ms",
        "--endpoint-load-metrics-oob-max-streams-per-connection",
        "2",
        "--endpoint-load-metrics-oob-max-streams",
        "3",
        *extra,
    )


replica = replica_fixture(flags)


def role(dev: pki.DevPKI, name: str) -> tuple[Path, Path]:
    return dev.cert(name), dev.key(name)


def collect(call, count: int) -> list[orca_load_report_pb2.OrcaLoadReport]:
    got = []
    for report in call:
        got.append(report)
        if len(got) == count:
            call.cancel()
            break
    return got


@pytest.mark.parametrize("who", ["load_reader_client", "front_proxy_client"])
def test_the_load_balancers_certificates_receive_reports(
    replica: launch.Replica, dev_pki: pki.DevPKI, who: str
) -> None:
    with channel(replica, dev_pki, *role(dev_pki, who)) as ch:
        reports = collect(stream_core_metrics(ch)(ask(FLOOR), timeout=30), 3)
    assert len(reports) == 3
    assert all("in_flight_requests" in report.named_metrics for report in reports)


def test_no_client_makes_the_server_stream_faster_than_the_floor(replica: launch.Replica, dev_pki: pki.DevPKI) -> None:
    """Asked for 1 ms: over a window of 6 floors the stream carries at most 7 reports (a slow machine sends
    fewer, never more), where 1 ms would give thousands."""
    with channel(replica, dev_pki, *role(dev_pki, "load_reader_client")) as ch:
        call = stream_core_metrics(ch)(ask(0.001), timeout=6 * FLOOR)
        got = 0
        with pytest.raises(grpc.RpcError) as ended:
            for _ in call:
                got += 1
    assert ended.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
    assert 1 <= got <= 7


def refused(ch: grpc.Channel) -> tuple[int, grpc.StatusCode]:
    """How many reports the call yielded (must be none) and its status."""
    got = 0
    with pytest.raises(grpc.RpcError) as error:
        for _ in stream_core_metrics(ch)(ask(FLOOR), timeout=10):
            got += 1
    return got, error.value.code()


def test_no_certificate_is_unauthenticated(replica: launch.Replica, dev_pki: pki.DevPKI) -> None:
    with channel(replica, dev_pki) as ch:
        assert refused(ch) == (0, grpc.StatusCode.UNAUTHENTICATED)


@pytest.mark.parametrize(
    "who",
    ["user", "user-with-allowed-cn", "front-proxy-ca-other-cn", "front-proxy-ca-name-in-san", "front-proxy-expired"],
)
def test_other_certificates_are_denied(
    replica: launch.Replica, dev_pki: pki.DevPKI, client_certs: dict[str, ClientCert], who: str
) -> None:
    """A client-CA user (also one named like the front proxy), a wrong name, the name only in a SAN, expired."""
    cert = client_certs[who]
    with channel(replica, dev_pki, cert.cert, cert.key) as ch:
        assert refused(ch) == (0, grpc.StatusCode.PERMISSION_DENIED)


def test_a_client_ca_certificate_named_like_the_load_reader_is_denied(
    replica: launch.Replica, dev_pki: pki.DevPKI, tmp_path: Path
) -> None:
    client_ca = load_issued(dev_pki.cert("client_ca"), dev_pki.key("client_ca"))
    leaf = pki.issue(client_ca, pki.LOAD_READER_CN)
    (tmp_path / "c.crt").write_bytes(leaf.cert_pem())
    (tmp_path / "c.key").write_bytes(leaf.key_pem())
    with channel(replica, dev_pki, tmp_path / "c.crt", tmp_path / "c.key") as ch:
        assert refused(ch) == (0, grpc.StatusCode.PERMISSION_DENIED)


def http_client(dev: pki.DevPKI, http2: bool) -> httpx.Client:
    context = ssl.create_default_context(cafile=str(dev.cert("ca")))
    context.load_cert_chain(*role(dev, "load_reader_client"))
    return httpx.Client(verify=context, http1=not http2, http2=http2, timeout=10)


@pytest.mark.parametrize(
    ("http2", "content_type", "status"),
    [(False, "application/grpc", 400), (True, "application/json", 415), (True, "text/plain", 415)],
)
def test_not_grpc_is_refused_without_a_report(
    replica: launch.Replica, dev_pki: pki.DevPKI, http2: bool, content_type: str, status: int
) -> None:
    """Even with the load reader's certificate: over HTTP/1.1 or with another content type, no report."""
    body = oob.frame(ask(FLOOR).SerializeToString())
    headers = {"content-type": content_type, "te": "trailers", "endpoint-load-metrics-request": "TEXT"}
    with http_client(dev_pki, http2) as http:
        response = http.post(replica.url + oob.PATH, content=body, headers=headers)
    assert response.status_code == status
    assert REPORT not in response.headers and REPORT_BIN not in response.headers
    assert b"in_flight" not in response.content


def test_streams_past_the_bounds_are_refused(replica: launch.Replica, dev_pki: pki.DevPKI) -> None:
    """Per connection (2 here), then in total (3): the next stream gets RESOURCE_EXHAUSTED and no report."""
    reader = role(dev_pki, "load_reader_client")
    with channel(replica, dev_pki, *reader) as first, channel(replica, dev_pki, *reader) as second:
        held = [stream_core_metrics(first)(ask(FLOOR), timeout=30) for _ in range(2)]
        for call in held:
            next(call)  # open and served
        assert refused(first) == (0, grpc.StatusCode.RESOURCE_EXHAUSTED)
        third = stream_core_metrics(second)(ask(FLOOR), timeout=30)
        next(third)
        assert refused(second) == (0, grpc.StatusCode.RESOURCE_EXHAUSTED)
        for call in [*held, third]:
            call.cancel()


def test_revocation_rotation_and_shutdown_end_streams_with_a_status(dev_pki: pki.DevPKI, tmp_path: Path) -> None:
    """On its own replica: the allowed name removed from the reloaded file ends the front proxy's stream with
    PERMISSION_DENIED; a GOAWAY rotation ends a stream with UNAVAILABLE; so does a graceful shutdown (SIGTERM)."""
    names = tmp_path / "allowed-names"
    names.write_text(pki.FRONT_PROXY_CN + "\n")
    argv = flags(dev_pki, "--credential-reload-interval", "100ms", "--max-requests-per-connection", "2")
    at = argv.index("--requestheader-allowed-names")
    argv[at : at + 2] = ["--requestheader-allowed-names-file", str(names)]
    with run_replicas([launch.serve_argv(dev_pki, argv)]) as (started,):
        with channel(started, dev_pki, *role(dev_pki, "front_proxy_client")) as ch:
            call = stream_core_metrics(ch)(ask(FLOOR), timeout=60)
            next(call)
            names.write_text("someone-else\n")
            assert ended(call) == (grpc.StatusCode.PERMISSION_DENIED, "entitlement withdrawn")
            names.write_text(pki.FRONT_PROXY_CN + "\n")
        with channel(started, dev_pki, *role(dev_pki, "load_reader_client")) as ch:
            call = stream_core_metrics(ch)(ask(FLOOR), timeout=60)
            next(call)
            second = stream_core_metrics(ch)(ask(FLOOR), timeout=60)  # the connection's second request: rotate
            assert ended(call) == ended(second) == (grpc.StatusCode.UNAVAILABLE, "connection rotating (GOAWAY)")
        with channel(started, dev_pki, *role(dev_pki, "load_reader_client")) as ch:
            call = stream_core_metrics(ch)(ask(FLOOR), timeout=60)
            next(call)
            started.process.popen.send_signal(signal.SIGTERM)
            assert ended(call) == (grpc.StatusCode.UNAVAILABLE, "server shutting down")
