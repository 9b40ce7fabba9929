"""Server CPU per request of a header block of HPACK table-size updates against a legal large block, and a
bystander's worst ``/healthz`` meanwhile (issue 36 row 1).

    python -m benchmarks.header_block_flood [--rounds 3 --requests 20 --samples 100] [-- SERVE FLAGS]

One ``serve`` (one process). Per round, two floods in turn (the order alternates), each REQUESTS requests, one per
new TLS connection, sent as raw frames: the hostile block is 1 MiB of dynamic table size updates (``0x20``) and
then a literal ``GET /healthz``, as HEADERS plus 63 CONTINUATION frames of 16 KiB; the control is a legal
``GET /healthz`` with one 60,000-character value, Huffman-coded as hpack codes it, in frames of 16 KiB. Each
request waits for its answer: the response, or the server's GOAWAY or close. Meanwhile a bystander sends
sequential ``GET /healthz`` on its own HTTP/2 connection. Printed per round: the server's CPU per request
(utime + stime) of each flood and their ratio, the bystander's worst latency under each and while idle.
Target: hostile at most 2x the control's CPU, the bystander's worst under the hostile flood within 3x idle.
"""

from __future__ import annotations

import argparse
import ssl
import statistics
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import hpack
from hyperframe.frame import ContinuationFrame, HeadersFrame

from secure_orca.credentials import devpki
from secure_orca.h2client import FRAME_HEADER, H2Loop, Transport, WireFrame, client_connection, connect
from secure_orca.lab import replicas as launch
from secure_orca.lab.procfs import process_cpu

from .audit_flood import victim

FRAME = 16_384  # the default SETTINGS_MAX_FRAME_SIZE: the largest fragment a client may send unasked
FLOOD_FRAMES = 64  # HEADERS and 63 CONTINUATION: h2's backlog (CONTINUATION_BACKLOG) let all of them through
SIZE_UPDATE = b"\x20"  # a dynamic table size update to 0 (RFC 7541 section 6.3)
LEGAL_VALUE = 60_000
GOAWAY, END_STREAM = 0x7, 0x1
REQUEST = [(b":method", b"GET"), (b":scheme", b"https"), (b":path", b"/healthz"), (b":authority", b"localhost")]


def frames(block: bytes, stream_id: int = 1, size: int = FRAME) -> list[bytes]:
    """``block`` as HEADERS (END_STREAM) and CONTINUATION frames of ``size`` bytes, END_HEADERS on the last."""
    parts = [block[at : at + size] for at in range(0, len(block), size)] or [b""]
    wire = []
    for index, part in enumerate(parts):
        frame = HeadersFrame(stream_id) if index == 0 else ContinuationFrame(stream_id)
        frame.data = part
        if index == 0:
            frame.flags.add("END_STREAM")
        if index == len(parts) - 1:
            frame.flags.add("END_HEADERS")
        wire.append(frame.serialize())
    return wire


def request_block(updates: int = 0, extra: Sequence[tuple[bytes, bytes]] = (), huffman: bool = False) -> bytes:
    """``updates`` size updates, then ``GET /healthz`` (and ``extra`` fields) from a fresh hpack encoder."""
    return SIZE_UPDATE * updates + hpack.Encoder().encode([*REQUEST, *extra], huffman=huffman)


def size_update_flood(total: int = FLOOD_FRAMES * FRAME) -> bytes:
    """The audit's block: size updates up to ``total`` bytes, then a literal ``GET /healthz``."""
    return request_block(total - len(request_block()))


def legal_block() -> bytes:
    """A legal request with one 60,000-character value (about 45 KB Huffman-coded)."""
    value = (b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ" * 1000)[:LEGAL_VALUE]
    return request_block(extra=[(b"x-large", value)], huffman=True)


def answer(sock: Transport, wire: Sequence[bytes], timeout: float = 30.0) -> str:
    """Send the client preface and ``wire`` on a fresh connection; how the server answered stream 1:
    ``response`` (a frame with END_STREAM), ``goaway:<code>``, or ``closed`` (a server that closes while frames
    are still coming may reset the connection before its GOAWAY is read)."""
    seen: list[WireFrame] = []
    loop = H2Loop(
        sock, client_connection(), on_frame=seen.append, admit=lambda frame: False, closes_on=(OSError, ssl.SSLError)
    )
    try:
        loop.open()
        for raw in wire:
            loop.send_raw(raw)
    except (OSError, ssl.SSLError):
        loop.eof = True

    def found() -> str | None:
        for frame in seen:
            if frame.type == GOAWAY:
                return f"goaway:{int.from_bytes(frame.raw[FRAME_HEADER + 4 : FRAME_HEADER + 8], 'big')}"
            if frame.stream_id == 1 and frame.flags & END_STREAM and not frame.outbound:
                return "response"
        return None

    if not loop.eof:
        loop.read_until(lambda: found() is not None, timeout)
    return found() or "closed"


def flood(replica: launch.Replica, ca: Path, block: bytes, requests: int) -> tuple[float, list[str]]:
    """Server CPU seconds per request of ``requests`` connections, each sending ``block``, and their answers."""
    context = ssl.create_default_context(cafile=str(ca))
    context.set_alpn_protocols(["h2"])
    wire = frames(block)
    pid = replica.process.popen.pid
    cpu = process_cpu(pid)
    answers = []
    for _ in range(requests):
        with connect(replica.host, replica.port, context, timeout=60) as sock:
            answers.append(answer(sock, wire, timeout=60))
    return (process_cpu(pid) - cpu) / requests, answers


def worst_while(replica: launch.Replica, ca: Path, samples: int, work: Callable[[], None]) -> float:
    """The bystander's worst ``/healthz`` latency (seconds) while ``work()`` runs (at least ``samples``)."""
    busy = threading.Event()
    busy.set()
    found: list[list[float]] = []
    thread = threading.Thread(target=lambda: found.append(victim(replica.url, ca, samples, busy)))
    thread.start()
    try:
        work()
    finally:
        busy.clear()
        thread.join()
    return max(found[0])


@dataclass
class Flood:
    """One flood of a round: server CPU per request (s), the bystander's worst latency (s), the answers seen."""

    cpu: float = 0.0
    worst: float = 0.0
    answers: list[str] = field(default_factory=list)


def run(workdir: Path, rounds: int, requests: int, samples: int, extra: Sequence[str]) -> list[dict[str, Flood]]:
    """Per round, the two floods and the bystander alone (``idle``: its worst latency only), by name."""
    dev = devpki.generate(workdir / "pki")
    ca = dev.cert("ca")
    blocks = {"hostile": size_update_flood(), "control": legal_block()}
    rows: list[dict[str, Flood]] = []
    with launch.replicas([launch.serve_argv(dev, list(extra))]) as (replica,):
        flood(replica, ca, blocks["control"], 3)  # warm-up
        for index in range(rounds):
            row: dict[str, Flood] = {"idle": Flood(worst=worst_while(replica, ca, samples, lambda: None))}
            for name in ("hostile", "control") if index % 2 == 0 else ("control", "hostile"):
                found = row[name] = Flood()

                def work(block: bytes = blocks[name], found: Flood = found) -> None:
                    found.cpu, answers = flood(replica, ca, block, requests)
                    found.answers = sorted(set(answers))

                found.worst = worst_while(replica, ca, samples, work)
            rows.append(row)
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.header_block_flood", description=(__doc__ or "").split("\n\n")[0]
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=20, help="requests per flood, one connection each")
    parser.add_argument("--samples", type=int, default=100, help="bystander requests at least, per flood")
    parser.add_argument("serve", nargs="*", help="more serve flags (after --)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    with tempfile.TemporaryDirectory(prefix="header-block-flood-") as tmp:
        rows = run(Path(tmp), args.rounds, args.requests, args.samples, args.serve)
    legal = legal_block()
    print(
        f"hostile block: {len(size_update_flood())} bytes in {FLOOD_FRAMES} frames; control: {len(legal)} "
        f"bytes in {len(frames(legal))} frames"
    )
    print(
        "| round | server CPU per request control (ms) | hostile (ms) | hostile / control "
        "| bystander worst idle (ms) | control (ms) | hostile (ms) | answers control | hostile |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for index, row in enumerate(rows):
        control, hostile = row["control"], row["hostile"]
        print(
            f"| {index} | {control.cpu * 1000:.1f} | {hostile.cpu * 1000:.1f} | {hostile.cpu / control.cpu:.2f} "
            f"| {row['idle'].worst * 1000:.1f} | {control.worst * 1000:.1f} | {hostile.worst * 1000:.1f} "
            f"| {', '.join(control.answers)} | {', '.join(hostile.answers)} |"
        )
    ratios = sorted(row["hostile"].cpu / row["control"].cpu for row in rows)
    worst = sorted(row["hostile"].worst / row["idle"].worst for row in rows)
    print(
        f"\nhostile / control CPU: median {statistics.median(ratios):.2f} [{ratios[0]:.2f}, {ratios[-1]:.2f}]; "
        f"bystander worst, hostile / idle: median {statistics.median(worst):.2f} "
        f"[{worst[0]:.2f}, {worst[-1]:.2f}]"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
