"""What turning TLS session tickets off costs: server CPU per new connection of a front proxy whose
certificate chains through an intermediate, full handshake vs offering the previous session, TLS 1.2 and 1.3.

    python -m benchmarks.resumption [CONNECTIONS]

CPU is the server process's user+system time (/proc/PID/stat) over the run, divided by the connections.
"""

from __future__ import annotations

import socket
import ssl
import sys
import tempfile
import time
from pathlib import Path

from secure_orca import pki
from secure_orca.credentials import devpki
from secure_orca.lab import replicas as launch
from secure_orca.lab.procfs import process_cpu


def connect_once(
    replica: launch.Replica, ctx: ssl.SSLContext, session: ssl.SSLSession | None
) -> tuple[ssl.SSLSession | None, bool]:
    """One request on a new connection: the session it ended with, and whether it was resumed."""
    raw = socket.create_connection((replica.host, replica.port))
    raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as a load balancer does
    sock = ctx.wrap_socket(raw, server_hostname="localhost", session=session)
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
    while sock.recv(65536):
        pass
    outcome = sock.session, bool(sock.session_reused)
    sock.close()
    return outcome


def main(connections: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        dev = devpki.generate(Path(tmp) / "pki")
        fp_ca = pki.make_ca("front-proxy-ca")
        intermediate = pki.issue(fp_ca, "front-proxy-intermediate", is_ca=True, eku=None)
        leaf = pki.issue(intermediate, pki.FRONT_PROXY_CN)
        cert, key, ca = Path(tmp) / "fp.crt", Path(tmp) / "fp.key", Path(tmp) / "fp-ca.crt"
        cert.write_bytes(leaf.cert_pem() + intermediate.cert_pem())
        key.write_bytes(leaf.key_pem())
        ca.write_bytes(fp_ca.cert_pem())
        flags = [
            "--feature-gates",
            "RequestCostAggregation=true",
            "--enable-endpoint-load-metrics",
            "--requestheader-client-ca-file",
            str(ca),
            "--requestheader-allowed-names",
            pki.FRONT_PROXY_CN,
            "--endpoint-load-metrics-auth",
            "front-proxy",
        ]
        with launch.replicas([launch.serve_argv(dev, flags)]) as (replica,):
            pid = replica.process.popen.pid
            for version in (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3):
                ctx = ssl.create_default_context(cafile=str(dev.cert("ca")))
                ctx.load_cert_chain(cert, key)
                ctx.minimum_version = ctx.maximum_version = version
                ctx.set_alpn_protocols(["http/1.1"])
                for offer_session in (False, True):
                    session, _ = connect_once(replica, ctx, None)
                    reused, cpu, wall = 0, process_cpu(pid), time.perf_counter()
                    for _ in range(connections):
                        reused += connect_once(replica, ctx, session if offer_session else None)[1]
                    cpu, wall = process_cpu(pid) - cpu, time.perf_counter() - wall
                    print(
                        f"{version.name} {'session offered' if offer_session else 'no session':15s} "
                        f"resumed {reused}/{connections}: server CPU {cpu / connections * 1000:.2f} ms/connection"
                    )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 300)
