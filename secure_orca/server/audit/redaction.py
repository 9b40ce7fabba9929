"""Redaction of credentials in audit events, with bounded work per event whatever the client sends: the
configured secrets and tokens are one precompiled matcher, a client's own credential is what kube's parsing takes
(``Authorization``: the scheme, then one token; the opt-in's secret), and every string is matched on its
percent-decoded form and, when it holds a ``%``, on itself, so that no spelling of a credential is written:
literal, percent-encoded, or both (a credential may hold a ``%`` of its own; audit.log writes the events)."""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable

from secure_orca.orca import optin

REDACTED = "[redacted]"
MIN_PRESENTED = 4  # a client's credential shorter than this is not searched for (it would redact most text)


def presented(authorization: bytes | None, opt_in: bytes | None) -> tuple[str, ...]:
    """The credentials a client presented, as the server reads them: from the first ``Authorization`` the token
    kube's ``request/bearertoken`` parsing takes (trimmed, split on single spaces into at most 3 parts: the scheme,
    then the token; any scheme), and the opt-in's secret (parsed; should the value be malformed, what follows its
    first ``;``). At most two values, whatever the client sends; each as the header's bytes read as Latin-1."""
    found: list[str] = []
    if authorization is not None:
        parts = authorization.decode("latin-1").strip().split(" ", 2)
        if len(parts) >= 2:
            found.append(parts[1])
    if opt_in is not None and opt_in.find(b";") >= 0:  # not ``in``: bytes tries an int first, and raises
        try:
            secret = optin.parse([opt_in]).secret
        except optin.OptInError:
            secret = opt_in.decode("latin-1").split(";", 1)[1].strip().removeprefix("secret=")
        found.append(secret or "")
    return tuple(v for v in found if len(v) >= MIN_PRESENTED)


def _view(text: str) -> str:
    """A string as the bytes a client would send for it, read as Latin-1 (what the URI and headers are)."""
    return text if text.isascii() else text.encode("utf-8", "surrogatepass").decode("latin-1")


def _fold(text: str) -> str:
    """A space and ``+`` are one character to the matcher (``+`` is a space in a query)."""
    return text.replace(" ", "+")


_HEX = {a + b: chr(int(a + b, 16)) for a in "0123456789abcdefABCDEF" for b in "0123456789abcdefABCDEF"}
_ESCAPE = re.compile("%[0-9A-Fa-f]{2}")


def _expression(form: str) -> str:
    """The regular expression of a configured value's folded view: each escape in it (``%41``) matches as written
    or as what it encodes (``A``), so the value is found in a decoded text whichever of its characters the
    client escaped, its own escapes included."""
    parts: list[str] = []
    last = 0
    for escape in _ESCAPE.finditer(form):
        char = _fold(_HEX[escape.group()[1:]])
        parts += (re.escape(form[last : escape.start()]), f"(?:{re.escape(escape.group())}|{re.escape(char)})")
        last = escape.end()
    parts.append(re.escape(form[last:]))
    return "".join(parts)


def _decode(view: str) -> tuple[str, list[int]]:
    """``view`` percent-decoded as ``urllib.parse.unquote_to_bytes`` does (a ``%`` not followed by two hex digits
    stays), and the decoded index of each escape (to map a match back onto ``view``)."""
    pieces = view.split("%")
    out = [pieces[0]]
    escapes: list[int] = []
    at = len(pieces[0])
    for piece in pieces[1:]:
        char = _HEX.get(piece[:2])
        if char is None:
            out += ("%", piece)
            at += 1 + len(piece)
        else:
            escapes.append(at)
            out += (char, piece[2:])
            at += len(piece) - 1
    return "".join(out), escapes


class Redactor:
    """Replaces every configured credential, and the few a client presented, in any percent-encoding of it.

    One regular expression over the configured values (``_expression``), compiled once; each string is matched on
    its decoded form (``_decode``, spaces folded to ``+``), a match redacted over the span of the original that
    spelled it, and a string with a ``%`` also on itself (a value sent literally: its own ``%41`` became ``A`` in
    the decoded form, and a stray ``%`` before it takes its first hex digits). Per string: at most two searches
    of the expression and two substring searches per presented value (at most two)."""

    def __init__(self, values: Iterable[str] = ()) -> None:
        forms = sorted({_fold(_view(v)) for v in values if v}, key=len, reverse=True)
        self.pattern = re.compile("|".join(map(_expression, forms))) if forms else None

    def __call__(self, text: str, presented: tuple[str, ...] = ()) -> str:
        if not presented and text.isascii() and "%" not in text and " " not in text:  # the common case
            return text if self.pattern is None or self.pattern.search(text) is None else self.view(text)
        view = _view(text)
        redacted = self.view(view, presented)
        if redacted is view:
            return text
        try:
            return redacted.encode("latin-1").decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:
            return redacted.encode("latin-1").decode("utf-8", "replace")

    def view(self, view: str, presented: tuple[str, ...] = ()) -> str:
        """Redact a Latin-1 view (a URI, a header value); ``view`` itself when nothing matched."""
        pattern = self.pattern
        plain = not presented and "%" not in view and " " not in view
        if plain and (pattern is None or pattern.search(view) is None):  # the common case: one search
            return view
        if "%" not in view:
            spans = self._spans(_fold(view), presented)
        else:
            decoded, escapes = _decode(view)
            spans = [
                (_raw(start, escapes), _raw(end, escapes)) for start, end in self._spans(_fold(decoded), presented)
            ]
            spans += self._spans(_fold(view), presented)  # spelled literally, its own ``%`` and all
        if not spans:
            return view
        out: list[str] = []
        last = 0
        for start, end in sorted(spans):
            if start < last:  # overlaps the previous match: one redaction covers both
                last = max(last, end)
                continue
            out += (view[last:start], REDACTED)
            last = end
        out.append(view[last:])
        return "".join(out)

    def _spans(self, text: str, presented: tuple[str, ...]) -> list[tuple[int, int]]:
        """Where the configured values and the presented ones are in ``text`` (folded)."""
        pattern = self.pattern
        spans = [m.span() for m in pattern.finditer(text)] if pattern is not None else []
        for value in presented:
            value = _fold(value)
            start = text.find(value)
            while start >= 0:
                spans.append((start, start + len(value)))
                start = text.find(value, start + len(value))
        return spans


def _raw(index: int, escapes: list[int]) -> int:
    """The index in the original of decoded ``index``: each escape before it took two characters more."""
    return index + 2 * bisect.bisect_left(escapes, index)
