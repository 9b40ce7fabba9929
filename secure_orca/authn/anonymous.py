"""The anonymous user (kube's ``request/anonymous``): ``system:anonymous`` in ``system:unauthenticated``."""

from __future__ import annotations

from secure_orca.authn.authenticator import Outcome, Request
from secure_orca.authn.user import ALL_UNAUTHENTICATED, ANONYMOUS, UserInfo

ANONYMOUS_USER = UserInfo(ANONYMOUS, groups=(ALL_UNAUTHENTICATED,))
_OUTCOME = Outcome(ANONYMOUS_USER)


def authenticate(request: Request) -> Outcome:
    return _OUTCOME
