"""Bytes on the wire of the out-of-band stream, measured on a real connection (docs/out-of-band.md).

    python -m benchmarks.oob_wire --reports 50 --interval 0.1

Starts one ``serve`` replica (development PKI in a temporary directory, load-reader mode, the stream's floor at
``--interval``), opens one TLS 1.3 connection with the load-reader certificate, calls StreamCoreMetrics asking for
``--interval``, and reads ``--reports`` reports. Every byte is counted where it is: the ciphertext read from the
socket (through a MemoryBIO: TLS records included), the HTTP/2 frames h2 parsed from it, and the gRPC messages.
The figures are per report after the response headers, so they hold at any report interval: bytes per second per
load-balancer connection is ``per report / interval``, whatever the request rate.
"""

from __future__ import annotations

import argparse

from secure_orca.lab.oobcost import CountingTLS, wire_bytes

__all__ = ["CountingTLS", "measure"]
measure = wire_bytes  # the measurement lives in secure_orca.lab.oobcost (evaluate's option 4 uses it too)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reports", type=int, default=50)
    parser.add_argument("--interval", type=float, default=0.1)
    args = parser.parse_args()
    figures = measure(args.reports, args.interval)
    for name, value in figures.items():
        print(f"{name:24} {value:10.1f}")
    tls = figures["tls_bytes_per_report"]
    for period in (0.1, 1.0, 10.0):
        print(f"bytes/s per LB connection at a {period:g} s period: {tls / period:8.1f} (any request rate)")


if __name__ == "__main__":
    main()
