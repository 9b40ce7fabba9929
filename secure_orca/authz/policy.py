"""Who may read a load report: the options of KEP-6315 as one policy (pure: time is passed in)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from secure_orca.authz.frontproxy import NO_CERTIFICATE, FrontProxyResult
from secure_orca.authz.reasons import Reason
from secure_orca.authz.secrets import SecretSet
from secure_orca.orca import optin

MODES = ("front-proxy", "shared-secret", "header-only", "load-reader")
DEFAULT_MODES = ("front-proxy", "shared-secret")


@dataclass(frozen=True)
class Decision:
    """Attach a report or not, and why; ``attach`` is ``reason.grants``."""

    attach: bool
    reason: Reason


# Decisions are few and immutable: one shared instance per reason, nothing allocated per request.
DECISIONS = {reason: Decision(reason.grants, reason) for reason in Reason}


def decision(reason: Reason | str) -> Decision:
    """The shared decision for ``reason`` (a Reason or its value)."""
    return DECISIONS[Reason(reason)]



@dataclass(frozen=True)
class Policy:
    """The configured modes and their material; ``decide`` is called once per request that opts in."""

    modes: frozenset[str]
    secrets: SecretSet | None = None

    def decide(
        self,
        optin_values: list[bytes],
        front_proxy: FrontProxyResult,
        now: dt.datetime,
        load_reader: FrontProxyResult = NO_CERTIFICATE,
    ) -> Decision:
        """``front_proxy`` and ``load_reader`` are the connection's certificate checked against each trust."""
        try:
            request = optin.parse(optin_values)
        except optin.OptInError as refused:
            return decision(refused.reason)
        if "header-only" in self.modes:
            return DECISIONS[Reason.HEADER_ONLY]
        if "front-proxy" in self.modes and front_proxy.holds_at(now):
            return DECISIONS[Reason.FRONT_PROXY]
        if "load-reader" in self.modes and load_reader.holds_at(now):
            return DECISIONS[Reason.LOAD_READER]
        if request.secret is not None:
            if self.secrets is None or "shared-secret" not in self.modes:
                return DECISIONS[Reason.SECRET_NOT_ACCEPTED]
            if self.secrets.matches(request.secret):
                return DECISIONS[Reason.SHARED_SECRET]
            return DECISIONS[Reason.WRONG_SECRET]
        for mode, checked in (("front-proxy", front_proxy), ("load-reader", load_reader)):
            if mode in self.modes:
                if checked.ok:  # verified earlier, since expired
                    return DECISIONS[Reason.EXPIRED]
                return DECISIONS[checked.reason]
        return DECISIONS[Reason.NO_SECRET]
