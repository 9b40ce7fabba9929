"""The ``endpoint-load-metrics-request`` opt-in header (pure).

Grammar: a format token, optionally followed by ``; secret=<token>`` (spaces around ``;`` optional)::

    TEXT
    TEXT; secret=3q2-7w...

The format token selects the report's format (KEP-6315: "Its value selects the report format"): ``TEXT``,
``JSON`` or ``BIN``, exactly the prefixes Envoy's parser reads in an ``endpoint-load-metrics`` value
(envoyproxy/envoy ``source/common/orca/orca_parser.cc``), case-sensitive as they are. KEP-6315's alpha serves
``TEXT`` alone; ``JSON`` and ``BIN`` are this gateway's extension, for an entitled caller only (header-only mode,
the KEP's option 1 as written, serves ``TEXT`` alone, as kube's handler does). As the KEP says of
any other value, it gets no report: ``text``, ``Json``, ``BIN2`` and the rest are refused (``unsupported-format``),
and an error never echoes the value.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from secure_orca.errors import SecureOrcaError

SUPPORTED_FORMATS = frozenset({"TEXT", "JSON", "BIN"})  # orca.dialect.CALLER_FORMATS, as Envoy parses them
KEP_FORMATS = frozenset({"TEXT"})  # what KEP-6315's alpha (and kube's handler) serves: all that header-only grants
MAX_LENGTH = 512
# Secrets are URL-safe base64 or other visible ASCII without separators.
SECRET_CHARS = r"[A-Za-z0-9_\-.~+/=]"
_GRAMMAR = re.compile(rf"[ \t]*([A-Za-z0-9_\-]+)[ \t]*(?:;[ \t]*secret=({SECRET_CHARS}*)[ \t]*)?")


class OptInError(SecureOrcaError, ValueError):
    """A refused opt-in; ``reason`` is a short code safe to log and count."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class OptIn:
    """A well-formed opt-in: the format asked for and the secret, if one was given."""

    format: str
    secret: str | None = None

    def __repr__(self) -> str:  # never show the secret
        return f"OptIn(format={self.format!r}, secret={'<set>' if self.secret is not None else None})"


BARE = OptIn("TEXT")


def parse(values: list[bytes]) -> OptIn:
    """Parse the opt-in header values of one request (all occurrences); raise OptInError when refused."""
    if values == [b"TEXT"]:  # what a front proxy sends on every request: no regex, no allocation
        return BARE
    if not values:
        raise OptInError("no-opt-in")
    if len(values) > 1:
        raise OptInError("duplicate-opt-in")
    raw = values[0]
    if len(raw) > MAX_LENGTH:
        raise OptInError("malformed-opt-in")
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        raise OptInError("malformed-opt-in") from None
    match = _GRAMMAR.fullmatch(text)
    if match is None:
        raise OptInError("malformed-opt-in")
    fmt, secret = match.group(1), match.group(2)
    if fmt not in SUPPORTED_FORMATS:
        raise OptInError("unsupported-format")
    return OptIn(fmt, secret)


def format_of(values: list[bytes]) -> str:
    """The format token of opt-in values that ``parse`` accepted (no regex: the bytes before any ``;``)."""
    return "TEXT" if values == [b"TEXT"] else values[0].partition(b";")[0].strip().decode("ascii")


def header_value(fmt: str = "TEXT", secret: str | None = None) -> str:
    """The header value a load balancer sends."""
    return fmt if secret is None else f"{fmt}; secret={secret}"
