"""HTTP/2 and HTTP/1.1 over TLS on hypercorn 0.18.0: the only package that touches hypercorn's and h2's internals.

Subclasses, each constructed once per connection; no method is replaced on an instance, nothing process-wide:

- ``tls``: the server's ``SSLContext`` and the ASGI TLS extension hypercorn lacks;
- ``accept``: the accept loop (alone or in turn with sibling workers), each connection's handshake under the
  caps, and what to give up when descriptors run short;
- ``handshake``: ``GatewaySSLProtocol``, asyncio's ``SSLProtocol`` without a buffer or ``SSLObject`` before the
  first bytes, with a ClientHello deadline and its handshake steps in ``HandshakePool``'s threads (the CPython
  members it relies on: ``tests/server/http/test_sslproto_contract.py``);
- ``pending``: the caps on handshakes not yet complete, per address and in total (pure);
- ``serve``: ``GatewayTCPServer`` (hypercorn's per-connection server) with ``ConnectionApp``,
  and the graceful GOAWAY it drives;
- ``rotation``: the graceful-close state machine and the notice to long-lived streams (pure);
- ``protocol``: ``GatewayH2Protocol``, the inbound pipeline (malformed → late DATA → BodyFlow → hypercorn), and
  ``GatewayH11Protocol``;
- ``flow``: ``BodyFlow``, request bodies bounded by flow control rather than by a blocking queue;
- ``control``: ``StreamControl``, what an application may do to its own HTTP/2 stream beyond ASGI (its unsent
  bytes, an immediate reset);
- ``connection``: ``GatewayH2Connection``, h2's connection with the outbound header blocks (the indexed
  encoder, the carried report, trailers-only responses).

The hypercorn internals the package relies on are listed and checked in
``tests/server/http/test_hypercorn_contract.py``.
"""
