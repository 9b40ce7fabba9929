"""Why a load report was attached or refused: one closed set of short codes, safe to log and count (pure)."""

from __future__ import annotations

from enum import StrEnum


class Reason(StrEnum):
    """Every reason a decision can carry. Metrics derive their label set from this enum, so a new member is
    counted without any other change. Values are stable: they appear in logs, metrics and tests."""

    # grants
    FRONT_PROXY = "front-proxy"  # the client certificate is the front proxy's (requestheader CA, allowed name)
    SHARED_SECRET = "shared-secret"  # the opt-in carried a configured secret
    HEADER_ONLY = "header-only"  # the opt-in alone suffices (KEP option 1)
    LOAD_READER = "load-reader"  # the client certificate is a load reader's (reads load, asserts no identity)
    # refusals before any credential is looked at
    FEATURE_OFF = "feature-off"
    NO_OPT_IN = "no-opt-in"
    MALFORMED_OPT_IN = "malformed-opt-in"
    DUPLICATE_OPT_IN = "duplicate-opt-in"
    UNSUPPORTED_FORMAT = "unsupported-format"
    # refusals of the client certificate (front-proxy mode)
    NO_CERTIFICATE = "no-certificate"
    UNTRUSTED_CA = "untrusted-ca"
    EKU = "eku"
    EXPIRED = "expired"
    NAME_NOT_ALLOWED = "name-not-allowed"
    # refusals of the secret
    WRONG_SECRET = "secret"  # a secret was given and matches none configured
    NO_SECRET = "no-secret"  # shared-secret is the only mode and the opt-in carries none
    SECRET_NOT_ACCEPTED = "secret-not-accepted"  # a secret was given but shared-secret is not a configured mode

    @property
    def grants(self) -> bool:
        return self in _GRANTS


_GRANTS = frozenset({Reason.FRONT_PROXY, Reason.SHARED_SECRET, Reason.HEADER_ONLY, Reason.LOAD_READER})
