"""The hypercorn internals server/adapter.py relies on, checked against the installed hypercorn, and the
graceful-close state machine's table (pure)."""

from __future__ import annotations

import asyncio
import importlib.metadata
import inspect
from collections.abc import Callable

import pytest
from hypercorn.app_wrappers import ASGIWrapper
from hypercorn.asyncio.tcp_server import TCPServer
from hypercorn.asyncio.worker_context import WorkerContext
from hypercorn.config import Config
from hypercorn.protocol import ProtocolWrapper
from hypercorn.protocol.h2 import H2Protocol

from secure_orca.server import adapter
from secure_orca.server.adapter import TRANSITIONS, GracefulClose, Phase, Step


def assigned_in(function: Callable[..., object], attribute: str) -> bool:
    return f"self.{attribute} =" in inspect.getsource(function)


def test_installed_hypercorn_is_the_pinned_one() -> None:
    assert importlib.metadata.version("hypercorn") == adapter.HYPERCORN_VERSION


def test_another_hypercorn_refuses_to_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(adapter.importlib.metadata, "version", lambda name: "0.99.0")
    with pytest.raises(adapter.HypercornVersionError, match=r"hypercorn 0\.99\.0 is installed; .*0\.18\.0"):
        adapter.check_hypercorn()


def test_tcp_server_is_constructed_as_we_construct_it() -> None:
    params = list(inspect.signature(TCPServer.__init__).parameters)
    assert params == ["self", "app", "loop", "config", "context", "state", "reader", "writer"]
    assert assigned_in(TCPServer.__init__, "writer")
    assert assigned_in(TCPServer.run, "protocol")  # the ProtocolWrapper, once the connection starts
    assert inspect.iscoroutinefunction(TCPServer.protocol_send)
    assert inspect.iscoroutinefunction(TCPServer._close)


def test_protocol_wrapper_and_h2_protocol_expose_what_we_read() -> None:
    assert assigned_in(ProtocolWrapper.__init__, "protocol")
    assert assigned_in(H2Protocol.__init__, "connection")
    assert list(inspect.signature(H2Protocol._create_stream).parameters) == ["self", "request"]
    assert inspect.iscoroutinefunction(H2Protocol._create_stream)


def test_worker_context_and_asgi_wrapper() -> None:
    async def app(scope: object, receive: object, send: object) -> None:
        return None

    async def check() -> None:
        context = WorkerContext(None)
        await context.terminated.set()
        assert context.terminated.is_set()

    asyncio.run(check())
    assert ASGIWrapper(app).app is app
    config = Config()
    assert hasattr(config, "backlog") and hasattr(config, "ssl_handshake_timeout")


# ---- the graceful-close table (pure) --------------------------------------------------------------------------


def test_the_happy_path_reaches_closed() -> None:
    close = GracefulClose()
    assert [close.advance(s) for s in (Step.ROTATE, Step.GRACE_ELAPSED, Step.DRAINED)] == [True, True, True]
    assert close.phase is Phase.CLOSED


@pytest.mark.parametrize("phase", list(Phase))
@pytest.mark.parametrize("step", list(Step))
def test_only_listed_transitions_are_taken(phase: Phase, step: Step) -> None:
    close = GracefulClose()
    close.phase = phase
    taken = close.advance(step)
    assert taken == ((phase, step) in TRANSITIONS)
    assert close.phase is (TRANSITIONS[(phase, step)] if taken else phase)


def test_closed_is_final_and_the_peer_can_close_from_any_open_phase() -> None:
    assert not [key for key in TRANSITIONS if key[0] is Phase.CLOSED]
    assert {p for p in Phase if p is not Phase.CLOSED} == {p for p, s in TRANSITIONS if s is Step.PEER_CLOSED}


def test_rotation_starts_once() -> None:
    close = GracefulClose()
    assert close.advance(Step.ROTATE) and not close.advance(Step.ROTATE)


def test_what_body_flow_and_the_connection_end_rely_on() -> None:
    """``BodyFlow`` (issue 21 rows 9 and 10): HTTP/2 streams take their queue size from the protocol's config,
    put bodies through ``app_put`` (the queue's bound ``put``), and a closed connection's streams go through
    ``_close_stream``; ``TLSAwareTCPServer._read_data`` stops ``idle_task`` once hypercorn's reader returns."""
    from hypercorn.asyncio.task_group import TaskGroup
    from hypercorn.protocol.h2 import StreamBuffer
    from hypercorn.protocol.http_stream import HTTPStream

    assert Config().max_app_queue_size == 10
    assert "asyncio.Queue(config.max_app_queue_size)" in inspect.getsource(TaskGroup.spawn_app)
    assert "return app_queue.put" in inspect.getsource(TaskGroup.spawn_app)
    assert "self.app_put = await self.task_group.spawn_app(" in inspect.getsource(HTTPStream.handle)
    assert "HTTPStream(\n                self.app,\n                self.config," in inspect.getsource(
        H2Protocol._create_stream
    )
    assert list(inspect.signature(H2Protocol._close_stream).parameters) == ["self", "stream_id"]
    assert "self.closed = True" in inspect.getsource(H2Protocol.handle)
    assert inspect.iscoroutinefunction(StreamBuffer.close) and inspect.iscoroutinefunction(H2Protocol._flush)
    assert "self.stream_buffers: dict[int, StreamBuffer] = {}" in inspect.getsource(H2Protocol.__init__)
    assert "await self._read_data()" in inspect.getsource(TCPServer.run)
    assert "self.idle_task = AsyncioSingleTask()" in inspect.getsource(TCPServer.__init__)


def test_what_stream_control_relies_on() -> None:
    """``StreamControl`` (issue 26 row 4): the application's scope is the very dict ``HTTPStream`` holds, a
    stream's unsent body is its ``StreamBuffer.buffer``, trailers wait on ``_is_empty`` (set only when the
    sender empties the buffer), and the sender drops the buffer of a stream h2 has closed once unblocked."""
    from hypercorn.protocol.h2 import StreamBuffer
    from hypercorn.protocol.http_stream import HTTPStream

    assert "self.app, self.config, self.scope, self.app_send" in inspect.getsource(HTTPStream.handle)
    assert "self.buffer = bytearray()" in inspect.getsource(StreamBuffer.__init__)
    assert "await self._is_empty.wait()" in inspect.getsource(StreamBuffer.drain)
    assert "await self._is_empty.set()" in inspect.getsource(StreamBuffer.pop)
    trailers = inspect.getsource(H2Protocol.stream_send)
    assert "elif isinstance(event, Trailers):" in trailers and ".drain()" in trailers
    sender = inspect.getsource(H2Protocol._send_data)
    assert "h2.exceptions.StreamClosedError" in sender and "del self.stream_buffers[stream_id]" in sender
    assert "self.priority = priority.PriorityTree()" in inspect.getsource(H2Protocol.__init__)
