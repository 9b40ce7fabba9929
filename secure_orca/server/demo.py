"""A small kube-apiserver look-alike backend for experiments: discovery and health endpoints with kube's
response headers, and ``POST /apis/authentication.k8s.io/v1/selfsubjectreviews``, which answers who the
authentication layer says the caller is, as kube-apiserver does for ``kubectl auth whoami``. ``/work?cpu_ms=N``
burns N ms of CPU to create real load, only where the operator turned it on (``serve --demo-work``, see
``with_work``). It is a demo: no API objects."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any
from urllib.parse import parse_qs

from secure_orca.authn import review
from secure_orca.server.asgi import ASGIApp, Headers, Receive, Scope, Send, read_body, respond, respond_json
from secure_orca.server.authentication import current_user

MAX_CPU_MS = 1000
WORKERS = 2  # /work burns run in at most this many threads at once, never on the event loop
MAX_WAITING = 16  # more /work requests than this waiting for a thread are refused with 429
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
    """Spin on the CPU for ``milliseconds`` of process CPU time; returns the CPU seconds spent. Each slice of
    spinning ends by offering the GIL (``sleep(0)``): without that, a thread that wants it back (the event
    loop after each wake-up) waits a whole switch interval behind every burner, and a /healthz took 0.4 s."""
    start = time.process_time()
    deadline = start + milliseconds / 1000
    x = 0
    while time.process_time() < deadline:
        for i in range(1000):
            x ^= i
        time.sleep(0)
    return time.process_time() - start


def _kube_headers() -> list[tuple[bytes, bytes]]:
    return [
        (b"audit-id", str(uuid.uuid4()).encode()),
        (b"cache-control", b"no-cache, private"),
        (b"x-kubernetes-pf-flowschema-uid", _FLOW_SCHEMA_UID),
        (b"x-kubernetes-pf-prioritylevel-uid", _PRIORITY_LEVEL_UID),
    ]


def work_ms(query_string: bytes) -> float | None:
    """The ``cpu_ms`` of a /work query (default 10), or None unless it is the only parameter, given once,
    a number from 0 to MAX_CPU_MS (pure)."""
    query = parse_qs(query_string.decode("latin-1"), keep_blank_values=True)
    if set(query) - {"cpu_ms"} or len(query.get("cpu_ms", ["10"])) != 1:
        return None
    try:
        value = float(query.get("cpu_ms", ["10"])[0])
    except ValueError:
        return None
    return value if 0 <= value <= MAX_CPU_MS else None


def with_work(inner: ASGIApp) -> ASGIApp:
    """``inner`` plus ``/work?cpu_ms=N``: N ms of CPU burnt in a worker thread (at most WORKERS at once, at
    most MAX_WAITING queued, else 429), so the sampler sees real load while the event loop stays free. The
    status is always 200: no client can make this server count errors it did not have."""
    running = asyncio.Semaphore(WORKERS)
    waiting = 0

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        nonlocal waiting
        if scope["type"] != "http" or scope["path"] != "/work":
            await inner(scope, receive, send)
            return
        headers = _kube_headers()
        milliseconds = work_ms(scope.get("query_string", b""))
        if milliseconds is None:
            await respond_json(send, 400, {"kind": "Status", "status": "Failure", "code": 400}, headers)
            return
        if waiting >= MAX_WAITING:
            await respond_json(send, 429, {"kind": "Status", "status": "Failure", "code": 429}, headers)
            return
        waiting += 1
        try:
            async with running:
                spent = await asyncio.to_thread(burn_cpu, milliseconds)
        finally:
            waiting -= 1
        await respond_json(send, 200, {"cpu_ms": round(spent * 1000, 3)}, headers)

    return app


SELF_SUBJECT_REVIEWS = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
MAX_REVIEW_BODY = 64 * 1024


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


async def self_subject_review(scope: Scope, receive: Receive, send: Send, headers: Headers) -> None:
    """POST selfsubjectreviews: who the authentication layer says the caller is (kubectl auth whoami)."""
    if scope["method"] != "POST":
        await respond_json(send, 405, _status(405, "MethodNotAllowed", "only POST is allowed"), headers)
        return
    user = current_user(scope)
    if user is None:
        await respond_json(send, 500, _status(500, "InternalError", "missing user"), headers)
        return
    body = await read_body(receive, MAX_REVIEW_BODY)  # its content does not matter (JSON or protobuf)
    if body is None:  # the client left, or its body did not come in time (server.asgi.BodyDeadline answered)
        return
    if len(body) > MAX_REVIEW_BODY:
        await respond_json(send, 413, _status(413, "RequestEntityTooLarge", "the body is too large"), headers)
        return
    await respond_json(send, 201, review.self_subject_review(user), headers)


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
    elif path == SELF_SUBJECT_REVIEWS:
        await self_subject_review(scope, receive, send, headers)
    else:
        body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404}
        await respond_json(send, 404, body, headers)
