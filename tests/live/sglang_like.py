"""A test-only stand-in for SGLang's HTTP server, run as its own process (hypercorn; plain HTTP/1.1, or TLS with
``--certfile``/``--keyfile`` so that the probe can ask it directly), written from SGLang's code
(sgl-project/sglang 5b49fe622b0218973e43819b1114b3a429d797f9, ``python/sglang/srt/entrypoints/v1_loads.py``,
PR 16976, and ``GetLoadsReqOutput`` in ``python/sglang/srt/managers/io_struct.py``):

- ``GET /v1/loads``, to anyone (SGLang checks nothing): ``{"timestamp", "version", "dp_rank_count", "loads":
  [per rank: "dp_rank", "num_running_reqs", "num_waiting_reqs", "num_used_tokens", "max_total_num_tokens",
  "token_usage", "gen_throughput", "cache_hit_rate", "utilization", "max_running_requests", "num_total_reqs"],
  "aggregate": {"total_running_reqs", "total_waiting_reqs", "total_reqs", "avg_token_usage", "avg_throughput",
  "avg_utilization"}}``; ``?format=prometheus`` gives the same per rank as ``sglang_<field>{dp_rank="0"}`` gauges;
- ``POST /v1/completions`` and ``/v1/chat/completions`` (OpenAI's shapes, JSON or SSE) as the vLLM-like stand-in
  generates them (``tests/live/vllm_like.py``), but with no ORCA header whatever the request asks: SGLang has
  none;
- ``GET /stand-in/polls`` (not SGLang's): how many times ``/v1/loads`` was asked, and when (``time.monotonic``).

``token_usage`` is the running generations over ``--kv-capacity`` plus ``--busy`` (a fixed extra share, to make
one replica busier than another).

    python -m tests.live.sglang_like --port 30000    # serves until killed; prints "ready" when listening
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs

from secure_orca.server.asgi import Receive, Scope, Send
from tests.live import vllm_like
from tests.live.vllm_like import App as VllmLikeApp
from tests.live.vllm_like import Engine, send_json

VERSION = "0.0.0-stand-in"
MAX_TOTAL_TOKENS = 65536


class SglangEngine(Engine):
    def report(self, fmt: str) -> bytes | None:
        """SGLang attaches no report header, whatever the request asks."""
        return None


class App(VllmLikeApp):
    engine_class = SglangEngine

    def __init__(self, engine: Engine) -> None:
        super().__init__(engine)
        self.polls: list[float] = []  # when /v1/loads was asked (time.monotonic)

    def rank(self) -> dict[str, Any]:
        """One data-parallel rank's load, as ``get_loads`` lists it (None fields left out, as SGLang does)."""
        engine = self.engine
        running = min(engine.running, engine.max_num_seqs)
        waiting = int(engine.waiting)
        usage = round(engine.kv_cache_usage, 4)
        return {
            "dp_rank": 0,
            "num_running_reqs": running,
            "num_waiting_reqs": waiting,
            "num_used_tokens": int(usage * MAX_TOTAL_TOKENS),
            "max_total_num_tokens": MAX_TOTAL_TOKENS,
            "token_usage": usage,
            "gen_throughput": 0.0,
            "cache_hit_rate": 0.0,
            "utilization": usage,
            "max_running_requests": engine.max_num_seqs,
            "num_total_reqs": running + waiting,
        }

    def loads(self) -> dict[str, Any]:
        rank = self.rank()
        aggregate = {
            "total_running_reqs": rank["num_running_reqs"],
            "total_waiting_reqs": rank["num_waiting_reqs"],
            "total_reqs": rank["num_total_reqs"],
            "avg_token_usage": rank["token_usage"],
            "avg_throughput": rank["gen_throughput"],
            "avg_utilization": rank["utilization"],
        }
        return {
            "timestamp": datetime.now(UTC).isoformat(),
            "version": VERSION,
            "dp_rank_count": 1,
            "loads": [rank],
            "aggregate": aggregate,
        }

    def prometheus(self) -> bytes:
        """``_format_loads_prometheus``: each numeric field as a gauge per rank."""
        rank = self.rank()
        lines = []
        for name, value in rank.items():
            if name not in ("dp_rank", "num_total_reqs"):
                lines += [f"# TYPE sglang_{name} gauge", f'sglang_{name}{{dp_rank="0"}} {value}']
        return ("\n".join(lines) + "\n").encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await super().__call__(scope, receive, send)
            return
        path = scope["path"]
        if path == "/v1/loads" and scope["method"] == "GET":
            self.polls.append(time.monotonic())
            query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
            if query.get("format") == ["prometheus"]:
                headers = [(b"content-type", b"text/plain; version=0.0.4; charset=utf-8")]
                await send({"type": "http.response.start", "status": 200, "headers": headers})
                await send({"type": "http.response.body", "body": self.prometheus()})
                return
            await send_json(send, 200, self.loads())
        elif path == "/stand-in/polls":
            await send_json(send, 200, {"polls": len(self.polls), "at": self.polls})
        elif path in ("/metrics", "/stand-in/generations"):  # SGLang serves /metrics only with --enable-metrics
            await send_json(send, 404, {"detail": "Not Found"})
        else:
            await super().__call__(scope, receive, send)


def main() -> None:
    vllm_like.main(App, __doc__ or "")


if __name__ == "__main__":
    main()
