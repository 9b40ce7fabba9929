"""``Authorization: Bearer <token>`` (kube's ``request/bearertoken``) over a token authenticator.

The header value is trimmed, split on single spaces into at most 3 parts, the scheme compared
case-insensitively; an empty token (``Bearer  x``) is not this authenticator's. A token no authenticator
knows is an error: ``invalid bearer token`` (401 unless another authenticator succeeds).
"""

from __future__ import annotations

from secure_orca.authn.authenticator import NOT_MINE, Outcome, Request, text
from secure_orca.authn.tokenfile import TokenFile

INVALID = Outcome(error="invalid bearer token")


def bearer_token(request: Request) -> str:
    """The token of the first Authorization header, or ``""`` when there is none to check."""
    values = request.values("Authorization")
    auth = text(values[0]).strip() if values else ""
    parts = auth.split(" ", 2)
    if len(parts) < 2 or parts[0].lower() != "bearer":
        return ""
    return parts[1]


def authenticate(tokens: TokenFile, request: Request) -> Outcome:
    token = bearer_token(request)
    if not token:
        return NOT_MINE
    user = tokens.lookup(token)
    return Outcome(user) if user is not None else INVALID
