"""A test-only stand-in for vLLM's OpenAI server, run as its own process (hypercorn, plain HTTP/1.1 as vLLM's
uvicorn serves it), written from vLLM's code and docs (vllm-project/vllm 08408b80ee411889401fb304deeac22cf2cdafc6:
``vllm/entrypoints/openai/orca_metrics.py``, the completion and chat routers):

- ``POST /v1/completions`` and ``/v1/chat/completions``: JSON, or SSE with ``"stream": true`` (``data: {...}``
  per token, then ``data: [DONE]``); one token every ``--token-interval`` seconds, ``max_tokens`` of them;
- the load header ``endpoint-load-metrics`` only on a non-streaming response, when the request carries
  ``endpoint-load-metrics-format: text`` or ``json`` (any letter case of the value; vLLM reads the header with
  Starlette, so any letter case of the name too), to anyone: ``named_metrics.kv_cache_usage_perc`` and
  ``named_metrics.num_requests_waiting``, as Python prints floats;
- a client that leaves stops its generation at the next token (vLLM's ``with_cancellation``);
- ``GET /metrics`` (``vllm:kv_cache_usage_perc``, ``vllm:num_requests_waiting``, ``vllm:num_requests_running``),
  ``GET /v1/models``, errors as vLLM's ``ErrorResponse``;
- ``GET /stand-in/generations`` (not vLLM's): every generation's tokens, whether it was cancelled, when it ended
  (``time.monotonic``, one clock for every process of the machine) and the dialect headers it was sent.

KV-cache use is the running generations over ``--kv-capacity`` plus ``--busy`` (a fixed extra share, to make one
replica busier than another); generations beyond ``--max-num-seqs`` wait.

    python -m tests.live.vllm_like --port 8100    # serves until killed; prints "ready" when listening
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

from secure_orca.server.asgi import Receive, Scope, Send
from tests.live import standin_process

DIALECT = b"endpoint-load-metrics-format"
MODEL = "stand-in/vllm-like"


@dataclass
class Generation:
    path: str
    stream: bool
    tokens: int = 0
    cancelled: bool = False
    ended_at: float = 0.0
    dialect: list[list[str]] = field(default_factory=list)


class Engine:
    def __init__(self, token_interval: float, kv_capacity: int, max_num_seqs: int, busy: float) -> None:
        self.token_interval = token_interval
        self.kv_capacity = kv_capacity
        self.max_num_seqs = max_num_seqs
        self.busy = busy
        self.running = 0
        self.generations: list[Generation] = []
        self.slots = asyncio.Semaphore(max_num_seqs)

    @property
    def waiting(self) -> float:
        return float(max(0, self.running - self.max_num_seqs))

    @property
    def kv_cache_usage(self) -> float:
        return min(1.0, self.busy + min(self.running, self.max_num_seqs) / self.kv_capacity)

    def report(self, fmt: str) -> bytes | None:
        """vLLM's ``create_orca_header``: TEXT or JSON named metrics (any other format: none)."""
        metrics = {"kv_cache_usage_perc": self.kv_cache_usage, "num_requests_waiting": self.waiting}
        if fmt.lower() == "text":
            return ("TEXT " + ", ".join(f"named_metrics.{k}={v}" for k, v in metrics.items())).encode()
        if fmt.lower() == "json":
            return ("JSON " + json.dumps({"named_metrics": metrics})).encode()
        return None

    def metrics_text(self) -> bytes:
        lines = [
            "# TYPE vllm:kv_cache_usage_perc gauge",
            f'vllm:kv_cache_usage_perc{{model_name="{MODEL}"}} {self.kv_cache_usage}',
            "# TYPE vllm:num_requests_waiting gauge",
            f'vllm:num_requests_waiting{{model_name="{MODEL}"}} {self.waiting}',
            "# TYPE vllm:num_requests_running gauge",
            f'vllm:num_requests_running{{model_name="{MODEL}"}} {float(min(self.running, self.max_num_seqs))}',
        ]
        return ("\n".join(lines) + "\n").encode()


def error(code: int, message: str, kind: str = "BadRequestError") -> tuple[int, dict[str, Any]]:
    return code, {"error": {"message": message, "type": kind, "param": None, "code": code}}


async def read_json(receive: Receive) -> dict[str, Any] | None:
    body = b""
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    try:
        parsed = json.loads(body or b"{}")
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


async def send_json(send: Send, status: int, payload: Any, extra: list[tuple[bytes, bytes]] | None = None) -> None:
    body = json.dumps(payload).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *(extra or [])]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def lifespan(receive: Receive, send: Send) -> None:
    """The ASGI lifespan protocol, with nothing to start or stop."""
    while (await receive())["type"] != "lifespan.shutdown":
        await send({"type": "lifespan.startup.complete"})
    await send({"type": "lifespan.shutdown.complete"})


async def send_text(send: Send, body: bytes) -> None:
    """A 200 ``text/plain`` response (Prometheus' exposition format)."""
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": body})


class App:
    engine_class: ClassVar[type[Engine]] = Engine

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        path, method = scope["path"], scope["method"]
        if path == "/metrics":
            await send_text(send, self.engine.metrics_text())
        elif path == "/v1/models":
            await send_json(send, 200, {"object": "list", "data": [{"id": MODEL, "object": "model"}]})
        elif path == "/stand-in/generations":
            await send_json(send, 200, [asdict(g) for g in self.engine.generations])
        elif path in ("/v1/completions", "/v1/chat/completions") and method == "POST":
            await self.complete(scope, receive, send, chat=path.endswith("chat/completions"))
        else:
            await send_json(send, *error(404, f"{path} not found", "NotFoundError"))

    async def complete(self, scope: Scope, receive: Receive, send: Send, chat: bool) -> None:
        request = await read_json(receive)
        if request is None or not isinstance(request.get("max_tokens", 16), int):
            await send_json(send, *error(400, "request body must be a JSON object"))
            return
        dialect = [[n.decode(), v.decode()] for n, v in scope["headers"] if n.lower() == DIALECT]
        fmt = dialect[0][1] if dialect else ""
        stream = bool(request.get("stream"))
        generation = Generation(scope["path"], stream, dialect=dialect)
        self.engine.generations.append(generation)
        disconnected = asyncio.Event()

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            disconnected.set()

        watcher = asyncio.ensure_future(watch())
        self.engine.running += 1
        try:
            await self.generate(send, request, generation, disconnected, stream, chat, fmt)
        except OSError:
            generation.cancelled = True
        finally:
            self.engine.running -= 1
            watcher.cancel()
            generation.ended_at = time.monotonic()

    async def generate(
        self,
        send: Send,
        request: dict[str, Any],
        generation: Generation,
        disconnected: asyncio.Event,
        stream: bool,
        chat: bool,
        fmt: str,
    ) -> None:
        kind = "chat.completion" if chat else "text_completion"
        if stream:
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", b"text/event-stream; charset=utf-8")],
                }
            )
        text = []
        async with self.engine.slots:
            for i in range(int(request.get("max_tokens", 16))):
                try:
                    await asyncio.wait_for(disconnected.wait(), self.engine.token_interval)
                except TimeoutError:
                    pass
                else:
                    generation.cancelled = True  # vLLM aborts the request in the engine
                    return
                generation.tokens += 1
                token = f" t{i}"
                text.append(token)
                if stream:
                    delta = {"delta": {"content": token}} if chat else {"text": token}
                    chunk = {"object": f"{kind}.chunk", "model": MODEL, "choices": [{"index": 0, **delta}]}
                    body = f"data: {json.dumps(chunk)}\n\n".encode()
                    await send({"type": "http.response.body", "body": body, "more_body": True})
        if stream:
            await send({"type": "http.response.body", "body": b"data: [DONE]\n\n"})
            return
        content = "".join(text)
        choice = {"index": 0, "message": {"role": "assistant", "content": content}} if chat else {"text": content}
        usage = {"prompt_tokens": 1, "completion_tokens": generation.tokens}
        report = self.engine.report(fmt) if fmt else None
        extra = [(b"endpoint-load-metrics", report)] if report else []
        response = {"id": "cmpl-1", "object": kind, "model": MODEL, "choices": [choice], "usage": usage}
        await send_json(send, 200, response, extra)


def main(app: type[App] = App, doc: str = __doc__ or "") -> None:
    """Serve ``app`` over an Engine from the command line (plain HTTP/1.1, or TLS with --certfile/--keyfile,
    HTTP/1.1 only as uvicorn serves vLLM and SGLang), until killed."""
    parser = standin_process.parser(doc.splitlines()[0])
    parser.add_argument("--token-interval", type=float, default=0.05)
    parser.add_argument("--kv-capacity", type=int, default=64)
    parser.add_argument("--max-num-seqs", type=int, default=256)
    parser.add_argument("--busy", type=float, default=0.0, help="a fixed extra share of KV cache in use (0-1)")
    args = parser.parse_args()
    engine = app.engine_class(args.token_interval, args.kv_capacity, args.max_num_seqs, args.busy)
    standin_process.serve(app(engine), args)


if __name__ == "__main__":
    main()
