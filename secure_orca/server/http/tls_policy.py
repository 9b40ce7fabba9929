"""The handshake's costs that a client may choose, bounded where Python's ``ssl`` has no knob for them.

Python 3.11's ``ssl.SSLContext`` cannot restrict the key-exchange groups (``set_ecdh_curve`` sets exactly one
group on OpenSSL 3, and not X25519) nor turn the server's session cache off. OpenSSL can
(``SSL_CTX_set1_groups_list`` and ``SSL_CTX_set_session_cache_mode``, both ``SSL_CTX_ctrl`` calls), so this
module makes those calls through ctypes, on the ``SSL_CTX`` of the context, in the very libssl that Python's
``_ssl`` is linked against (``dlsym`` on ``_ssl``'s handle resolves its dependencies' symbols). The ``SSL_CTX``
pointer is the first field after the object header of CPython's ``PySSLContext`` (Modules/_ssl.c, unchanged
since 3.x began); it is trusted only once ``SSL_CTX_get_options`` through it returns the context's own
``options``, and every setting is read back. Any mismatch refuses to start (``TLSPolicyError``).

Groups: exactly Go's crypto/tls defaults without post-quantum hybrids, which OpenSSL 3.0 lacks
(``defaultCurvePreferences`` in golang/go src/crypto/tls/defaults.go at 5121b45d7426687076c20ae0f4fcae1238f3ed47:
X25519, P-256, P-384, P-521). No finite-field group: a TLS 1.3 ClientHello offering only ffdhe8192 cost the server
about 120 ms of CPU on the event loop. TLS 1.2 suites: ECDHE with AEAD only, as Go offers
(no finite-field DHE, no RSA key exchange, no CBC).
"""

from __future__ import annotations

import _ssl
import ctypes
import ssl
from functools import cache

from secure_orca.errors import SecureOrcaError

GROUPS = ("X25519", "P-256", "P-384", "P-521")
TLS12_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20:!aNULL:!eNULL"
_SSL_CTRL_SET_SESS_CACHE_MODE = 44  # openssl/ssl.h
_SSL_CTRL_GET_SESS_CACHE_MODE = 45
_SSL_CTRL_SET_GROUPS_LIST = 92
_SSL_CTRL_SET_SIGALGS_LIST = 98
SSL_SESS_CACHE_OFF = 0


class TLSPolicyError(SecureOrcaError):
    """The OpenSSL behind Python's ssl could not be given the handshake policy."""


@cache
def _libssl() -> ctypes.CDLL:
    path = getattr(_ssl, "__file__", None)
    if path is None:
        raise TLSPolicyError("Python's _ssl is built in; cannot reach the libssl it uses")
    lib = ctypes.CDLL(path)
    lib.SSL_CTX_ctrl.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_long, ctypes.c_void_p]
    lib.SSL_CTX_ctrl.restype = ctypes.c_long
    lib.SSL_CTX_get_options.argtypes = [ctypes.c_void_p]
    lib.SSL_CTX_get_options.restype = ctypes.c_uint64
    return lib


def _ssl_ctx(context: ssl.SSLContext) -> int:
    """The context's ``SSL_CTX *``, checked against the options Python reads through its own pointer."""
    lib = _libssl()
    pointer = ctypes.c_void_p.from_address(id(context) + object.__basicsize__).value
    if not pointer or lib.SSL_CTX_get_options(pointer) != int(context.options):
        raise TLSPolicyError("cannot find the OpenSSL context behind ssl.SSLContext on this Python")
    return pointer


def _set_list(context: ssl.SSLContext, control: int, names: str) -> None:
    if _libssl().SSL_CTX_ctrl(_ssl_ctx(context), control, 0, names.encode()) != 1:
        raise TLSPolicyError(f"OpenSSL refused the list {names}")


def restrict_groups(context: ssl.SSLContext, groups: tuple[str, ...] = GROUPS) -> None:
    """Offer and accept only ``groups`` for the key exchange (TLS 1.3 and TLS 1.2 ECDHE)."""
    _set_list(context, _SSL_CTRL_SET_GROUPS_LIST, ":".join(groups))


def restrict_sigalgs(context: ssl.SSLContext, sigalgs: str) -> None:
    """Offer only ``sigalgs`` (OpenSSL's colon-separated list); the benchmark's clients choose one each."""
    _set_list(context, _SSL_CTRL_SET_SIGALGS_LIST, sigalgs)


def disable_session_cache(context: ssl.SSLContext) -> None:
    """No TLS 1.2 session-ID resumption: the server keeps no session (tickets are ``OP_NO_TICKET``)."""
    lib, pointer = _libssl(), _ssl_ctx(context)
    lib.SSL_CTX_ctrl(pointer, _SSL_CTRL_SET_SESS_CACHE_MODE, SSL_SESS_CACHE_OFF, None)
    if lib.SSL_CTX_ctrl(pointer, _SSL_CTRL_GET_SESS_CACHE_MODE, 0, None) != SSL_SESS_CACHE_OFF:
        raise TLSPolicyError("OpenSSL kept its session cache on")


def apply(context: ssl.SSLContext) -> None:
    """The handshake policy of a server context: Go's groups, ECDHE AEAD suites for TLS 1.2."""
    context.set_ciphers(TLS12_CIPHERS)
    restrict_groups(context)
