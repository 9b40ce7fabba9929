"""nghttp2's HPACK decoder, through ``ctypes``, for long Huffman-coded strings: C speed for a client's big headers.

``huffman.decode_huffman`` costs about 70 ns per coded byte in Python, so a client that fills its header list with
Huffman-coded text (a 58 KB Authorization, docs/threat-model.md) still makes each request cost milliseconds of
the event loop, linear in what it sends. libnghttp2 (the HPACK of curl, h2load and Envoy's old codec; Debian's
``libnghttp2-14``) decodes the same string in a few nanoseconds per byte. Its public API has no Huffman function,
so a string is handed to an inflater as the value of a one-field block: a literal without indexing with an
empty new name (RFC 7541 section 6.2.2), which leaves the inflater's table empty, so one inflater per thread
serves every connection.

``huffman(coded)`` returns the decoded octets, or None when nghttp2 is not installed or refuses the string;
the caller then decodes in Python, which gives hpack's own verdict and message. Below ``LONG`` coded bytes the
call's fixed cost (about 3 us) is more than Python's, so short strings never come here.
``tests/server/hpack/test_huffman.py`` holds nghttp2's verdicts to hpack's on every input it tries. The API used
(``nghttp2_hd_inflate_new``, ``_hd2``, ``_end_headers``, ``_del``; ``nghttp2_nv``) is that of nghttp2 1.52.0,
Debian 12's ``libnghttp2-14``; ``_hd2`` is kept by later versions beside ``_hd3``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import threading

from hpack.hpack import encode_integer

LONG = 256  # coded bytes from which nghttp2 decodes faster than Python, call included (measured: 3 us a call)
MAX_CODED = 65536  # nghttp2 refuses a longer string (1.52: 65,536 coded bytes decode, 65,537 do not); Python decodes it
_LITERAL_NEW_NAME = b"\x00\x00"  # literal header field without indexing, new name of length 0
_EMIT, _FINAL = 0x02, 0x01  # nghttp2_hd_inflate_flag


class _Field(ctypes.Structure):
    """``nghttp2_nv``."""

    _fields_ = [
        ("name", ctypes.c_void_p),
        ("value", ctypes.c_void_p),
        ("namelen", ctypes.c_size_t),
        ("valuelen", ctypes.c_size_t),
        ("flags", ctypes.c_uint8),
    ]


def _library() -> ctypes.CDLL | None:
    """Debian's soname first; ``find_library`` (which runs ``ldconfig -p``) only where that is not it."""
    try:
        lib = ctypes.CDLL("libnghttp2.so.14")
    except OSError:
        name = ctypes.util.find_library("nghttp2")
        try:
            lib = ctypes.CDLL(name or "libnghttp2.so")
        except OSError:
            return None
    lib.nghttp2_hd_inflate_new.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
    lib.nghttp2_hd_inflate_new.restype = ctypes.c_int
    lib.nghttp2_hd_inflate_del.argtypes = [ctypes.c_void_p]
    lib.nghttp2_hd_inflate_del.restype = None
    lib.nghttp2_hd_inflate_hd2.argtypes = [
        ctypes.c_void_p,
        ctypes.POINTER(_Field),
        ctypes.POINTER(ctypes.c_int),
        ctypes.c_char_p,
        ctypes.c_size_t,
        ctypes.c_int,
    ]
    lib.nghttp2_hd_inflate_hd2.restype = ctypes.c_ssize_t
    lib.nghttp2_hd_inflate_end_headers.argtypes = [ctypes.c_void_p]
    lib.nghttp2_hd_inflate_end_headers.restype = ctypes.c_int
    return lib


_LIB = _library()
AVAILABLE = _LIB is not None


class _Inflater(threading.local):
    """One nghttp2 inflater per thread (an inflater is not thread-safe; only event-loop threads decode), made on
    first use and kept for the process, remade after a refusal (nghttp2 refuses every later block of an
    inflater that refused one)."""

    handle: ctypes.c_void_p | None = None

    def get(self) -> ctypes.c_void_p | None:
        if self.handle is None and _LIB is not None:
            handle = ctypes.c_void_p()
            if _LIB.nghttp2_hd_inflate_new(ctypes.byref(handle)) == 0:
                self.handle = handle
        return self.handle

    def discard(self) -> None:
        if self.handle is not None and _LIB is not None:
            _LIB.nghttp2_hd_inflate_del(self.handle)
        self.handle = None


_inflater = _Inflater()


def huffman(coded: bytes | bytearray | memoryview) -> bytes | None:
    """The octets that a Huffman-coded string literal's ``coded`` octets stand for (RFC 7541 section 5.2), as
    nghttp2 decodes them; None if nghttp2 is missing, refuses them, or they exceed ``MAX_CODED``."""
    handle = _inflater.get() if len(coded) <= MAX_CODED else None
    if handle is None or _LIB is None:
        return None
    length = encode_integer(len(coded), 7)
    length[0] |= 0x80
    block = b"".join((_LITERAL_NEW_NAME, length, coded))
    field, flags = _Field(), ctypes.c_int()
    value: bytes | None = None
    at = 0
    while True:  # nghttp2's documented loop: emit fields until the block is final
        used = _LIB.nghttp2_hd_inflate_hd2(
            handle, ctypes.byref(field), ctypes.byref(flags), block[at:], len(block) - at, 1
        )
        if used < 0:
            _inflater.discard()
            return None
        at += used
        if flags.value & _EMIT:
            if value is not None or field.namelen:  # cannot happen for this block; refuse rather than guess
                _inflater.discard()
                return None
            value = ctypes.string_at(field.value, field.valuelen)
        if flags.value & _FINAL:
            _LIB.nghttp2_hd_inflate_end_headers(handle)
            return value
        if not flags.value & _EMIT and at == len(block):
            _inflater.discard()
            return None
