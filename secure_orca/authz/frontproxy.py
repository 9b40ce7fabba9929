"""Who may read a load report: the three options of KEP-6315 as one policy (pure: time is passed in).

- ``front-proxy``: the client certificate verifies against the requestheader CA only, exactly as kube-apiserver's
  ``pkg/authentication/request/x509`` does with Go's ``crypto/x509`` (see :mod:`secure_orca.authz.kubex509`:
  intermediates from the client, ExtKeyUsage clientAuth on every certificate that lists usages, validity of every
  certificate at the current time), and its Subject CN (Go's: the last CN attribute) is an allowed name (empty
  list: any certificate from that CA). SANs are never consulted.
- ``shared-secret``: the opt-in carries ``secret=`` equal to one of the configured secrets (constant time).
- ``header-only``: the opt-in alone suffices (the KEP's option 1).

Reasons are short codes, safe to log and count; no decision ever carries a secret. Any certificate, however
malformed, gives a refusal, never an exception.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.serialization import Encoding

from secure_orca.authz.kubex509 import Pool, parse_certificate
from secure_orca.authz.kubex509 import verify as verify_chain
from secure_orca.authz.reasons import Reason

_FAILURES = {"expired": Reason.EXPIRED, "eku": Reason.EKU, "untrusted": Reason.UNTRUSTED_CA}


@dataclass(frozen=True)
class FrontProxyResult:
    """The outcome of verifying one connection's certificate chain; ``valid_until`` bounds its reuse."""

    ok: bool
    reason: Reason
    valid_from: dt.datetime | None = None
    valid_until: dt.datetime | None = None

    def holds_at(self, now: dt.datetime) -> bool:
        if not self.ok or self.valid_from is None or self.valid_until is None:
            return False
        return self.valid_from <= now <= self.valid_until


NO_CERTIFICATE = FrontProxyResult(False, Reason.NO_CERTIFICATE)




def common_name(cert: x509.Certificate) -> str | None:
    """The Subject's Common Name as Go's ``pkix.Name.CommonName`` gives it: the last CN attribute (None when the
    subject has none or Go could not read the certificate)."""
    try:
        return parse_certificate(cert.public_bytes(Encoding.DER)).common_name or None
    except ValueError:
        return None


class FrontProxyVerifier:
    """Verify client chains against the requestheader CA roots and the allowed names, as kube-apiserver does."""

    def __init__(self, roots: Sequence[x509.Certificate], allowed_names: Sequence[str] = ()) -> None:
        if not roots:
            raise ValueError("the requestheader CA bundle holds no certificate")
        try:
            self._roots = Pool([parse_certificate(c.public_bytes(Encoding.DER)) for c in roots])
        except ValueError:
            raise ValueError("the requestheader CA bundle holds a certificate Go cannot parse") from None
        self.allowed_names = frozenset(allowed_names)
        self.verifications = 0  # how often a chain was verified (once per connection, not per request)

    def verify(self, chain: Sequence[x509.Certificate], now: dt.datetime) -> FrontProxyResult:
        """``chain`` is what the client presented, leaf first."""
        return self.verify_der([cert.public_bytes(Encoding.DER) for cert in chain], now)

    def verify_der(self, chain: Sequence[bytes], now: dt.datetime) -> FrontProxyResult:
        """``chain`` is the DER the client presented, leaf first. Every certificate must parse as Go's TLS stack
        parses it, or the handshake (and so the request) would not have reached kube-apiserver."""
        self.verifications += 1
        if not chain:
            return NO_CERTIFICATE
        try:
            presented = [parse_certificate(der) for der in chain]
        except ValueError:
            return FrontProxyResult(False, Reason.UNTRUSTED_CA)
        outcome = verify_chain(presented[0], presented[1:], self._roots, now)
        if not outcome.chains:
            return FrontProxyResult(False, _FAILURES[outcome.failure])
        if self.allowed_names and presented[0].common_name not in self.allowed_names:
            return FrontProxyResult(False, Reason.NAME_NOT_ALLOWED)
        # The grant holds while every certificate of one verified chain is valid.
        verified = outcome.chains[0]
        valid_from = max(cert.not_before for cert in verified)
        valid_until = min(cert.not_after for cert in verified)
        return FrontProxyResult(True, Reason.FRONT_PROXY, valid_from, valid_until)


def shares_ca(client_cas: Sequence[x509.Certificate], requestheader_cas: Sequence[x509.Certificate]) -> bool:
    """True when a certificate is in both bundles: with no allowed names, any client certificate could then act
    as the front proxy (kube-apiserver refuses to start so since v1.35)."""
    return bool(
        {c.fingerprint(hashes.SHA256()) for c in client_cas}
        & {c.fingerprint(hashes.SHA256()) for c in requestheader_cas}
    )
