"""What one inbound header block costs the server's HTTP/2 connection, in instructions (callgrind), without a
server: the 1 MiB block of HPACK size updates against a legal 60,000-character value (issue 36 row 1).

    python -m benchmarks.header_block_cost

A fresh ``GatewayH2Connection`` per block, after the client's preface, is given the block's frames
(``benchmarks.header_block_flood``) in reads of 64 KiB, as hypercorn reads a socket, until it has them all or
refuses the connection; the TLS that carries them is not counted. Per block: a window of N connections minus a
window of M (the collector off, a collection before each window), less the same for connections that get the
preface alone.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

LONG, SHORT = 5, 1  # connections per window
READ = 65_536  # bytes per read (hypercorn's MAX_RECV)


def _child(marks_path: str) -> None:
    import gc

    import h2.exceptions

    from secure_orca.h2client import client_connection
    from secure_orca.server.http.connection import GatewayH2Connection

    from .header_block_flood import frames, legal_block, size_update_flood
    from .instructions import count_windows

    client = client_connection()
    client.initiate_connection()
    preface = client.data_to_send()

    def feeding(block: bytes | None) -> Callable[[], str]:
        wire = b"".join(frames(block)) if block is not None else b""

        def feed() -> str:
            server = GatewayH2Connection()
            server.initiate_connection()
            server.receive_data(preface)
            try:
                for at in range(0, len(wire), READ):
                    server.receive_data(wire[at : at + READ])
            except h2.exceptions.ProtocolError as error:
                return f"refused ({type(error).__name__})"
            return "decoded"

        return feed

    cases = {
        "preface alone": feeding(None),
        "legal 60,000-character value": feeding(legal_block()),
        "1 MiB of size updates": feeding(size_update_flood()),
    }
    for name, call in cases.items():
        print(f"{name}: {call()}", file=sys.stderr)
    gc.disable()  # a collection inside one window and not the other would be counted as the block's
    count_windows(marks_path, cases, (SHORT, LONG), gc.collect)


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        _child(sys.argv[2])
        return 0
    from .instructions import windows_of_child

    totals, stderr = windows_of_child("benchmarks.header_block_cost", "block", 3000)
    outcomes = dict(line.split(": ", 1) for line in stderr.splitlines() if line.count(": ") == 1)
    per = {
        n: (totals[f"{n},{LONG}"] - totals[f"{n},{SHORT}"]) / (LONG - SHORT)
        for n in outcomes
        if f"{n},{LONG}" in totals
    }
    empty = per.pop("preface alone")
    legal = per["legal 60,000-character value"] - empty
    print("| block | outcome | instructions per block | / legal block |\n|---|---|---|---|")
    for name, total in per.items():
        print(f"| {name} | {outcomes[name]} | {total - empty:,.0f} | {(total - empty) / legal:.2f} |")
    print(
        f"\n(window of {LONG} connections − window of {SHORT}) ÷ {LONG - SHORT}, less a connection's set-up and "
        f"preface ({empty:,.0f} instructions); the TLS that would carry the bytes is not counted."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
