"""What one more response header field costs h2 and hpack, in instructions (callgrind), without a server.

    python -m benchmarks.hpack_field_cost

The response headers of the demo's /healthz as hypercorn hands them to h2 (a fresh ``audit-id`` UUID each time,
as kube-apiserver sends), encoded on one long-lived HPACK context, with and without a load report of the size
the sampler publishes; and h2's outbound header normalisation and validation of the same lists. The "indexed"
rows use the server's own encoder (``secure_orca/server/hpack/headers.py``); "report carried" is how the server
sends the report: past h2 (whose work is then the "no report" row) and appended by that encoder. Per response:
a window of N encodings minus a window of M, as in ``benchmarks/instructions.py``.
"""

from __future__ import annotations

import random
import sys
import uuid
from collections.abc import Callable

REPORT = (
    b"endpoint-load-metrics",
    b"TEXT cpu_utilization=0.0123, mem_utilization=0.0456, rps_fractional=1234.5678, eps=0, "
    b"named_metrics.in_flight_requests=1",
)
SHORT_REPORT = (b"endpoint-load-metrics", b"TEXT cpu_utilization=0.01,mem_utilization=0.05")
LONG, SHORT = 1200, 200


def _child(marks_path: str) -> None:
    import h2.utilities as h2u
    import hpack
    from h2.utilities import HeaderValidationFlags

    from secure_orca.server.hpack.headers import IndexedEncoder

    uuids = random.Random(0)
    flags = HeaderValidationFlags(is_client=False, is_trailer=False, is_response_header=True, is_push_promise=False)

    def base() -> list[tuple[bytes, bytes]]:
        audit = str(uuid.UUID(int=uuids.getrandbits(128), version=4)).encode()
        return [
            (b":status", b"200"),
            (b"content-type", b"text/plain; charset=utf-8"),
            (b"audit-id", audit),
            (b"cache-control", b"no-cache, private"),
            (b"x-kubernetes-pf-flowschema-uid", b"a" * 36),
            (b"x-kubernetes-pf-prioritylevel-uid", b"b" * 36),
            (b"date", b"Fri, 15 Jan 2027 08:00:00 GMT"),
            (b"server", b"hypercorn-h2"),
        ]

    Shape = Callable[[list[tuple[bytes, bytes]]], list[tuple[bytes, bytes]]]

    def encoding(encoder: hpack.Encoder, shape: Shape) -> Callable[[], object]:
        return lambda: encoder.encode(shape(base()))

    def validating(shape: Shape) -> Callable[[], object]:
        return lambda: list(
            h2u.validate_outbound_headers(h2u.normalize_outbound_headers(shape(base()), flags, False), flags)
        )

    shapes: dict[str, Shape] = {
        "no report": lambda h: h,
        "report last": lambda h: [*h, REPORT],
        "report first": lambda h: [h[0], REPORT, *h[1:]],
        "shorter report (47 B value)": lambda h: [*h, SHORT_REPORT],
        "report never indexed": lambda h: [*h, hpack.NeverIndexedHeaderTuple(*REPORT)],
    }
    cases: dict[str, Callable[[], object]] = {}
    for name, shape in shapes.items():
        encoder = hpack.Encoder()
        cases[f"hpack encode: {name}"] = encoding(encoder, shape)
    for name in ("no report", "report last"):
        indexed = IndexedEncoder()
        cases[f"indexed encode: {name}"] = encoding(indexed, shapes[name])
    carrying = IndexedEncoder()

    def carried() -> bytes:
        carrying.carried = REPORT[1]  # as server/http/connection.py hands it over
        return carrying.encode(base())

    cases["indexed encode: report carried"] = carried
    for name in ("no report", "report last"):
        cases[f"h2 normalise + validate: {name}"] = validating(shapes[name])
    for call in cases.values():
        for _ in range(SHORT):
            call()
    from .instructions import count_windows

    count_windows(marks_path, cases, (SHORT, LONG), lambda: uuids.seed(0))


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        _child(sys.argv[2])
        return 0
    from .instructions import windows_of_child

    totals, _ = windows_of_child("benchmarks.hpack_field_cost", "field", 600)
    names = sorted({k.rsplit(",", 1)[0] for k in totals}, key=lambda n: (n.split(":")[0], n))
    per = {n: (totals[f"{n},{LONG}"] - totals[f"{n},{SHORT}"]) / (LONG - SHORT) for n in names}
    print("| step, per response | instructions | added by the report |\n|---|---|---|")
    for name in names:
        step = name.split(":")[0]
        added = per[name] - per[f"{step}: no report"]
        print(f"| {name} | {per[name]:,.0f} | {added:+,.0f} |")
    print(
        f"\n(run of {LONG} − run of {SHORT}) ÷ {LONG - SHORT}, each row on its own HPACK context (4096-byte "
        "table); every figure includes building the header list (a fresh UUID), which the differences cancel."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
