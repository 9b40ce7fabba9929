"""Redaction of credentials in audit events, with bounded work per event whatever the client sends: the
configured secrets and tokens are one precompiled matcher, a client's own credential is what kube's parsing takes
(``Authorization``: the scheme, then one token; the opt-in's secret), and every string is matched on its
percent-decoded form, so that no spelling of a credential is written (server.audit writes the events)."""

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


_NO_ESCAPES: list[int] = []


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

    One regular expression over the configured values, compiled once; each string is matched on its decoded form
    (``_decode``, spaces folded to ``+``) and a match is redacted over the span of the original that spelled it.
    Per string: one search of the expression and one substring search per presented value (at most two)."""

    def __init__(self, values: Iterable[str] = ()) -> None:
        forms = {_fold(_view(v)) for v in values if v}
        self.pattern = re.compile("|".join(map(re.escape, sorted(forms, key=len, reverse=True)))) if forms else None

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
        if "%" in view:
            decoded, escapes = _decode(view)
        else:
            decoded, escapes = view, _NO_ESCAPES
        if " " in decoded:
            decoded = decoded.replace(" ", "+")  # ``_fold``
        first = pattern.search(decoded) if pattern is not None else None
        if first is None and not presented:
            return view
        spans = []
        if pattern is not None and first is not None:
            spans = [m.span() for m in pattern.finditer(decoded, first.start())]
        for value in presented:
            value = _fold(value)
            start = decoded.find(value)
            while start >= 0:
                spans.append((start, start + len(value)))
                start = decoded.find(value, start + len(value))
        if not spans:
            return view
        out: list[str] = []
        last = 0
        for start, end in sorted(spans):
            start, end = _raw(start, escapes), _raw(end, escapes)
            if start < last:  # overlaps the previous match: one redaction covers both
                last = max(last, end)
                continue
            out += (view[last:start], REDACTED)
            last = end
        out.append(view[last:])
        return "".join(out)


def _raw(index: int, escapes: list[int]) -> int:
    """The index in the original of decoded ``index``: each escape before it took two characters more."""
    return index + 2 * bisect.bisect_left(escapes, index)
