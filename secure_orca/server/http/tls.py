"""TLS for the gateway: the server context, and the ASGI TLS extension hypercorn lacks.

The handshake follows kube-apiserver where Python's ssl allows: a client certificate is requested (with the
union of --client-ca-file and --requestheader-client-ca-file as trust anchors) but not required, and its
validity period is not checked in the handshake (the front-proxy check does that per request). Unlike Go,
OpenSSL cannot be told to accept a certificate from an unknown CA or one whose ExtKeyUsage excludes
clientAuth: such handshakes fail, which refuses the report all the same. The key exchange is Go's
(``tls_policy``: X25519, P-256, P-384, P-521, ECDHE suites only), so no client can choose a costly handshake.
"""

from __future__ import annotations

import _ssl
import ssl
import warnings
from typing import Any

from cryptography import x509

from secure_orca.credentials.kinds import KeyPair
from secure_orca.server.http import tls_policy

# OpenSSL's X509_V_FLAG_NO_CHECK_TIME: leave validity to the per-request front-proxy check, as Go does.
_NO_CHECK_TIME = 0x200000
_ENCODING_DER = _ssl.ENCODING_DER
_TLS_VERSIONS = {"TLSv1.2": 0x0303, "TLSv1.3": 0x0304}


def peer_chain_der(ssl_object: ssl.SSLObject) -> list[bytes]:
    """The chain the client presented, leaf first. Python 3.11 exposes only the leaf publicly; the
    private ``get_unverified_chain`` (public from 3.13) adds the intermediates where present."""
    leaf = ssl_object.getpeercert(binary_form=True)
    if not leaf:
        return []
    inner = getattr(ssl_object, "_sslobj", None)
    getter = getattr(ssl_object, "get_unverified_chain", None) or getattr(inner, "get_unverified_chain", None)
    if getter is not None:
        chain = getter() or []
        ders = [c if isinstance(c, bytes) else c.public_bytes(_ENCODING_DER) for c in chain]
        if ders and ders[0] == leaf:
            return ders
    return [leaf]


def subject_name(leaf: bytes) -> str | None:
    """The leaf's subject as RFC 4514 text, or None where cryptography cannot read the certificate: the chain
    is passed on all the same, for the front-proxy verifier reads certificates as Go does, not as cryptography."""
    with warnings.catch_warnings():  # a client's odd certificate must not write warnings to our log
        warnings.simplefilter("ignore")
        try:
            return x509.load_der_x509_certificate(leaf).subject.rfc4514_string()
        except (ValueError, x509.InvalidVersion):
            return None


def tls_extension(ssl_object: ssl.SSLObject | None) -> dict[str, Any] | None:
    """The ASGI TLS extension (asgiref specs/tls.rst v0.2) for one connection."""
    if ssl_object is None:
        return None
    chain = peer_chain_der(ssl_object)
    pems = [ssl.DER_cert_to_PEM_cert(der) for der in chain]
    cipher = ssl_object.cipher()
    return {
        "server_cert": None,
        "client_cert_chain": pems,
        "client_cert_name": subject_name(chain[0]) if chain else None,
        "client_cert_error": None,
        "tls_version": _TLS_VERSIONS.get(ssl_object.version() or ""),
        "cipher_suite": None,
        "cipher_name": cipher[0] if cipher else None,  # not in the spec: hypercorn cannot give the IANA id
    }


def make_server_context(serving: KeyPair, anchors: bytes) -> ssl.SSLContext:
    """TLS 1.2+ server context with ALPN h2 and http/1.1, requesting (not requiring) a client certificate.

    ``serving`` and ``anchors`` (DER, concatenated) come from the credential loader: the handshake trusts exactly
    the certificates kube-apiserver reads from the CA files, from the same parse the authenticators use, and,
    as Go, accepts any of them as a trust anchor, self-signed or not (partial chains)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.options |= ssl.OP_NO_COMPRESSION
    context.set_alpn_protocols(["h2", "http/1.1"])
    tls_policy.apply(context)  # Go's key-exchange groups and ECDHE suites: no client-chosen costly handshake
    serving.load_into(context)
    if anchors:
        context.load_verify_locations(cadata=anchors)
        context.verify_mode = ssl.CERT_OPTIONAL
        context.verify_flags |= _NO_CHECK_TIME | ssl.VERIFY_X509_PARTIAL_CHAIN
        # No resumption where client certificates count: a resumed session gives back the leaf without the
        # intermediates, so a front proxy chaining through one would lose its grant (TLS 1.2 and 1.3). No
        # tickets, and no session cache (TLS 1.2 session IDs): every connection is a full handshake.
        context.options |= ssl.OP_NO_TICKET
        context.num_tickets = 0
        tls_policy.disable_session_cache(context)
    else:
        context.verify_mode = ssl.CERT_NONE
    return context
