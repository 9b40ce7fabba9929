"""HTTP/2 and HTTP/1.1 over TLS on hypercorn 0.18.0: the only package that touches hypercorn's and h2's internals.

Subclasses, each constructed once per connection; no method is replaced on an instance, nothing process-wide:

- ``tls``: the server's ``SSLContext`` and the ASGI TLS extension hypercorn lacks;
- ``serve``: the accept loop, ``GatewayTCPServer`` (hypercorn's per-connection server) with ``ConnectionApp``,
  and the graceful GOAWAY it drives;
- ``rotation``: the graceful-close state machine and the notice to long-lived streams (pure);
- ``protocol``: ``GatewayH2Protocol``, the inbound pipeline (malformed → late DATA → BodyFlow → hypercorn), and
  ``GatewayH11Protocol``;
- ``flow``: ``BodyFlow``, request bodies bounded by flow control rather than by a blocking queue;
- ``control``: ``StreamControl``, what an application may do to its own HTTP/2 stream beyond ASGI (its unsent
  bytes, an immediate reset);
- ``connection``: ``GatewayH2Connection``, h2's connection with the outbound header blocks (the indexed
  encoder, the carried report, trailers-only responses).

The hypercorn internals the package relies on are listed and checked in ``tests/server/test_hypercorn_contract.py``.
"""
