"""Client certificates from --client-ca-file (kube's ``request/x509``, CommonNameUserConversion).

The chain is verified by the caller with the same verifier the front-proxy check uses (intermediates from
the client, clientAuth EKU where present, validity now), against the client CA bundle. A chain that does not
verify is an error (401 unless another authenticator succeeds); a verified certificate with no Common Name is
not this authenticator's. The user is the Subject's Common Name as Go's ``pkix.Name.CommonName`` reads it:
the LAST CN attribute with a string value; every Organization is a group, in order; the single UID attribute
(0.9.2342.19200300.100.1.1, kube's AllowParsingUserUIDFromCertAuth, beta and on) is the uid; extra carries
the credential id ``X509SHA256=<hex of the certificate's DER>``.
"""

from __future__ import annotations

import functools
import hashlib

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding
from cryptography.x509.oid import NameOID

from secure_orca.authn.authenticator import NOT_MINE, Outcome, Request, failure
from secure_orca.authn.user import CREDENTIAL_ID_KEY, UserInfo


def _strings(cert: x509.Certificate, oid: x509.ObjectIdentifier) -> list[str]:
    """Values of ``oid`` in the Subject, in order, skipping values that are not strings (as Go does)."""
    return [a.value for a in cert.subject.get_attributes_for_oid(oid) if isinstance(a.value, str)]


def common_name(cert: x509.Certificate) -> str:
    """Go's ``pkix.Name.CommonName``: the last string-valued CN of the Subject, or ``""``."""
    names = _strings(cert, NameOID.COMMON_NAME)
    return names[-1] if names else ""


@functools.lru_cache(maxsize=1024)
def user_of(cert: x509.Certificate) -> Outcome:
    """The user a verified client certificate names (kube's CommonNameUserConversion); a certificate's user
    never changes, so it is computed once per certificate."""
    name = common_name(cert)
    if not name:
        return NOT_MINE
    uids = [a.value for a in cert.subject.get_attributes_for_oid(NameOID.USER_ID)]
    if any(not isinstance(uid, str) for uid in uids):
        return Outcome(error="x509: unable to parse UID into a string")
    if len(uids) > 1:
        return Outcome(error="x509: expected 1 UID, but found multiple")
    if uids == [""]:
        return Outcome(error="x509: UID cannot be an empty string")
    credential = "X509SHA256=" + hashlib.sha256(cert.public_bytes(Encoding.DER)).hexdigest()
    return Outcome(
        UserInfo(
            name,
            str(uids[0]) if uids else "",
            tuple(_strings(cert, NameOID.ORGANIZATION_NAME)),
            {CREDENTIAL_ID_KEY: (credential,)},
        )
    )


def authenticate(request: Request) -> Outcome:
    if request.leaf is None:
        return NOT_MINE
    if not request.client_cert.holds_at(request.now):
        return Outcome(error=f"x509: {failure(request.client_cert)}")
    return user_of(request.leaf)
