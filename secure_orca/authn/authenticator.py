"""What every authenticator sees and returns (kube's ``authenticator.Request``: a response, ok, or an error)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from cryptography import x509

from secure_orca.authn.user import UserInfo
from secure_orca.x509.chainverifier import NO_CERTIFICATE, ChainResult, Failure

Headers = Sequence[tuple[bytes, bytes]]


@dataclass(frozen=True)
class Request:
    """One request as the authenticators see it. Certificate checks are done by the caller (once per
    connection, cached) with the same verifier that grants load reports: ``front_proxy`` against the
    requestheader CA and allowed names, ``client_cert`` against --client-ca-file."""

    headers: Headers  # as received: names in any case, duplicates kept
    now: dt.datetime
    leaf: x509.Certificate | None = None  # the certificate the client presented, if any
    front_proxy: ChainResult = NO_CERTIFICATE
    client_cert: ChainResult = NO_CERTIFICATE

    def values(self, name: str) -> list[bytes]:
        """Every value of header ``name``, compared case-insensitively (Go's canonical header keys)."""
        wanted = name.lower().encode("latin-1")
        return [value for key, value in self.headers if key.lower() == wanted]


@dataclass(frozen=True)
class Outcome:
    """``user`` set: authenticated. ``error`` set: this authenticator refused the credential (kube's err,
    a short reason safe to log). Neither: not this authenticator's credential, the chain goes on."""

    user: UserInfo | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.user is not None


NOT_MINE = Outcome()
Authenticator = Callable[[Request], Outcome]


def text(value: bytes) -> str:
    """A header value as Go's net/http hands it on: its bytes, shown as UTF-8 (invalid bytes replaced)."""
    return value.decode("utf-8", "replace")


def failure(result: ChainResult) -> str:
    """Why a certificate check does not hold now: its reason, or ``expired`` once a verified chain lapsed."""
    return str(Failure.EXPIRED if result.ok or result.failure is None else result.failure)
