"""What every concern's options share: flag parsers that name the flag at fault."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from secure_orca.errors import FlagError, UsageError

T = TypeVar("T")


def value(flag: str, parse: Callable[[], T]) -> T:
    """Run a flag value parser, turning its FlagError into a UsageError naming the flag."""
    try:
        return parse()
    except FlagError as error:
        raise UsageError(f"{flag}: {error}") from None


def problem(flag: str, parse: Callable[[], object]) -> list[str]:
    """The parser's complaint about ``flag`` (none if it parses): what validate() collects."""
    try:
        parse()
    except FlagError as error:
        return [f"{flag}: {error}"]
    return []


def within(flag: str, parse: Callable[[], float], low: float, high: float, bounds: str) -> list[str]:
    """The complaint when ``flag`` does not parse, or parses outside [low, high] (``bounds`` says so in words)."""
    try:
        parsed = parse()
    except FlagError as error:
        return [f"{flag}: {error}"]
    return [] if low <= parsed <= high else [f"{flag}: must be between {bounds}"]
