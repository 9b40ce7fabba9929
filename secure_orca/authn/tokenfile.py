"""Static bearer tokens (kube's ``token/tokenfile``): --token-auth-file, CSV ``token,user,uid[,"g1,g2"]``.

As kube: every record needs at least 3 columns, a record with an empty token is skipped, a later duplicate
token replaces an earlier one, and the 4th column (if any) is split on commas into groups. Unlike kube, which
only warns, a file holding no token at all is refused; no message ever shows a token.
"""

from __future__ import annotations

import csv
import hmac
import io
from collections.abc import Mapping
from pathlib import Path

from secure_orca.authn.user import UserInfo
from secure_orca.errors import CredentialError

FLAG = "--token-auth-file"


def parse(data: bytes, path: Path) -> dict[str, UserInfo]:
    """The tokens of a token file's bytes, or a CredentialError naming the line at fault."""
    try:
        content = data.decode("utf-8")
    except UnicodeDecodeError:
        raise CredentialError(FLAG, f"{path}: not UTF-8 text") from None
    tokens: dict[str, UserInfo] = {}
    reader = csv.reader(io.StringIO(content, newline=""), strict=True)
    try:
        for record in reader:
            if not record:
                continue  # a blank line, which Go's csv reader skips too
            if len(record) < 3:
                raise CredentialError(
                    FLAG,
                    f"{path}: line {reader.line_num} must have at least 3 columns (token, user name, user uid), "
                    f"found {len(record)}",
                )
            token, name, uid = record[0], record[1], record[2]
            if not token:
                continue
            groups = tuple(record[3].split(",")) if len(record) >= 4 else ()
            tokens[token] = UserInfo(name, uid, groups)
    except csv.Error:
        raise CredentialError(FLAG, f"{path}: line {reader.line_num} is not valid CSV") from None
    if not tokens:
        raise CredentialError(FLAG, f"{path}: holds no token")
    return tokens


class TokenFile:
    """Look tokens up; the comparison walks every token in constant time per token."""

    def __init__(self, tokens: Mapping[str, UserInfo]) -> None:
        self._tokens = [(token.encode(), user) for token, user in tokens.items()]

    def __len__(self) -> int:
        return len(self._tokens)

    def lookup(self, token: str) -> UserInfo | None:
        wanted = token.encode("utf-8", "surrogateescape")
        found = None
        for candidate, user in self._tokens:
            if hmac.compare_digest(candidate, wanted):
                found = user
        return found
