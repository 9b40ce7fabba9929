"""HPACK's Huffman decoding (RFC 7541 section 5.2 and Appendix B) at a few C-level passes per string (pure).

hpack 4.2's ``decode_huffman`` walks a nibble table in a Python loop: two lookups, two flag tests and a
``bytearray.append`` per input byte, about 0.2 us per coded byte in isolation. A client that fills its header
list with Huffman-coded text (issue 26's 58 KB flood) made every request cost the server about 18 ms of that loop
in a profile; this decoder takes about 70 ns per coded byte (docs/threat-model.md).

Here the code is a finite-state machine over whole input bytes, built once at import from hpack's own table
of codes (``hpack.huffman_constants``: the RFC's Appendix B as data). A state is a node of the code tree (the
bits read since the last symbol); its row maps each input byte to the next state's row, and its emissions row
maps the byte to the symbols completed on the way (0 to 2; the shortest code has 5 bits). Decoding a string
is then C-level iteration only: ``itertools.accumulate`` with ``operator.getitem`` walks the rows, the
emissions are looked up pairwise with the input, and ``bytes.join`` assembles them once.

The refusals are hpack's (``hpack.exceptions.HPACKDecodingError``, with its messages): the EOS symbol inside the
string sends the machine to a dead state it never leaves ("Invalid Huffman string"); a string must end on a
symbol boundary or within 7 bits of padding that are a prefix of EOS, i.e. all ones ("Incomplete Huffman
string"). ``tests/server/hpack/test_huffman.py`` compares the verdict and output with hpack's on every input tried.
"""

from __future__ import annotations

from itertools import accumulate
from operator import getitem, itemgetter
from typing import Any

from hpack.exceptions import HPACKDecodingError
from hpack.huffman_constants import REQUEST_CODES, REQUEST_CODES_LENGTH

EOS = 256  # the end-of-string symbol (RFC 7541 section 5.2): a decoding error inside a string
MAX_PADDING = 7  # bits of EOS's prefix a string may end with
_EMISSIONS = 256  # a row's index of its emissions (a list of 256 bytes objects)
_ACCEPTS = 257  # a row's index of whether a string may end in this state

Row = list[Any]  # 256 next rows, the emissions, the acceptance flag


def _code_tree() -> tuple[list[list[int]], list[int | None]]:
    """The code tree: ``children[node][bit]`` is a node (>= 0) or a leaf ``-1 - symbol``; node 0 is the root.
    ``padding[node]``: the node's depth when the path to it is all ones (a prefix of EOS), else None."""
    children: list[list[int]] = [[0, 0]]
    built: list[list[bool]] = [[False, False]]
    padding: list[int | None] = [0]
    for symbol, (code, length) in enumerate(zip(REQUEST_CODES, REQUEST_CODES_LENGTH, strict=True)):
        node = 0
        for position in range(length - 1, -1, -1):
            bit = (code >> position) & 1
            if position == 0:
                if built[node][bit]:
                    raise ValueError(f"the code of symbol {symbol} is not prefix-free")
                children[node][bit], built[node][bit] = -1 - symbol, True
            elif built[node][bit]:
                node = children[node][bit]
                if node < 0:
                    raise ValueError(f"the code of symbol {symbol} extends another symbol's")
            else:
                children.append([0, 0])
                built.append([False, False])
                depth = padding[node]
                padding.append(depth + 1 if depth is not None and bit == 1 else None)
                children[node][bit], built[node][bit] = len(children) - 1, True
                node = len(children) - 1
    if not all(all(pair) for pair in built):
        raise ValueError("the code is not complete")
    return children, padding


def _machine() -> tuple[Row, Row]:
    """The rows of every node plus a dead state, and the root's row."""
    children, padding = _code_tree()
    dead = len(children)
    # per (node, nibble): the symbols completed and the node reached (dead once EOS is read)
    nibble: list[tuple[tuple[int, ...], int]] = []
    for node in range(dead + 1):
        for value in range(16):
            emitted: list[int] = []
            at = node
            for position in range(3, -1, -1):
                if at == dead:
                    break
                child = children[at][(value >> position) & 1]
                if child >= 0:
                    at = child
                elif -1 - child == EOS:
                    at = dead
                else:
                    emitted.append(-1 - child)
                    at = 0
            nibble.append((tuple(emitted), at))
    rows: list[Row] = [[None] * (_ACCEPTS + 1) for _ in range(dead + 1)]
    symbols: dict[bytes, bytes] = {}  # one object per distinct emission, shared by every row that makes it
    # per node reached after a high nibble: the 16 low nibbles' next rows and emissions (C-level slices below)
    after = [[rows[reached] for _, reached in nibble[m * 16 : m * 16 + 16]] for m in range(dead + 1)]
    low = [
        [symbols.setdefault(b, b) for b in map(bytes, (e for e, _ in nibble[m * 16 : m * 16 + 16]))]
        for m in range(dead + 1)
    ]
    for node, row in enumerate(rows):
        emissions: list[bytes] = []
        for high in range(16):
            completed, middle = nibble[node * 16 + high]
            row[high * 16 : high * 16 + 16] = after[middle]
            if completed:
                joined = list(map(bytes(completed).__add__, low[middle]))
                emissions += map(symbols.setdefault, joined, joined)
            else:
                emissions += low[middle]
        depth = padding[node] if node < dead else None
        row[_EMISSIONS] = emissions
        row[_ACCEPTS] = depth is not None and depth <= MAX_PADDING
    return rows[dead], rows[0]


_DEAD, _ROOT = _machine()
_emissions = itemgetter(_EMISSIONS)


def decode_huffman(data: bytes | bytearray | memoryview | None) -> bytes:
    """The octets a Huffman-coded string literal (RFC 7541 section 5.2) stands for, as hpack's
    ``decode_huffman`` returns them, or its ``HPACKDecodingError``."""
    if not data:
        return b""
    states = list(accumulate(data, getitem, initial=_ROOT))  # type: ignore[arg-type]
    last = states.pop()
    if last is _DEAD:
        raise HPACKDecodingError("Invalid Huffman string")
    if not last[_ACCEPTS]:
        raise HPACKDecodingError("Incomplete Huffman string")
    return b"".join(map(getitem, map(_emissions, states), data))
