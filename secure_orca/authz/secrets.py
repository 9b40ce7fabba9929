"""Shared secrets for the opt-in, compared in constant time (pure)."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence


def _digest(secret: str | bytes) -> bytes:
    raw = secret.encode() if isinstance(secret, str) else secret
    return hashlib.sha256(raw).digest()


class SecretSet:
    """Shared secrets (several at once, for rotation), compared in constant time by their digests."""

    def __init__(self, secrets: Sequence[str]) -> None:
        if not secrets:
            raise ValueError("no shared secret")
        self._digests = tuple(_digest(s) for s in secrets)

    def __len__(self) -> int:
        return len(self._digests)

    def __repr__(self) -> str:
        return f"SecretSet(<{len(self._digests)} secrets>)"

    def matches(self, candidate: str) -> bool:
        """True when ``candidate`` equals one of the secrets; every secret is compared, whatever matches."""
        given = _digest(candidate)
        found = False
        for digest in self._digests:
            found |= hmac.compare_digest(given, digest)
        return found
