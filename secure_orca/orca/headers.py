"""Every header name the gateway speaks, defined once (pure): ORCA's, and kube's standard requestheader names."""

from __future__ import annotations

import itertools

REPORT = "endpoint-load-metrics"  # the TEXT/JSON/BIN report a server attaches to a response
REPORT_BIN = "endpoint-load-metrics-bin"  # legacy gRPC form (base64 proto); wins over REPORT in Envoy
OPTIN = "endpoint-load-metrics-request"  # the opt-in a load balancer sends (KEP-6315)
REPORT_JSON = "endpoint-load-metrics-json"  # a JSON report under its own name, read by older Envoys
ORCA_HEADERS = frozenset({REPORT, REPORT_BIN, REPORT_JSON})  # what the server strips from any backend
ORCA_HEADERS_BYTES = frozenset(name.encode() for name in ORCA_HEADERS)
OPTIN_BYTES = OPTIN.encode()


def spellings(name: bytes) -> frozenset[bytes]:
    """``name`` with each ``-`` kept or written ``_``: how a server that maps ``_`` to ``-`` (CGI, WSGI, some
    proxies) could read a header. Precomputed, so the request path pays one set lookup per header."""
    parts = name.split(b"-")
    return frozenset(
        parts[0] + b"".join(sep + part for sep, part in zip(seps, parts[1:], strict=True))
        for seps in itertools.product((b"-", b"_"), repeat=len(parts) - 1)
    )


OPTIN_SPELLINGS = spellings(OPTIN_BYTES)  # one rule for every reader of the opt-in (middleware, audit)

# kube-apiserver's standard --requestheader-* names (what the aggregator and a front proxy send).
USERNAME_HEADERS = ("X-Remote-User",)
UID_HEADERS = ("X-Remote-Uid",)
GROUP_HEADERS = ("X-Remote-Group",)
EXTRA_PREFIXES = ("X-Remote-Extra-",)
