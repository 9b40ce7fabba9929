"""The gateway's own refusals in the caller's dialect (pure): kube's ``Status``, or OpenAI's error object on a
route that says ``errors=openai``. Every layer that refuses before the proxy runs (authentication's 401, the
body deadline's 408) asks ``RouteDialects`` for the request's path, so an OpenAI client behind the gateway reads
every refusal as it reads its server's own."""

from __future__ import annotations

from collections.abc import Sequence
from http import HTTPStatus

DIALECTS = ("kube", "openai")
_KUBE_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    408: "Timeout",
    429: "TooManyRequests",
    502: "BadGateway",
    504: "Timeout",
}


def error_body(dialect: str, code: int, message: str = "", reason: str = "") -> dict[str, object]:
    """A refusal's JSON body: kube's ``Status`` (``reason`` given, else the status's usual one), or OpenAI's error
    object as vLLM's ``ErrorResponse`` shapes it (``{"error": {"message", "type", "param", "code"}}``, the type
    named after the status as vLLM names it, e.g. ``BadRequestError``; vllm-project/vllm
    08408b80ee411889401fb304deeac22cf2cdafc6, vllm/entrypoints/openai/protocol.py)."""
    phrase = HTTPStatus(code).phrase
    if dialect == "openai":
        kind = phrase.replace(" ", "").replace("-", "") + ("" if phrase.endswith("Error") else "Error")
        return {"error": {"message": message or phrase, "type": kind, "param": None, "code": code}}
    body: dict[str, object] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure"}
    if message:
        body["message"] = message
    if reason or code in _KUBE_REASONS:
        body["reason"] = reason or _KUBE_REASONS[code]
    body["code"] = code
    return body


class RouteDialects:
    """Which dialect a path's refusals are in: the longest ``--proxy`` prefix it falls under, else kube's."""

    def __init__(self, routes: Sequence[tuple[str, str]] = ()) -> None:
        self.routes = sorted(routes, key=lambda r: len(r[0]), reverse=True)  # the proxy's order (ProxyApp.route)

    def of(self, path: str) -> str:
        for prefix, dialect in self.routes:
            if path == prefix or path.startswith(prefix.rstrip("/") + "/"):
                return dialect
        return "kube"


KUBE_ONLY = RouteDialects()
