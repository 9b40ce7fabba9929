"""A small kube-apiserver look-alike backend for experiments: discovery and health endpoints with kube's
response headers, and ``/work?cpu_ms=N`` that burns N ms of CPU (capped) to create real load.
It is a demo: no authentication, no API objects."""

from __future__ import annotations

import time
import uuid
from urllib.parse import parse_qs

from secure_orca.server.asgi import respond, respond_json
from secure_orca.server.middleware import Receive, Scope, Send

MAX_CPU_MS = 1000
_FLOW_SCHEMA_UID = str(uuid.uuid5(uuid.NAMESPACE_URL, "secure-orca/flowschema/global-default")).encode()
_PRIORITY_LEVEL_UID = str(uuid.uuid5(uuid.NAMESPACE_URL, "secure-orca/prioritylevel/global-default")).encode()
VERSION = {
    "major": "1",
    "minor": "38",
    "gitVersion": "v1.38.0-secure-orca-demo",
    "platform": "linux/amd64",
}
DISCOVERY = {
    "/api": {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []},
    "/apis": {"kind": "APIGroupList", "apiVersion": "v1", "groups": []},
    "/version": VERSION,
}


def burn_cpu(milliseconds: float) -> float:
    """Spin on the CPU for ``milliseconds`` of process CPU time; returns the CPU seconds spent."""
    start = time.process_time()
    deadline = start + milliseconds / 1000
    x = 0
    while time.process_time() < deadline:
        for i in range(1000):
            x ^= i
    return time.process_time() - start


def _kube_headers() -> list[tuple[bytes, bytes]]:
    return [
        (b"audit-id", str(uuid.uuid4()).encode()),
        (b"cache-control", b"no-cache, private"),
        (b"x-kubernetes-pf-flowschema-uid", _FLOW_SCHEMA_UID),
        (b"x-kubernetes-pf-prioritylevel-uid", _PRIORITY_LEVEL_UID),
    ]


def _query_number(query: dict[str, list[str]], name: str, default: float) -> float | None:
    try:
        return float(query.get(name, [str(default)])[0])
    except ValueError:
        return None


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    """The demo backend as an ASGI application."""
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] != "http":  # a WebSocket: closing before accepting makes the server answer 403
        await send({"type": "websocket.close", "code": 1008})
        return
    path = scope["path"]
    headers = _kube_headers()
    if path in ("/healthz", "/livez", "/readyz"):
        await respond(send, 200, b"ok", [(b"content-type", b"text/plain; charset=utf-8"), *headers])
    elif path in DISCOVERY:
        await respond_json(send, 200, DISCOVERY[path], headers)
    elif path == "/work":
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        cpu_ms = _query_number(query, "cpu_ms", 10)
        status = _query_number(query, "status", 200)
        if cpu_ms is None or status is None or cpu_ms < 0 or not 200 <= status <= 599:
            await respond_json(send, 400, {"kind": "Status", "status": "Failure", "code": 400}, headers)
            return
        spent = burn_cpu(min(cpu_ms, MAX_CPU_MS))
        await respond_json(send, int(status), {"cpu_ms": round(spent * 1000, 3)}, headers)
    else:
        body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404}
        await respond_json(send, 404, body, headers)
