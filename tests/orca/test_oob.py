"""The out-of-band stream's pure parts (secure_orca.orca.oob), without sockets: transport checks, framing,
the request decode and the report message (protobuf from xds-protos), the interval floor, the entitlement; and
serve's switches for it."""

from __future__ import annotations

import argparse
import datetime as dt

import pytest
from xds.data.orca.v3 import orca_load_report_pb2
from xds.service.orca.v3 import orca_pb2

from secure_orca import pki
from secure_orca.authz.policy import Mode, Policy
from secure_orca.authz.reasons import Reason
from secure_orca.authz.streams import Limits
from secure_orca.cli import serve as serve_cli
from secure_orca.errors import UsageError
from secure_orca.lab import launcher as lb
from secure_orca.lab import replicas as launch
from secure_orca.orca import oob
from secure_orca.orca.oob import GrpcError, Status
from secure_orca.orca.report import LoadReport, encode_text, parse_text
from secure_orca.server.config import OobConfig, ServeConfig, build_config
from secure_orca.x509.chainverifier import NO_CERTIFICATE, ChainResult, Failure

NOW = dt.datetime(2026, 12, 3, tzinfo=dt.UTC)
DAY = dt.timedelta(days=1)
GOOD = [(b"content-type", b"application/grpc"), (b"te", b"trailers")]


def verified(start: dt.datetime = NOW - DAY) -> ChainResult:
    return ChainResult(True, None, ((start, start + 2 * DAY),))


EXPIRED = verified(start=NOW - 3 * DAY)
CERTIFICATE_MODES = frozenset({Mode.FRONT_PROXY, Mode.LOAD_READER})


@pytest.mark.parametrize(
    ("modes", "identity", "reader", "reason", "status"),
    [
        (CERTIFICATE_MODES, verified(), NO_CERTIFICATE, Reason.FRONT_PROXY, None),
        (
            CERTIFICATE_MODES,
            ChainResult(False, Failure.UNTRUSTED),
            verified(),
            Reason.LOAD_READER,
            None,
        ),
        (CERTIFICATE_MODES, NO_CERTIFICATE, NO_CERTIFICATE, Reason.NO_CERTIFICATE, Status.UNAUTHENTICATED),
        # a client-CA user: its chain verifies against neither trust
        (
            CERTIFICATE_MODES,
            ChainResult(False, Failure.UNTRUSTED),
            ChainResult(False, Failure.UNTRUSTED),
            Reason.UNTRUSTED_CA,
            Status.PERMISSION_DENIED,
        ),
        (
            CERTIFICATE_MODES,
            ChainResult(False, Failure.NAME_NOT_ALLOWED),
            NO_CERTIFICATE,
            Reason.NAME_NOT_ALLOWED,
            Status.PERMISSION_DENIED,
        ),
        (CERTIFICATE_MODES, EXPIRED, NO_CERTIFICATE, Reason.EXPIRED, Status.PERMISSION_DENIED),
        # a verified certificate grants only in its own configured mode
        (frozenset({Mode.LOAD_READER}), verified(), NO_CERTIFICATE, Reason.NO_CERTIFICATE, Status.UNAUTHENTICATED),
        (
            frozenset({Mode.FRONT_PROXY}),
            ChainResult(False, Failure.UNTRUSTED),
            verified(),
            Reason.UNTRUSTED_CA,
            Status.PERMISSION_DENIED,
        ),
        # the header and the secret never grant the stream
        (
            frozenset({Mode.HEADER_ONLY, Mode.SHARED_SECRET}),
            NO_CERTIFICATE,
            NO_CERTIFICATE,
            Reason.NO_CERTIFICATE,
            Status.UNAUTHENTICATED,
        ),
    ],
)
def test_entitlement(modes, identity, reader, reason: Reason, status: Status | None) -> None:
    got = Policy(modes).entitles_stream(identity, NOW, reader)
    assert got is reason
    assert got.grants is (status is None)
    if status is not None:
        assert oob.refusal_status(got is not Reason.NO_CERTIFICATE) is status


@pytest.mark.parametrize(
    ("version", "method", "headers", "status"),
    [
        ("2", "POST", GOOD, None),
        ("2", "POST", [(b"content-type", b"application/grpc+proto"), (b"te", b"trailers")], None),
        ("1.1", "POST", GOOD, 400),
        ("2", "GET", GOOD, 405),
        ("2", "POST", [(b"content-type", b"application/json"), (b"te", b"trailers")], 415),
        ("2", "POST", [(b"content-type", b"application/grpc+json"), (b"te", b"trailers")], 415),
        ("2", "POST", [(b"content-type", b"application/grpcx"), (b"te", b"trailers")], 415),
        ("2", "POST", [(b"te", b"trailers")], 415),
        ("2", "POST", [*GOOD, (b"content-type", b"application/grpc")], 415),
        ("2", "POST", GOOD[:1], 400),
    ],
)
def test_transport(version: str, method: str, headers: list[tuple[bytes, bytes]], status: int | None) -> None:
    refusal = oob.check_transport(version, method, headers)
    assert (refusal.http_status if refusal else None) == status


def request(seconds: int = 0, nanos: int = 0, names: tuple[str, ...] = ()) -> bytes:
    message = orca_pb2.OrcaLoadReportRequest(request_cost_names=list(names))
    message.report_interval.seconds, message.report_interval.nanos = seconds, nanos
    return message.SerializeToString()


def test_a_request_framed_and_decoded() -> None:
    body = oob.frame(request(2, 500_000_000, ("db",)))
    assert oob.expected_length(body) == len(body)
    assert oob.parse_request(oob.unframe(body)) == oob.StreamRequest(2.5, ("db",))
    assert oob.parse_request(oob.unframe(oob.frame(b""))) == oob.StreamRequest(0.0)


@pytest.mark.parametrize(
    ("body", "status"),
    [
        (b"", Status.INVALID_ARGUMENT),
        (b"\0\0\0", Status.INVALID_ARGUMENT),
        (b"\1" + oob.frame(request(1))[1:], Status.UNIMPLEMENTED),  # compressed flag
        (oob.frame(request(1))[:-1], Status.INVALID_ARGUMENT),
        (oob.frame(request(1)) * 2, Status.INVALID_ARGUMENT),
        (oob.frame(b"\0" * (oob.MAX_REQUEST + 1)), Status.RESOURCE_EXHAUSTED),
        (oob.frame(b"\xff\xff"), Status.INVALID_ARGUMENT),  # not a protobuf message
        (oob.frame(request(-1)), Status.INVALID_ARGUMENT),
    ],
)
def test_bad_requests_are_refused_with_a_status(body: bytes, status: Status) -> None:
    with pytest.raises(GrpcError) as refused:
        oob.parse_request(oob.unframe(body))
    assert refused.value.status is status


@pytest.mark.parametrize(
    ("asked", "floor", "served"),
    [(0.0, 1.0, 1.0), (0.01, 1.0, 1.0), (1.0, 1.0, 1.0), (2.5, 1.0, 2.5), (1e9, 1.0, oob.MAX_INTERVAL)],
)
def test_interval_floor(asked: float, floor: float, served: float) -> None:
    assert oob.floor_interval(asked, floor) == served


def test_the_report_carries_the_in_band_values() -> None:
    report = LoadReport.of(
        {"cpu_utilization": 0.4567, "mem_utilization": 0.1234, "rps_fractional": 12.345, "eps": 0.0},
        named_metrics={"in_flight_requests": 3.0},
    )
    framed = oob.report_frame(report, 2)
    message = orca_load_report_pb2.OrcaLoadReport.FromString(oob.unframe(framed))
    in_band = parse_text(encode_text(report, 2))
    assert message.cpu_utilization == in_band.cpu_utilization == 0.46
    assert message.mem_utilization == in_band.mem_utilization
    assert message.rps_fractional == in_band.rps_fractional
    assert message.eps == 0.0
    assert dict(message.named_metrics) == in_band.named_metrics == {"in_flight_requests": 3.0}


def test_status_trailers() -> None:
    assert oob.status_trailers(Status.PERMISSION_DENIED) == [(b"grpc-status", b"7")]
    assert oob.status_trailers(Status.UNAVAILABLE, "50% gone\n") == [
        (b"grpc-status", b"14"),
        (b"grpc-message", b"50%25 gone%0A"),
    ]


# --- the switches (serve's flags, parsed and validated without a socket) -------------------------------------


def serve_config(dev: pki.DevPKI, option: str, *extra: str) -> ServeConfig:
    parser = argparse.ArgumentParser()
    serve_cli.add_arguments(parser)
    argv = launch.serve_argv(dev, lb.replica_flags(dev, option, *extra))
    return build_config(parser.parse_args(argv[argv.index("serve") + 1 :]))


@pytest.mark.parametrize(
    ("option", "extra", "on"),
    [
        ("front-proxy", (), True),
        ("load-reader", (), True),
        ("front-proxy,shared-secret", (), True),
        ("shared-secret", (), False),  # no certificate mode: nothing could open the stream
        ("header-only", (), False),
        ("front-proxy", ("--endpoint-load-metrics-oob=false",), False),
        ("front-proxy", ("--no-enable-endpoint-load-metrics",), False),
    ],
)
def test_the_service_is_on_with_the_feature_and_a_certificate_mode(
    dev_pki: pki.DevPKI, option: str, extra: tuple[str, ...], on: bool
) -> None:
    assert (serve_config(dev_pki, option, *extra).oob is not None) is on


def test_defaults_and_the_floor_never_below_sampling(dev_pki: pki.DevPKI) -> None:
    expected = OobConfig(min_interval=1.0, limits=Limits(64, 4, 16, 16), write_deadline=10.0)
    assert serve_config(dev_pki, "front-proxy").oob == expected
    slow = serve_config(dev_pki, "front-proxy", "--endpoint-load-metrics-interval", "2s")
    assert slow.oob is not None and slow.oob.min_interval == 2.0


@pytest.mark.parametrize(
    ("extra", "flag"),
    [
        (("--endpoint-load-metrics-oob=maybe",), "--endpoint-load-metrics-oob:"),
        (("--endpoint-load-metrics-oob-min-interval", "0"), "--endpoint-load-metrics-oob-min-interval"),
        (("--endpoint-load-metrics-oob-min-interval", "soon"), "--endpoint-load-metrics-oob-min-interval"),
        (("--endpoint-load-metrics-oob-max-streams", "0"), "--endpoint-load-metrics-oob-max-streams:"),
        (("--endpoint-load-metrics-oob-max-streams-per-connection", "65"), "per-connection"),
        (("--endpoint-load-metrics-oob-max-streams-per-identity", "0"), "per-identity"),
        (("--endpoint-load-metrics-oob-front-proxy-streams", "64"), "front-proxy-streams"),
        (("--endpoint-load-metrics-oob-write-deadline", "0s"), "write-deadline"),
        (("--endpoint-load-metrics-oob-write-deadline", "never"), "write-deadline"),
    ],
)
def test_bad_values_are_refused_naming_the_flag(dev_pki: pki.DevPKI, extra: tuple[str, ...], flag: str) -> None:
    with pytest.raises(UsageError, match=flag):
        serve_config(dev_pki, "front-proxy", *extra)
