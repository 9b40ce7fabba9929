"""protocol.refused_by_h2 and illegal_characters against h2 4.4's own validate_headers and
_reject_illegal_characters: the same verdict on every block tried (every byte value, at every place)."""

from __future__ import annotations

import random

import h2.exceptions
import h2.utilities
from hypothesis import given, settings
from hypothesis import strategies as st

from secure_orca.server.http import protocol
from secure_orca.server.http.protocol import illegal_characters, refused_by_h2

Headers = list[tuple[bytes, bytes]]
REQUEST = [(b":method", b"GET"), (b":scheme", b"https"), (b":authority", b"a"), (b":path", b"/")]


def h2_refuses(stage: object, headers: Headers, trailers: bool = False) -> bool:
    flags = h2.utilities.HeaderValidationFlags(
        is_client=False, is_trailer=trailers, is_response_header=False, is_push_promise=False
    )
    try:
        for _ in stage(headers, flags):  # type: ignore[operator]
            pass
    except h2.exceptions.ProtocolError:
        return True
    return False


def same_characters(headers: Headers) -> None:
    assert illegal_characters(headers) == h2_refuses(h2.utilities._reject_illegal_characters, headers), headers


def same_block(headers: Headers, trailers: bool = False) -> None:
    expected = h2_refuses(h2.utilities.validate_headers, headers, trailers)
    assert refused_by_h2(headers, trailers) == expected, (headers, trailers)


def test_validate_headers_is_the_character_check_then_our_stages() -> None:
    """The contract ``refused_by_h2`` relies on: h2's ``validate_headers`` chains these functions, in this order."""
    names = [n for n in h2.utilities.validate_headers.__code__.co_names if n.startswith("_")]
    assert names == ["_reject_illegal_characters", *(stage.__name__ for stage in protocol._STAGES)]


def test_every_byte_value_in_every_place() -> None:
    for octet in range(256):
        c = bytes((octet,))
        for name in (c, c + b"a", b"a" + c, b"a" + c + b"a", b":" + c, c + b":"):
            same_characters([(name, b"v")])
        for value in (c, c + b"v", b"v" + c, b"v" + c + b"v", c * 3):
            same_characters([(b"x", value)])
    same_characters([(b"", b"")])
    same_characters([(b"x", b"")])
    same_characters([(b":", b"")])
    same_characters([(b"::", b"")])


OCTETS = st.one_of(st.sampled_from(b"a:- \t\r\n\x00Z\x7f\x80\xff;"), st.integers(0, 255))


@settings(max_examples=800, deadline=None)
@given(st.lists(st.tuples(st.binary(max_size=6), st.binary(max_size=6)), max_size=4))
def test_any_fields(headers: Headers) -> None:
    same_characters(headers)
    same_block(headers)
    same_block(headers, trailers=True)


@settings(max_examples=800, deadline=None)
@given(st.lists(st.tuples(st.lists(OCTETS, max_size=5).map(bytes), st.lists(OCTETS, max_size=5).map(bytes))))
def test_any_fields_of_awkward_octets(headers: Headers) -> None:
    same_characters(headers)


FIELDS = [
    *REQUEST,
    (b":method", b"CONNECT"),
    (b":protocol", b"websocket"),
    (b":status", b"200"),
    (b":path", b""),
    (b":custom", b"x"),
    (b"host", b"a"),
    (b"host", b"b"),
    (b"te", b"trailers"),
    (b"te", b"gzip"),
    (b"connection", b"close"),
    (b"x-ok", b"v"),
    (b"X-Upper", b"v"),
    (b"x:colon", b"v"),
    (b"", b"v"),
    (b"x-ws", b" v"),
    (b"x-cr", b"a\rb"),
    (b"x-empty", b""),
]


def test_random_request_blocks() -> None:
    """Blocks of valid and invalid fields in any order, as requests and as trailers."""
    rng = random.Random(26)
    for _ in range(5000):
        headers = [rng.choice(FIELDS) for _ in range(rng.randint(0, 7))]
        if rng.random() < 0.5:
            headers = REQUEST + headers
        same_block(headers)
        same_block(headers, trailers=True)
