"""A test-only stand-in for Triton Inference Server's HTTP endpoint with the TensorRT-LLM backend, run as its own
process (hypercorn, HTTP/1.1), written from Triton's code (triton-inference-server/server
e1db8a603d863b1317ee859bdeea2be19959462e: ``src/orca_http.cc``, ``src/http_server.cc``; the ORCA header came with
PR 7839, commit 928fd7ec1) and its client docs ("ORCA Header Metrics"):

- ``POST /v2/models/{model}/generate`` (JSON) and ``/generate_stream`` (SSE, ``data: {...}`` per token): Triton's
  generate extension; one token every ``--token-interval`` seconds, ``max_tokens`` (or ``parameters.max_tokens``);
- the load header ``endpoint-load-metrics`` when the request carries ``endpoint-load-metrics-format`` (the name in
  any letter case, as libevhtp finds headers) with the value exactly ``text`` or ``json`` (Triton compares them as
  they are: ``TEXT`` gets nothing), on both generate routes, streaming too (``StartResponse`` adds it before the
  first byte), to anyone: ``named_metrics.kv_cache_utilization`` (used blocks over max blocks) and
  ``named_metrics.max_token_capacity`` (max blocks times tokens per block); TEXT prints the utilization as C++'s
  ``std::to_string`` does (six decimals), JSON as a compact object;
- ``GET /metrics``: ``nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=...}`` with ``max``, ``used``,
  ``free`` and ``tokens_per`` (Triton serves them on port 8002; here on the same port);
- ``GET /v2/health/ready``, ``GET /v2/models/{model}``; errors as Triton's ``{"error": "..."}``.

Each running generation holds ``--blocks-per-request`` KV-cache blocks of ``--max-blocks``; ``--busy`` adds a fixed
number of used blocks. Real Triton's HTTP endpoint has no TLS; ``--certfile``/``--keyfile`` serve it over TLS only
so that ``secure-orca probe`` (TLS only) can audit the stand-in alone.

    python -m tests.live.triton_like --port 8000    # serves until killed; prints "ready" when listening
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

from secure_orca.server.asgi import Receive, Scope, Send
from tests.live import standin_process
from tests.live.vllm_like import lifespan, read_json, send_json, send_text

DIALECT = b"endpoint-load-metrics-format"
MODEL = "tensorrt_llm"
_GENERATE = re.compile(r"/v2/models/([A-Za-z0-9_.\-]+)/(generate|generate_stream)")


class Engine:
    def __init__(self, max_blocks: int, tokens_per_block: int, blocks_per_request: int, busy: int) -> None:
        self.max_blocks = max_blocks
        self.tokens_per_block = tokens_per_block
        self.blocks_per_request = blocks_per_request
        self.busy = busy
        self.running = 0

    @property
    def used_blocks(self) -> int:
        return min(self.max_blocks, self.busy + self.running * self.blocks_per_request)

    def report(self, fmt: str) -> bytes | None:
        """``OrcaKVMetricHeader``: ``text`` or ``json`` exactly; any other value: no header (Triton logs an error)."""
        utilization = self.used_blocks / self.max_blocks if self.max_blocks > 0 else 0.0
        capacity = self.max_blocks * self.tokens_per_block
        if fmt == "text":
            return (
                f"TEXT named_metrics.kv_cache_utilization={utilization:.6f}, "
                f"named_metrics.max_token_capacity={capacity}".encode()
            )
        if fmt == "json":
            body = {"named_metrics": {"kv_cache_utilization": utilization, "max_token_capacity": capacity}}
            return ("JSON " + json.dumps(body, separators=(",", ":"))).encode()
        return None

    def metrics_text(self) -> bytes:
        labels = f'model="{MODEL}",version="1"'
        values = {
            "max": self.max_blocks,
            "free": self.max_blocks - self.used_blocks,
            "used": self.used_blocks,
            "tokens_per": self.tokens_per_block,
        }
        lines = ["# TYPE nv_trt_llm_kv_cache_block_metrics gauge"]
        family = "nv_trt_llm_kv_cache_block_metrics"
        lines += [f'{family}{{kv_cache_block_type="{k}",{labels}}} {v}' for k, v in values.items()]
        return ("\n".join(lines) + "\n").encode()


def error(code: int, message: str) -> tuple[int, dict[str, Any]]:
    return code, {"error": message}


class App:
    def __init__(self, engine: Engine, token_interval: float) -> None:
        self.engine = engine
        self.token_interval = token_interval

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        path, method = scope["path"], scope["method"]
        generate = _GENERATE.fullmatch(path)
        if path == "/metrics":
            await send_text(send, self.engine.metrics_text())
        elif path == "/v2/health/ready":
            await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"0")]})
            await send({"type": "http.response.body", "body": b""})
        elif path == f"/v2/models/{MODEL}":
            await send_json(send, 200, {"name": MODEL, "versions": ["1"], "platform": "tensorrt_llm"})
        elif generate and method != "POST":
            await send_json(send, *error(405, "Method Not Allowed"))
        elif generate and generate.group(1) == MODEL:
            await self.generate(scope, receive, send, stream=generate.group(2) == "generate_stream")
        else:
            await send_json(send, *error(404, "Not Found"))

    async def generate(self, scope: Scope, receive: Receive, send: Send, stream: bool) -> None:
        request = await read_json(receive)
        if request is None:
            await send_json(send, *error(400, "failed to parse the request JSON buffer"))
            return
        count = request.get("max_tokens", (request.get("parameters") or {}).get("max_tokens", 8))
        if not isinstance(count, int) or not 0 <= count <= 4096:
            await send_json(send, *error(400, "max_tokens must be an integer"))
            return
        asked = next((v.decode("latin-1") for n, v in scope["headers"] if n.lower() == DIALECT), None)
        self.engine.running += 1
        try:
            report = self.engine.report(asked) if asked is not None else None  # when the response starts
            extra = [(b"endpoint-load-metrics", report)] if report else []
            if not stream:
                await asyncio.sleep(self.token_interval * count)
                text = "".join(f" t{i}" for i in range(count))
                body = {"model_name": MODEL, "model_version": "1", "text_output": text}
                await send_json(send, 200, body, extra)
                return
            kind = (b"content-type", b"text/event-stream; charset=utf-8")
            await send({"type": "http.response.start", "status": 200, "headers": [*extra, kind]})
            for i in range(count):
                await asyncio.sleep(self.token_interval)
                chunk = {"model_name": MODEL, "model_version": "1", "text_output": f" t{i}"}
                await send(
                    {"type": "http.response.body", "body": f"data: {json.dumps(chunk)}\n\n".encode(), "more_body": True}
                )
            await send({"type": "http.response.body", "body": b""})
        finally:
            self.engine.running -= 1


def main() -> None:
    parser = standin_process.parser(__doc__.splitlines()[0])
    parser.add_argument("--token-interval", type=float, default=0.01)
    parser.add_argument("--max-blocks", type=int, default=512)
    parser.add_argument("--tokens-per-block", type=int, default=64)
    parser.add_argument("--blocks-per-request", type=int, default=8)
    parser.add_argument("--busy", type=int, default=0, help="KV-cache blocks in use besides the running requests")
    args = parser.parse_args()
    engine = Engine(args.max_blocks, args.tokens_per_block, args.blocks_per_request, args.busy)
    standin_process.serve(App(engine, args.token_interval), args)


if __name__ == "__main__":
    main()
