"""Who may read a load report: the three options of KEP-6315 as one policy (pure: time is passed in).

- ``front-proxy``: the client certificate verifies against the requestheader CA only, as kube-apiserver's
  ``pkg/authentication/request/x509`` does (intermediates from the client, ExtKeyUsage clientAuth where the
  extension is present, validity at the current time), and its Subject CN is an allowed name (empty list:
  any certificate from that CA). SANs are never consulted.
- ``shared-secret``: the opt-in carries ``secret=`` equal to one of the configured secrets (constant time).
- ``header-only``: the opt-in alone suffices (the KEP's option 1).

Reasons are short codes, safe to log and count; no decision ever carries a secret.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.x509 import verification
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from secure_orca.authz.reasons import Reason

_CLIENT_EKUS = frozenset({ExtendedKeyUsageOID.CLIENT_AUTH, ExtendedKeyUsageOID.ANY_EXTENDED_KEY_USAGE})




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
    """The Subject's first Common Name, as Go's ``pkix.Name.CommonName`` gives it."""
    names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    if not names:
        return None
    value = names[0].value
    return value if isinstance(value, str) else value.decode("utf-8", "replace")


def _eku_allows_client(cert: x509.Certificate) -> bool:
    try:
        usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        return True  # no EKU extension: any usage, as Go's x509 treats it
    return any(oid in _CLIENT_EKUS for oid in usages)


class FrontProxyVerifier:
    """Verify client chains against the requestheader CA roots and the allowed names."""

    def __init__(self, roots: Sequence[x509.Certificate], allowed_names: Sequence[str] = ()) -> None:
        if not roots:
            raise ValueError("the requestheader CA bundle holds no certificate")
        self._store = verification.Store(list(roots))
        self.allowed_names = frozenset(allowed_names)
        self.verifications = 0  # how often a chain was verified (once per connection, not per request)

    def verify(self, chain: Sequence[x509.Certificate], now: dt.datetime) -> FrontProxyResult:
        """``chain`` is what the client presented, leaf first."""
        self.verifications += 1
        if not chain:
            return NO_CERTIFICATE
        leaf, intermediates = chain[0], list(chain[1:])
        start, end = leaf.not_valid_before_utc, leaf.not_valid_after_utc
        if not start <= now <= end:
            return FrontProxyResult(False, Reason.EXPIRED)
        builder = (
            verification.PolicyBuilder()
            .store(self._store)
            .time(now)
            .extension_policies(
                ca_policy=verification.ExtensionPolicy.webpki_defaults_ca(),
                ee_policy=verification.ExtensionPolicy.permit_all(),
            )
        )
        try:
            verified = builder.build_client_verifier().verify(leaf, intermediates)
        except verification.VerificationError as error:
            return FrontProxyResult(False, Reason.EXPIRED if "validation time" in str(error) else Reason.UNTRUSTED_CA)
        if not all(_eku_allows_client(cert) for cert in verified.chain[:-1]):
            return FrontProxyResult(False, Reason.EKU)
        if self.allowed_names and common_name(leaf) not in self.allowed_names:
            return FrontProxyResult(False, Reason.NAME_NOT_ALLOWED)
        # The grant holds while every certificate in the verified chain is valid.
        valid_from = max(cert.not_valid_before_utc for cert in verified.chain)
        valid_until = min(cert.not_valid_after_utc for cert in verified.chain)
        return FrontProxyResult(True, Reason.FRONT_PROXY, valid_from, valid_until)


def shares_ca(client_cas: Sequence[x509.Certificate], requestheader_cas: Sequence[x509.Certificate]) -> bool:
    """True when a certificate is in both bundles: with no allowed names, any client certificate could then act
    as the front proxy (kube-apiserver refuses to start so since v1.35)."""
    return bool(
        {c.fingerprint(hashes.SHA256()) for c in client_cas}
        & {c.fingerprint(hashes.SHA256()) for c in requestheader_cas}
    )






