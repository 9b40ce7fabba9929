"""kube's ``group.AuthenticatedGroupAdder``: every authenticated user but the anonymous one is also in
``system:authenticated`` (unless already in it or in ``system:unauthenticated``)."""

from __future__ import annotations

from secure_orca.authn.authenticator import Authenticator, Outcome, Request
from secure_orca.authn.user import ALL_AUTHENTICATED, ALL_UNAUTHENTICATED, ANONYMOUS


def authenticated_group_adder(inner: Authenticator) -> Authenticator:
    def authenticate(request: Request) -> Outcome:
        outcome = inner(request)
        user = outcome.user
        if user is None or user.name == ANONYMOUS:
            return outcome
        if ALL_AUTHENTICATED in user.groups or ALL_UNAUTHENTICATED in user.groups:
            return outcome
        return Outcome(user.with_group(ALL_AUTHENTICATED))

    return authenticate
