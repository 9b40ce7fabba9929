"""A gRPC client of StreamCoreMetrics for the live tests: grpcio with the method bound to the xds-protos message
classes exactly as a generated stub binds it (xds-protos ships the messages but no ``orca_pb2_grpc``)."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from xds.data.orca.v3 import orca_load_report_pb2
from xds.service.orca.v3 import orca_pb2

from secure_orca import pki
from secure_orca.lab import replicas as launch
from secure_orca.orca import oob


def channel(
    replica: launch.Replica, dev: pki.DevPKI, cert: Path | None = None, key: Path | None = None
) -> grpc.Channel:
    credentials = grpc.ssl_channel_credentials(
        dev.cert("ca").read_bytes(), key.read_bytes() if key else None, cert.read_bytes() if cert else None
    )
    return grpc.secure_channel(
        f"{replica.host}:{replica.port}", credentials, options=[("grpc.ssl_target_name_override", "localhost")]
    )


def stream_core_metrics(ch: grpc.Channel):
    """``OpenRcaServiceStub(ch).StreamCoreMetrics``: what protoc's grpc plugin generates for the method."""
    return ch.unary_stream(
        oob.PATH,
        request_serializer=orca_pb2.OrcaLoadReportRequest.SerializeToString,
        response_deserializer=orca_load_report_pb2.OrcaLoadReport.FromString,
    )


def ask(interval: float) -> orca_pb2.OrcaLoadReportRequest:
    request = orca_pb2.OrcaLoadReportRequest()
    request.report_interval.FromNanoseconds(int(interval * 1e9))
    return request


def ended(call) -> tuple[grpc.StatusCode, str]:
    """Read the stream to its end; its status and message (a cut stream is UNKNOWN, or UNAVAILABLE with the
    transport's words, never ours)."""
    with pytest.raises(grpc.RpcError) as error:
        for _ in call:
            pass
    return error.value.code(), error.value.details()
