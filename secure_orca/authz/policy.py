"""Who may read a load report: the options of KEP-6315 as one policy (pure: time is passed in)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from secure_orca.authz.reasons import Reason
from secure_orca.authz.secrets import SecretSet
from secure_orca.kep_options import Mode
from secure_orca.orca import optin
from secure_orca.x509.chainverifier import NO_CERTIFICATE, ChainResult, Failure

MODES = tuple(Mode)
DEFAULT_MODES = (Mode.FRONT_PROXY, Mode.SHARED_SECRET)


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


# Why a certificate check refused, as a load-report reason.
REFUSALS = {
    Failure.NO_CERTIFICATE: Reason.NO_CERTIFICATE,
    Failure.UNTRUSTED: Reason.UNTRUSTED_CA,
    Failure.EKU: Reason.EKU,
    Failure.EXPIRED: Reason.EXPIRED,
    Failure.NAME_NOT_ALLOWED: Reason.NAME_NOT_ALLOWED,
}


def refusal(result: ChainResult) -> Reason:
    """The reason a certificate check does not hold now: its failure, or ``expired`` once a verified chain
    lapsed."""
    return Reason.EXPIRED if result.ok or result.failure is None else REFUSALS[result.failure]


@dataclass(frozen=True)
class Policy:
    """The configured modes and their material; ``decide`` is called once per request that opts in."""

    modes: frozenset[Mode]
    secrets: SecretSet | None = None

    def decide(
        self,
        optin_values: list[bytes],
        front_proxy: ChainResult,
        now: dt.datetime,
        load_reader: ChainResult = NO_CERTIFICATE,
    ) -> Decision:
        """``front_proxy`` and ``load_reader`` are the connection's certificate checked against each trust."""
        try:
            request = optin.parse(optin_values)
        except optin.OptInError as refused:
            return decision(refused.reason)
        if Mode.HEADER_ONLY in self.modes and request.format in optin.KEP_FORMATS:
            return DECISIONS[Reason.HEADER_ONLY]  # the KEP's option 1 as written: TEXT, to anyone
        if Mode.FRONT_PROXY in self.modes and front_proxy.holds_at(now):
            return DECISIONS[Reason.FRONT_PROXY]
        if Mode.LOAD_READER in self.modes and load_reader.holds_at(now):
            return DECISIONS[Reason.LOAD_READER]
        if request.secret is not None:
            if self.secrets is None or Mode.SHARED_SECRET not in self.modes:
                return DECISIONS[Reason.SECRET_NOT_ACCEPTED]
            if self.secrets.matches(request.secret):
                return DECISIONS[Reason.SHARED_SECRET]
            return DECISIONS[Reason.WRONG_SECRET]
        if Mode.HEADER_ONLY in self.modes:
            return DECISIONS[Reason.UNSUPPORTED_FORMAT]  # JSON and BIN, this gateway's extension, need an entitlement
        for mode, checked in ((Mode.FRONT_PROXY, front_proxy), (Mode.LOAD_READER, load_reader)):
            if mode in self.modes:
                return DECISIONS[refusal(checked)]  # a verified chain that lapsed is expired
        return DECISIONS[Reason.NO_SECRET]

    def entitles_stream(
        self, front_proxy: ChainResult, now: dt.datetime, load_reader: ChainResult = NO_CERTIFICATE
    ) -> Reason:
        """Who may open the out-of-band stream (StreamCoreMetrics): a certificate that verifies, now, as the front
        proxy's or a load reader's, in a configured mode. Nothing else grants: not the opt-in header, not a
        secret, not a token, not a client-CA user. The refusal reasons are the in-band ones."""
        if Mode.FRONT_PROXY in self.modes and front_proxy.holds_at(now):
            return Reason.FRONT_PROXY
        if Mode.LOAD_READER in self.modes and load_reader.holds_at(now):
            return Reason.LOAD_READER
        for mode, checked in ((Mode.FRONT_PROXY, front_proxy), (Mode.LOAD_READER, load_reader)):
            if mode in self.modes and checked.failure is not Failure.NO_CERTIFICATE:
                return refusal(checked)
        return Reason.NO_CERTIFICATE
