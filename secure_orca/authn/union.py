"""kube's ``request/union`` and the chain ``pkg/kubeapiserver/authenticator/config.go`` builds from it:
requestheader, x509, token file (each only when configured), in that order; the first to authenticate wins,
errors are collected and returned only if none does; ``system:authenticated`` is added; then, with
--anonymous-auth, the anonymous user, but only when no authenticator failed with an error (a bad token or a
bad certificate is a 401, never anonymous)."""

from __future__ import annotations

import functools
from collections.abc import Sequence

from secure_orca.authn import anonymous, bearertoken, requestheader, x509
from secure_orca.authn.authenticator import NOT_MINE, Authenticator, Outcome, Request
from secure_orca.authn.group import authenticated_group_adder
from secure_orca.authn.requestheader import RequestHeaderConfig
from secure_orca.authn.tokenfile import TokenFile


def union(authenticators: Sequence[Authenticator], fail_on_error: bool = False) -> Authenticator:
    """Try each in order: the first success wins; errors end the union at once only with ``fail_on_error``."""

    def authenticate(request: Request) -> Outcome:
        errors: list[str] = []
        for each in authenticators:
            outcome = each(request)
            if outcome.error is not None:
                if fail_on_error:
                    return outcome
                errors.append(outcome.error)
            elif outcome.ok:
                return outcome
        return Outcome(error="; ".join(errors)) if errors else NOT_MINE

    return authenticate


def _x509_except_front_proxy(request: Request) -> Outcome:
    """x509, but a chain that verified as the front proxy is not its business (not an error)."""
    if request.front_proxy.holds_at(request.now):
        return NOT_MINE
    return x509.authenticate(request)


def chain(
    *,
    requestheader_config: RequestHeaderConfig | None,
    client_certs: bool,
    tokens: TokenFile | None,
    anonymous_auth: bool,
    proxy_without_user_is_anonymous: bool = False,
) -> Authenticator:
    """The authenticator chain of kube-apiserver for the configured methods.

    ``proxy_without_user_is_anonymous`` is NOT kube: there, a front proxy that names no user fails the x509
    authenticator (its certificate is no client certificate) and gets 401. With it, such a request goes on to
    the other authenticators and may end anonymous, for load balancers that do not authenticate users yet."""
    members: list[Authenticator] = []
    if requestheader_config is not None:
        members.append(functools.partial(requestheader.authenticate, requestheader_config))
    if client_certs:
        members.append(_x509_except_front_proxy if proxy_without_user_is_anonymous else x509.authenticate)
    if tokens is not None:
        members.append(functools.partial(bearertoken.authenticate, tokens))
    authenticated = authenticated_group_adder(union(members))
    if anonymous_auth:
        return union([authenticated, anonymous.authenticate], fail_on_error=True)
    return authenticated
