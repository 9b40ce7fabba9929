"""The hypercorn and h2 internals ``secure_orca/server/http`` relies on, checked against the installed versions,
and the graceful-close state machine's table (pure).

The package subclasses four classes and constructs each once per connection; every name below is one it
overrides, calls or reads:

- ``TCPServer`` (``serve.GatewayTCPServer``): ``__init__``, ``run`` (ours, building our protocol where
  hypercorn's builds ``ProtocolWrapper``), ``protocol_send``, ``_read_data``, ``_close``, ``idle_task``,
  ``_idle_timeout``, ``writer``; it uses its protocol only through ``initiate`` and ``handle``;
- ``H2Protocol`` (``protocol.GatewayH2Protocol``): ``__init__``, ``handle``, ``_handle_events`` (the one
  dispatch), ``_create_stream``, ``_close_stream``, ``_flush``, ``streams``, ``stream_buffers``, ``closed``,
  ``connection`` (with the settings it gives h2's connection);
- ``H11Protocol`` (``protocol.GatewayH11Protocol``): ``_check_protocol``, the only place that switches to HTTP/2;
- h2's ``H2Connection`` (``connection.GatewayH2Connection``): ``send_headers``, ``encoder``, ``config``;
- and, read by ``flow.BodyFlow``: ``HTTPStream`` (``scope``, ``closed``, ``handle``), ``TaskGroup.spawn_app``
  (the stream's scope is the application's, its queue sized by ``max_app_queue_size``).
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import inspect
import re
from collections.abc import Callable
from pathlib import Path

import h2.connection
import pytest
from hypercorn.app_wrappers import ASGIWrapper
from hypercorn.asyncio.task_group import TaskGroup
from hypercorn.asyncio.tcp_server import TCPServer
from hypercorn.asyncio.worker_context import WorkerContext
from hypercorn.config import Config
from hypercorn.protocol import ProtocolWrapper, h11
from hypercorn.protocol.h2 import H2Protocol, StreamBuffer
from hypercorn.protocol.h11 import H11Protocol
from hypercorn.protocol.http_stream import HTTPStream

from secure_orca.server.http import serve
from secure_orca.server.http.connection import GatewayH2Connection
from secure_orca.server.http.protocol import GatewayH2Protocol, GatewayH11Protocol
from secure_orca.server.http.rotation import TRANSITIONS, GracefulClose, Phase, Step


def assigned_in(function: Callable[..., object], attribute: str) -> bool:
    return f"self.{attribute} =" in inspect.getsource(function)


def parameters(function: Callable[..., object]) -> list[str]:
    return list(inspect.signature(function).parameters)


def test_installed_hypercorn_is_the_pinned_one() -> None:
    assert importlib.metadata.version("hypercorn") == serve.HYPERCORN_VERSION


def test_another_hypercorn_refuses_to_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(serve.importlib.metadata, "version", lambda name: "0.99.0")
    with pytest.raises(serve.HypercornVersionError, match=r"hypercorn 0\.99\.0 is installed; .*0\.18\.0"):
        serve.check_hypercorn()


def test_tcp_server_is_constructed_as_we_construct_it() -> None:
    params = parameters(TCPServer.__init__)
    assert params == ["self", "app", "loop", "config", "context", "state", "reader", "writer"]
    assert assigned_in(TCPServer.__init__, "writer")
    assert "self.idle_task = AsyncioSingleTask()" in inspect.getsource(TCPServer.__init__)
    assert inspect.iscoroutinefunction(TCPServer.protocol_send)
    assert inspect.iscoroutinefunction(TCPServer._close)
    assert inspect.iscoroutinefunction(TCPServer._idle_timeout)


def test_our_run_is_hypercorns_with_our_protocol() -> None:
    """``GatewayTCPServer.run`` takes the place of hypercorn's: the same steps, in the same order, with our
    protocol where hypercorn builds ``ProtocolWrapper`` from the same parts, and one step more: a connection
    lost before it runs has no socket, and ends there (hypercorn's raises AttributeError on it)."""
    ours = inspect.getsource(serve.GatewayTCPServer.run)
    read, guard, parse = (
        ours.find(step) for step in ('get_extra_info("socket")', "if socket is None:", "socket.family")
    )
    assert -1 < read < guard < parse
    source = inspect.getsource(TCPServer.run)
    assert "if socket is None" not in source  # still ours alone
    steps = [
        "parse_socket_addr(socket.family, socket.getpeername())",
        "parse_socket_addr(socket.family, socket.getsockname())",
        "alpn_protocol = ssl_object.selected_alpn_protocol()",
        "async with TaskGroup(self.loop) as task_group:",
        "self._task_group = task_group",
        "self.protocol = ProtocolWrapper(",
        "await self.protocol.initiate()",
        "await self.idle_task.restart(task_group, self._idle_timeout)",
        "await self._read_data()",
        "except OSError:",
        "await self._close()",
    ]
    assert [source.find(step) for step in steps] == sorted(source.find(step) for step in steps)
    assert all(step in source for step in steps)
    built = re.search(r"ProtocolWrapper\((.*?)\n\s*\)", source, re.DOTALL)
    assert built is not None
    assert [arg.strip() for arg in built.group(1).split(",") if arg.strip()] == [
        "self.app",
        "self.config",
        "self.context",
        "task_group",
        "ConnectionState(self.state)",
        "ssl",
        "client",
        "server",
        "self.protocol_send",
        "alpn_protocol",
    ]
    wrapper = inspect.getsource(ProtocolWrapper.__init__)
    for protocol in ("H2Protocol", "H11Protocol"):  # from those parts, in our order
        built = re.search(protocol + r"\((.*?)\n\s*\)", wrapper, re.DOTALL)
        assert built is not None
        assert [arg.strip() for arg in built.group(1).split(",") if arg.strip()] == [
            "self.app",
            "self.config",
            "self.context",
            "self.task_group",
            "self.state",
            "self.ssl",
            "self.client",
            "self.server",
            "self.send",
        ]
    assert parameters(H2Protocol.__init__) == parameters(H11Protocol.__init__) == parameters(GatewayH2Protocol.__init__)


def test_the_tcp_server_uses_its_protocol_only_through_initiate_and_handle() -> None:
    """So the protocol itself can stand where hypercorn puts its ``ProtocolWrapper``, which adds nothing else
    than switching HTTP/1.1 to HTTP/2, raised only from ``H11Protocol._check_protocol`` (ours never raises)."""
    uses = set(re.findall(r"self\.protocol\.(\w+)", inspect.getsource(TCPServer)))
    assert uses == {"initiate", "handle"}
    wrapper = inspect.getsource(ProtocolWrapper.handle)
    assert "except H2ProtocolAssumedError" in wrapper and "except H2CProtocolRequiredError" in wrapper
    raised = re.findall(r"raise (H2\w*Error)", inspect.getsource(h11))
    assert sorted(raised) == ["H2CProtocolRequiredError", "H2ProtocolAssumedError"]
    check = inspect.getsource(H11Protocol._check_protocol)
    assert "raise H2CProtocolRequiredError" in check and "raise H2ProtocolAssumedError" in check
    assert "await self._check_protocol(event)" in inspect.getsource(H11Protocol._handle_events)
    assert parameters(H11Protocol._check_protocol) == parameters(GatewayH11Protocol._check_protocol)


def test_h2_protocol_exposes_what_we_override_and_read() -> None:
    for name in ("handle", "_handle_events", "_create_stream", "_close_stream", "_flush"):
        assert inspect.iscoroutinefunction(getattr(H2Protocol, name)), name
        assert parameters(getattr(H2Protocol, name)) == parameters(getattr(GatewayH2Protocol, name)), name
    init = inspect.getsource(H2Protocol.__init__)
    assert "self.connection = h2.connection.H2Connection(" in init
    # What hypercorn sets on h2's connection: the settings (GatewayH2Connection takes them), and a class
    # constant h2 4.x never reads (its only occurrence is its definition).
    assert sorted(re.findall(r"self\.connection\.(\w+) =", init)) == [
        "DEFAULT_MAX_INBOUND_FRAME_SIZE",
        "local_settings",
    ]
    assert inspect.getsource(h2.connection).count("DEFAULT_MAX_INBOUND_FRAME_SIZE") == 1
    assert "self.streams: dict[int, HTTPStream | WSStream] = {}" in init
    assert "self.stream_buffers: dict[int, StreamBuffer] = {}" in init
    assert "self.streams.pop(stream_id)" in inspect.getsource(H2Protocol._close_stream)
    assert "self.closed = True" in inspect.getsource(H2Protocol.handle)
    assert "await self._handle_events(events)" in inspect.getsource(H2Protocol.handle)
    assert inspect.iscoroutinefunction(StreamBuffer.close)


def test_hypercorn_sends_header_blocks_as_our_send_headers_takes_them() -> None:
    """Responses as ``send_headers(stream_id, [(":status", ...), *headers])``, trailers with ``end_stream=True``;
    ``GatewayH2Connection.send_headers`` keeps h2's signature."""
    sending = inspect.getsource(H2Protocol.stream_send)
    assert '[(b":status", b"%d" % event.status_code)]\n                    + event.headers' in sending
    assert "self.connection.send_headers(event.stream_id, event.headers, end_stream=True)" in sending
    assert parameters(h2.connection.H2Connection.send_headers) == parameters(GatewayH2Connection.send_headers)


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


def test_what_body_flow_and_the_connection_end_rely_on() -> None:
    """``BodyFlow``: HTTP/2 streams take their queue size from the protocol's config, the application gets the
    stream's own scope (the key BodyFlow shares with the application's ``receive``), and a closed connection's
    streams go through ``_close_stream``; ``GatewayTCPServer._read_data`` stops ``idle_task`` once hypercorn's
    reader returns."""
    assert Config().max_app_queue_size == 10
    spawn = inspect.getsource(TaskGroup.spawn_app)
    assert "asyncio.Queue(config.max_app_queue_size)" in spawn
    assert "scope,\n            app_queue.get," in spawn
    stream = inspect.getsource(HTTPStream.handle)
    assert (
        "self.app_put = await self.task_group.spawn_app(\n                    self.app, self.config, self.scope,"
        in stream
    )
    assert "self.scope = {" in stream and "if self.closed:" in stream
    assert "HTTPStream(\n                self.app,\n                self.config," in inspect.getsource(
        H2Protocol._create_stream
    )
    assert "await self._read_data()" in inspect.getsource(TCPServer.run)


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


def test_what_stream_control_relies_on() -> None:
    """``StreamControl`` (issue 26 row 4): the application's scope is the very dict ``HTTPStream`` holds, a
    stream's unsent body is its ``StreamBuffer.buffer``, trailers wait on ``_is_empty`` (set only when the
    sender empties the buffer), and the sender drops the buffer of a stream h2 has closed once unblocked."""
    assert "self.app, self.config, self.scope, self.app_send" in inspect.getsource(HTTPStream.handle)
    assert "self.buffer = bytearray()" in inspect.getsource(StreamBuffer.__init__)
    assert "await self._is_empty.wait()" in inspect.getsource(StreamBuffer.drain)
    assert "await self._is_empty.set()" in inspect.getsource(StreamBuffer.pop)
    trailers = inspect.getsource(H2Protocol.stream_send)
    assert "elif isinstance(event, Trailers):" in trailers and ".drain()" in trailers
    sender = inspect.getsource(H2Protocol._send_data)
    assert "h2.exceptions.StreamClosedError" in sender and "del self.stream_buffers[stream_id]" in sender
    assert "self.priority = priority.PriorityTree()" in inspect.getsource(H2Protocol.__init__)


def test_no_method_is_replaced_on_an_instance() -> None:
    """The package subclasses: it never patches an object hypercorn or h2 built (a method set on an instance, a
    class swapped) and never reaches an object through a bound method."""
    import secure_orca

    patching = re.compile(r"__dict__\[|setattr\(|method-assign|__self__|__class__ =")
    found = [
        f"{path.name}:{number}"
        for path in sorted((Path(secure_orca.__file__).parent / "server").rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if patching.search(line)
    ]
    assert found == []
