"""What one inbound header block costs the server's HTTP/2 connection, in instructions (callgrind), without a
server: the 1 MiB block of HPACK size updates against a legal 60,000-character value (issue 36 row 1).

    python -m benchmarks.header_block_cost

A fresh ``GatewayH2Connection`` per block, after the client's preface, is given the block's frames
(``benchmarks.header_block_flood``) in reads of 64 KiB, as hypercorn reads a socket, until it has them all or
refuses the connection; the TLS that carries them is not counted. Per block: a window of N connections minus a
window of M, less the same for connections that get the preface alone.
"""

from __future__ import annotations

import ctypes
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

LONG, SHORT = 3, 1  # connections per window
READ = 65_536  # bytes per read (hypercorn's MAX_RECV)


def _child(marks_path: str) -> None:
    import h2.exceptions

    from secure_orca.h2client import client_connection
    from secure_orca.server.http.connection import GatewayH2Connection

    from .header_block_flood import frames, legal_block, size_update_flood

    marks = ctypes.CDLL(marks_path)
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
    marks.marks_start()
    for name, call in cases.items():
        for count in (SHORT, LONG):
            marks.marks_zero()
            for _ in range(count):
                call()
            marks.marks_dump(f"{name},{count}".encode())


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        _child(sys.argv[2])
        return 0
    from secure_orca.lab import instrcount

    from .instructions import build_marks, dumps_by_label

    missing = instrcount.valgrind_available(marks=True)
    if missing:
        print(f"cannot count instructions: {missing}", file=sys.stderr)
        return 2
    workdir = Path("/tmp/secure-orca-header-block")
    workdir.mkdir(exist_ok=True)
    for old in workdir.glob("block.*"):
        old.unlink()
    marks = build_marks(workdir)
    command = [*instrcount.VALGRIND, f"--callgrind-out-file={workdir}/block.%p"]
    command += [sys.executable, "-m", "benchmarks.header_block_cost", "--child", str(marks)]
    done = subprocess.run(command, env=instrcount.pinned_env(0), check=True, capture_output=True, timeout=3000)
    outcomes = dict(line.split(": ", 1) for line in done.stderr.decode().splitlines() if line.count(": ") == 1)
    totals = {k: instrcount.dump_total(p) for k, p in dumps_by_label(workdir, "block").items() if "," in k}
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
    print(f"\n(window of {LONG} connections − window of {SHORT}) ÷ {LONG - SHORT}, less a connection's set-up and "
          f"preface ({empty:,.0f} instructions); the TLS that would carry the bytes is not counted.")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
