"""One trust as kube-apiserver's x509 authenticator checks it (pure: time is passed in). Used for three trusts:
the front proxy (``--requestheader-client-ca-file`` and allowed names), client-CA users (``--client-ca-file``)
and load readers (``--endpoint-load-metrics-client-ca-file``).

The client certificate verifies against the CA bundle only, exactly as ``k8s.io/apiserver/pkg/authentication/
request/x509`` does with Go's ``crypto/x509`` (see :mod:`secure_orca.x509.verify`: intermediates from the
client, ExtKeyUsage clientAuth on every certificate that lists usages, validity of every certificate at the
current time), and its Subject CN (Go's: the last CN attribute) is an allowed name (empty list: any certificate
from that CA). SANs are never consulted. Any certificate, however malformed, gives a refusal, never an exception;
refusals are :class:`Failure` codes, which ``authz`` maps to its reasons.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.serialization import Encoding

from secure_orca.x509.parse import GoCertificate, parse_certificate
from secure_orca.x509.verify import MAX_VERIFICATION_COST, Pool
from secure_orca.x509.verify import verify as verify_chain


class Failure(StrEnum):
    """Why a presented chain does not hold for a trust (values are stable: logged and counted)."""

    NO_CERTIFICATE = "no-certificate"
    UNTRUSTED = "untrusted-ca"
    EKU = "eku"
    EXPIRED = "expired"
    NAME_NOT_ALLOWED = "name-not-allowed"


_FAILURES = {"expired": Failure.EXPIRED, "eku": Failure.EKU, "untrusted": Failure.UNTRUSTED}
# Go's crypto/tls ends the handshake when a presented certificate's RSA key is over 8192 bits
# (handshake_server.go processCertsFromClient, defaultMaxRSAKeySize in handshake_client.go, Go 1.26.0).
MAX_PRESENTED_RSA_BITS = 8192


PARSED = 64  # certificates kept parsed: a chain's, read again by ChainCache for its recheck time, and a few more


@functools.lru_cache(maxsize=PARSED)
def parsed(der: bytes) -> GoCertificate:
    """``parse_certificate``, remembered for the last few certificates (pure; a parsed certificate is only read)."""
    return parse_certificate(der)


Window = tuple[dt.datetime, dt.datetime]  # from notBefore to notAfter, both included


@dataclass(frozen=True)
class ChainResult:
    """The outcome of verifying one connection's certificate chain. ``windows``: one per verified chain, the
    time in which every certificate of that chain is valid; the grant holds while any of them does (Go builds
    chains at the current time, so a CA renewed with the same key keeps a chain once the old one expires)."""

    ok: bool
    failure: Failure | None = None  # None exactly when ok
    windows: tuple[Window, ...] = ()

    def holds_at(self, now: dt.datetime) -> bool:
        return self.ok and any(start <= now <= end for start, end in self.windows)


NO_CERTIFICATE = ChainResult(False, Failure.NO_CERTIFICATE)
UNTRUSTED = ChainResult(False, Failure.UNTRUSTED)


def common_name(cert: x509.Certificate) -> str | None:
    """The Subject's Common Name as Go's ``pkix.Name.CommonName`` gives it: the last CN attribute (None when the
    subject has none or Go could not read the certificate)."""
    try:
        return parse_certificate(cert.public_bytes(Encoding.DER)).common_name or None
    except ValueError:
        return None


class ChainVerifier:
    """Verify client chains against one CA bundle (the roots) and its allowed names, as kube-apiserver does."""

    def __init__(self, roots: Sequence[x509.Certificate], allowed_names: Sequence[str] = ()) -> None:
        if not roots:
            raise ValueError("the CA bundle holds no certificate")
        try:
            self._roots = Pool([parse_certificate(c.public_bytes(Encoding.DER)) for c in roots])
        except ValueError:
            raise ValueError("the CA bundle holds a certificate Go cannot parse") from None
        self.allowed_names = frozenset(allowed_names)
        self.verifications = 0  # how often a chain was verified (once per connection, not per request)
        self.signature_operations = 0  # public-key operations those verifications ran
        self.signature_cost = 0  # and their work (verify.signature_cost units)

    def verify(self, chain: Sequence[x509.Certificate], now: dt.datetime) -> ChainResult:
        """``chain`` is what the client presented, leaf first."""
        return self.verify_der([cert.public_bytes(Encoding.DER) for cert in chain], now)

    def verify_der(
        self,
        chain: Sequence[bytes],
        now: dt.datetime,
        budget: int = MAX_VERIFICATION_COST,
        spent: list[int] | None = None,
    ) -> ChainResult:
        """``chain`` is the DER the client presented, leaf first. Every certificate must parse as Go's TLS stack
        parses it, or the handshake (and so the request) would not have reached kube-apiserver. ``budget`` bounds
        the signature work (``verify.signature_cost`` units); ``spent``, when given, receives [the work done,
        1 if the budget stopped a check else 0]."""
        self.verifications += 1
        if not chain:
            return NO_CERTIFICATE
        try:
            presented = [parsed(der) for der in chain]
        except ValueError:
            return UNTRUSTED
        if any(c.rsa is not None and c.rsa[0].bit_length() > MAX_PRESENTED_RSA_BITS for c in presented):
            return UNTRUSTED
        # The intermediates in one canonical order: the verdict is the same whatever order the client chose.
        intermediates = sorted(presented[1:], key=lambda cert: cert.raw)
        outcome = verify_chain(presented[0], intermediates, self._roots, now, min(budget, MAX_VERIFICATION_COST))
        self.signature_operations += outcome.operations
        self.signature_cost += outcome.cost
        if spent is not None:
            spent[:] = [outcome.cost, int(outcome.exhausted)]
        if not outcome.chains:
            return ChainResult(False, _FAILURES[outcome.failure])
        if self.allowed_names and presented[0].common_name not in self.allowed_names:
            return ChainResult(False, Failure.NAME_NOT_ALLOWED)
        # The grant holds while every certificate of some verified chain is valid.
        windows = {(max(c.not_before for c in chain), min(c.not_after for c in chain)) for chain in outcome.chains}
        return ChainResult(True, None, tuple(sorted(windows)))


def shares_ca(client_cas: Sequence[x509.Certificate], requestheader_cas: Sequence[x509.Certificate]) -> bool:
    """True when a certificate is in both bundles: with no allowed names, any client certificate could then act
    as the front proxy (kube-apiserver refuses to start so since v1.35)."""
    return bool(
        {c.fingerprint(hashes.SHA256()) for c in client_cas}
        & {c.fingerprint(hashes.SHA256()) for c in requestheader_cas}
    )
