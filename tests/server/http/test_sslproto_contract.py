"""The private members of CPython's asyncio ``SSLProtocol`` (3.11) that ``server.http.handshake`` relies on,
checked against the running interpreter: a change in any of them fails here, loudly, not in production.

``GatewaySSLProtocol`` re-does ``SSLProtocol.__init__`` (without the 256 KiB buffer and ``wrap_bio``), so it must
set every attribute asyncio's sets; it overrides ``get_buffer``, ``buffer_updated``, ``_start_handshake``,
``_do_handshake``, ``resume_writing``, ``_check_handshake_timeout``, ``_on_handshake_complete`` and
``connection_lost``, and calls ``_fatal_error`` and the state enums. The loop's one receive buffer relies on the
selector transport's ``get_buffer``, ``recv_into``, ``buffer_updated`` running in one go. Then a real handshake
(trustme) through it, with its steps in threads and on the loop, gives the application what ``ssl=context``
gives."""

from __future__ import annotations

import asyncio
import inspect
import re
import ssl
from asyncio import selector_events, sslproto
from collections.abc import Callable
from typing import Any

import pytest
import trustme

from secure_orca.server.http import handshake
from secure_orca.server.http.handshake import GatewaySSLProtocol, HandshakePool, HandshakeStats, ReadBuffer

OVERRIDDEN = (
    "get_buffer",
    "buffer_updated",
    "_start_handshake",
    "_do_handshake",
    "resume_writing",
    "_check_handshake_timeout",
    "_on_handshake_complete",
    "connection_lost",
)
CALLED = (
    "_fatal_error",
    "_set_app_protocol",
    "_set_read_buffer_limits",
    "_set_write_buffer_limits",
    "_get_app_transport",
)


ASYNCIO_SSL: Any = sslproto.SSLProtocol  # typeshed describes only a part of these private classes
TRANSPORT: Any = getattr(selector_events, "_SelectorSocketTransport")  # noqa: B009


def source(function: Callable[..., Any]) -> str:
    return inspect.getsource(function)


def test_every_member_overridden_or_called_is_asyncios() -> None:
    for name in OVERRIDDEN + CALLED:
        assert callable(getattr(ASYNCIO_SSL, name, None)), name
    assert sslproto.SSLAgainErrors == handshake._AGAIN
    assert {"UNWRAPPED", "DO_HANDSHAKE", "WRAPPED"} <= set(sslproto.SSLProtocolState.__members__)
    assert "STATE_INIT" in sslproto.AppProtocolState.__members__
    assert handshake.READ_SIZE == 256 * 1024


def test_the_flow_the_overrides_step_into_is_asyncios() -> None:
    """Where asyncio calls what the subclass overrides, and what its ``_do_handshake`` does with the outcome."""
    assert "self._do_handshake()" in source(ASYNCIO_SSL._start_handshake)
    assert "self._check_handshake_timeout()" in source(ASYNCIO_SSL._start_handshake)
    updated = source(ASYNCIO_SSL.buffer_updated)  # re-done by the subclass: the same dispatch
    calls = ("self._incoming.write(self._ssl_buffer_view[:nbytes])", "_do_handshake()", "_do_read()", "_do_flush()")
    assert [updated.index(call) for call in calls] == sorted(updated.index(call) for call in calls)
    assert "self._do_shutdown()" in updated and "self._process_outgoing()" in source(ASYNCIO_SSL.resume_writing)
    step = source(ASYNCIO_SSL._do_handshake)
    assert re.search(r"self\._sslobj\.do_handshake\(\)\s+except SSLAgainErrors:\s+self\._process_outgoing\(\)", step)
    assert "self._on_handshake_complete(exc)" in step and "self._on_handshake_complete(None)" in step
    assert "self._outgoing.read()" in source(ASYNCIO_SSL.connection_lost)


def test_the_selector_transport_fills_the_buffer_and_reports_it_in_one_go() -> None:
    read = source(TRANSPORT._read_ready__get_buffer)
    order = [read.index(call) for call in ("get_buffer(-1)", "recv_into(buf)", "buffer_updated(nbytes)")]
    assert order == sorted(order)
    assert "await" not in read and "call_soon" not in read


def test_init_sets_every_attribute_asyncios_init_sets() -> None:
    async def both() -> tuple[set[str], set[str]]:
        loop = asyncio.get_running_loop()
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        theirs = ASYNCIO_SSL(loop, asyncio.Protocol(), context, None, server_side=True)
        ours = GatewaySSLProtocol(
            loop,
            asyncio.Protocol(),
            context,
            loop.create_future(),
            ReadBuffer(),
            HandshakePool(loop, 0),
            10.0,
            5.0,
            HandshakeStats(),
            lambda protocol: None,
        )
        return set(vars(theirs)), set(vars(ours))

    theirs, ours = asyncio.run(both())
    assert theirs <= ours, theirs - ours


async def handshake_through(threads: int | None) -> dict[str, Any]:
    """One handshake and one echo through ``GatewaySSLProtocol`` (asyncio's own with ``threads`` None); what the
    application sees."""
    ca = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost").configure_cert(server_context)
    server_context.set_alpn_protocols(["h2", "http/1.1"])
    client_context = ssl.create_default_context()
    ca.configure_trust(client_context)
    client_context.set_alpn_protocols(["h2"])
    loop = asyncio.get_running_loop()
    pool = HandshakePool(loop, threads or 0)
    buffer = ReadBuffer()
    seen: dict[str, Any] = {}
    done = loop.create_future()

    async def connected(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        ssl_object = writer.get_extra_info("ssl_object")
        seen.update(
            alpn=ssl_object.selected_alpn_protocol(),
            version=ssl_object.version(),
            peercert=writer.get_extra_info("peercert"),
            cipher=writer.get_extra_info("cipher") is not None,
            socket=writer.get_extra_info("socket") is not None,
        )
        writer.write(await reader.readexactly(5))
        await writer.drain()
        writer.close()
        done.set_result(None)

    def factory() -> GatewaySSLProtocol:
        app = asyncio.StreamReaderProtocol(asyncio.StreamReader(), connected)
        return GatewaySSLProtocol(
            loop, app, server_context, None, buffer, pool, 10.0, 5.0, HandshakeStats(), lambda p: None
        )

    if threads is None:
        server = await loop.create_server(
            lambda: asyncio.StreamReaderProtocol(asyncio.StreamReader(), connected), "127.0.0.1", 0, ssl=server_context
        )
    else:
        server = await loop.create_server(factory, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=client_context, server_hostname="localhost"
        )
        writer.write(b"hello")
        seen["echo"] = await reader.readexactly(5)
        await done
        writer.close()
    finally:
        server.close()
        pool.close()
    return seen


@pytest.mark.parametrize("threads", [0, 2])
def test_a_handshake_gives_the_application_what_ssl_context_gives(threads: int) -> None:
    seen = asyncio.run(handshake_through(threads))
    assert seen == asyncio.run(handshake_through(None))
    assert seen["echo"] == b"hello" and seen["alpn"] == "h2" and seen["version"] == "TLSv1.3"
