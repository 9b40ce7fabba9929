"""Go's ``Certificate.Verify`` with kube-apiserver's options (``crypto/x509/verify.go``, Go 1.26.0), mirrored
(pure: time is passed in): chain building, signature checks, validity, key usages and policies.

kube-apiserver's x509 authenticator (``k8s.io/apiserver/pkg/authentication/request/x509``, commit
24a394e516bfda066d7e2221d7d92c052de27c54, go.mod ``go 1.26.0``) calls ``Certificate.Verify`` with a CA bundle as
roots, the rest of the presented chain as intermediates and ``ExtKeyUsageClientAuth``.

Not mirrored (refused instead, listed in docs/x509-differential.md): certificate-policy processing when
certificates below the root carry both certificatePolicies and policy constraints, mappings or inhibitAnyPolicy.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa

import secure_orca.x509.der as der
from secure_orca.x509.constraints import constraints_hold
from secure_orca.x509.der import Reader
from secure_orca.x509.parse import (
    EKU_ANY,
    EKU_CLIENT_AUTH,
    KEY_DSA,
    KEY_EC,
    KEY_ED25519,
    KEY_RSA,
    KEY_USAGE_CERT_SIGN,
    KEY_X25519,
    GoCertificate,
)

MAX_SIGNATURE_CHECKS = 100  # Go's maxChainSignatureChecks
# Go 1.26.0 refuses these RSA keys before any modular exponentiation: crypto/rsa/rsa.go checkKeySize (below 1024
# bits, GODEBUG rsa1024min), crypto/internal/fips140/rsa/rsa.go checkPublicKey (an even modulus, an exponent
# below 2, even, or above 2^31-1).
MIN_RSA_BITS = 1024
MAX_RSA_EXPONENT = (1 << 31) - 1
# Our bound, not Go's: the signature work one verification may do, in units of one RSA-2048 (e = 65537) public
# operation. Go's 100 checks with RSA-8192 keys and e = 2^31-1 would cost about 2,900 units; a real chain costs a
# few. A verification that would exceed it stops looking, as at Go's 100 checks (a refusal, never a grant).
MAX_VERIFICATION_COST = 256


def signature_cost(parent: GoCertificate) -> int:
    """The work of one signature check with ``parent``'s key, in RSA-2048 (e = 65537) public operations: an RSA
    public operation grows with the square of the modulus and the length of the exponent; EC and Ed25519 are one."""
    if parent.rsa is None:
        return 1
    modulus, exponent = parent.rsa
    return max(1, modulus.bit_length() ** 2 * exponent.bit_length() // (2048 * 2048 * 17))


def operation_cost(child: GoCertificate, parent: GoCertificate) -> int:
    """The work of checking ``child``'s signature with ``parent``'s key: its ``signature_cost``, or 0 where the
    check stops before any public-key operation. That is a signature algorithm of another key type, or an RSA
    signature whose length is not the modulus's (RFC 8017 8.2.2; Go 1.26.0 crypto/internal/fips140/rsa
    verifyPKCS1v15 and verifyPSS refuse it first). The budget is charged the work done, not the key's size: a
    decoy RSA-8192 "issuer" of a certificate signed with a 2048-bit key costs nothing to refuse."""
    oid = child.signature_oid
    algorithm = KEY_RSA if oid == _RSA_PSS else _SIGNATURES[oid][0] if oid in _SIGNATURES else None
    if algorithm != parent.key_oid:
        return 0
    if parent.rsa is not None and len(child.signature) != (parent.rsa[0].bit_length() + 7) // 8:
        return 0
    return signature_cost(parent)


_KNOWN_KEYS = frozenset({KEY_RSA, KEY_EC, KEY_ED25519, KEY_X25519, KEY_DSA})
_HASHES: dict[str, type[hashes.HashAlgorithm]] = {
    "2.16.840.1.101.3.4.2.1": hashes.SHA256,
    "2.16.840.1.101.3.4.2.2": hashes.SHA384,
    "2.16.840.1.101.3.4.2.3": hashes.SHA512,
}
# signature OID -> (key algorithm, hash); SHA-1 and MD5 are known to Go and refused for certificates.
_SIGNATURES: dict[str, tuple[str, type[hashes.HashAlgorithm] | None]] = {
    "1.2.840.113549.1.1.11": (KEY_RSA, hashes.SHA256),
    "1.2.840.113549.1.1.12": (KEY_RSA, hashes.SHA384),
    "1.2.840.113549.1.1.13": (KEY_RSA, hashes.SHA512),
    "1.2.840.10045.4.3.2": (KEY_EC, hashes.SHA256),
    "1.2.840.10045.4.3.3": (KEY_EC, hashes.SHA384),
    "1.2.840.10045.4.3.4": (KEY_EC, hashes.SHA512),
    "1.3.101.112": (KEY_ED25519, None),
}
_RSA_PSS = "1.2.840.113549.1.1.10"


# --- verification (Go's Certificate.Verify with kube's options) ----------------------------------------------


class Pool:
    """Go's CertPool: certificates by raw subject, duplicates (same DER) dropped, insertion order kept."""

    def __init__(self, certificates: Sequence[GoCertificate] = ()) -> None:
        self.certificates: list[GoCertificate] = []
        for cert in certificates:
            if not self.contains(cert):
                self.certificates.append(cert)

    def contains(self, cert: GoCertificate) -> bool:
        return any(c.raw == cert.raw for c in self.certificates)

    def potential_parents(self, child: GoCertificate) -> list[GoCertificate]:
        """Same-name candidates, matching key identifiers first, then one-sided, then mismatched."""
        ranked: tuple[list[GoCertificate], list[GoCertificate], list[GoCertificate]] = ([], [], [])
        for cert in self.certificates:
            if cert.raw_subject != child.raw_issuer:
                continue
            skid, akid = cert.ext.subject_key_id, child.ext.authority_key_id
            rank = 0 if skid == akid else 1 if bool(skid) != bool(akid) else 2
            ranked[rank].append(cert)
        return [*ranked[0], *ranked[1], *ranked[2]]


@dataclass(frozen=True)
class Outcome:
    """What Verify returned: the chains found, or why there are none (``expired``, ``eku``, ``untrusted``)."""

    chains: tuple[tuple[GoCertificate, ...], ...] = ()
    failure: str = ""
    operations: int = 0  # public-key operations run (signature checks that reached the key)
    cost: int = 0  # their work, in signature_cost units
    exhausted: bool = False  # the budget stopped the search: a refusal may be the budget's, not the chain's


def _valid_at(cert: GoCertificate, now: dt.datetime) -> bool:
    return cert.not_before <= now <= cert.not_after


def rsa_key_usable(cert: GoCertificate) -> bool:
    """Whether Go's crypto/rsa would run a public-key operation with this certificate's RSA key at all."""
    if cert.rsa is None:
        return False
    modulus, exponent = cert.rsa
    return (
        modulus & 1 == 1
        and modulus.bit_length() >= MIN_RSA_BITS
        and 2 <= exponent <= MAX_RSA_EXPONENT
        and exponent & 1 == 1
    )


def check_signature(child: GoCertificate, parent: GoCertificate, operations: list[int] | None = None) -> bool:
    """Go's CheckSignatureFrom (SHA-1 and MD5 refused, RSA keys Go's crypto/rsa refuses refused before any
    operation). ``operations[0]`` counts the public-key operations run."""
    ext = parent.ext
    if (parent.version == 3 and not ext.basic_constraints_valid) or (ext.basic_constraints_valid and not ext.is_ca):
        return False
    if ext.key_usage and not ext.key_usage & KEY_USAGE_CERT_SIGN:
        return False
    if parent.key_oid not in _KNOWN_KEYS or (parent.key_oid == KEY_RSA and not rsa_key_usable(parent)):
        return False
    if parent.key_shifted:
        return False  # Go verifies with the right-aligned key, which did not make this signature
    if child.signature_oid == KEY_ED25519 and child.signature_params:
        return False  # x509.go getSignatureAlgorithmFromAI: Ed25519 parameters must be absent (RFC 8410)
    cost = operation_cost(child, parent)
    if not cost:
        return False
    if operations is not None:  # [public-key operations, their signature_cost]
        operations[0] += 1
        operations[1] += cost
    try:
        key = serialization.load_der_public_key(parent.raw_spki)
        if child.signature_oid == _RSA_PSS:
            hash_type = _pss_hash(child.signature_params)
            if not isinstance(key, rsa.RSAPublicKey):
                return False
            algorithm = hash_type()
            pss = padding.PSS(mgf=padding.MGF1(algorithm), salt_length=algorithm.digest_size)
            key.verify(child.signature, child.tbs, pss, algorithm)
            return True
        key_oid, hash_class = _SIGNATURES[child.signature_oid]
        if key_oid == KEY_RSA and isinstance(key, rsa.RSAPublicKey) and hash_class:
            key.verify(child.signature, child.tbs, padding.PKCS1v15(), hash_class())
        elif key_oid == KEY_EC and isinstance(key, ec.EllipticCurvePublicKey) and hash_class:
            key.verify(child.signature, child.tbs, ec.ECDSA(hash_class()))
        elif key_oid == KEY_ED25519 and isinstance(key, ed25519.Ed25519PublicKey):
            key.verify(child.signature, child.tbs)
        else:
            return False
    except (KeyError, ValueError, InvalidSignature, UnsupportedAlgorithm):
        return False
    return True


def _pss_hash(params: bytes) -> type[hashes.HashAlgorithm]:
    """The hash of RSASSA-PSS parameters Go accepts (x509.go getSignatureAlgorithmFromAI, Go 1.26.0): the hash
    and MGF1's hash the same, each with absent or NULL parameters, salt = hash size, trailer 1."""
    body = Reader(params).sub(der.SEQUENCE)
    hash_id = body.sub(der.context(0, True)).sub(der.SEQUENCE)
    hash_oid = hash_id.oid()
    mgf = body.sub(der.context(1, True)).sub(der.SEQUENCE)
    if mgf.oid() != "1.2.840.113549.1.1.8":
        raise ValueError("PSS mask generation")
    mgf_hash = mgf.sub(der.SEQUENCE)
    if mgf_hash.oid() != hash_oid:
        raise ValueError("PSS mask generation hash")
    for algorithm in (hash_id, mgf_hash):
        if algorithm.data[algorithm.pos :] not in (b"", b"\x05\x00"):
            raise ValueError("PSS hash parameters")
    hash_class = _HASHES[hash_oid]
    if body.sub(der.context(2, True)).integer() != hash_class().digest_size:
        raise ValueError("PSS salt length")
    if not body.empty() and body.sub(der.context(3, True)).integer() != 1:
        raise ValueError("PSS trailer")
    return hash_class


def _already_in_chain(candidate: GoCertificate, chain: Sequence[GoCertificate]) -> bool:
    return any(
        c.raw_subject == candidate.raw_subject and c.raw_spki == candidate.raw_spki and c.ext.san == candidate.ext.san
        for c in chain
    )


def _ca_valid(cert: GoCertificate, intermediate: bool, chain: Sequence[GoCertificate], now: dt.datetime) -> bool:
    """Go's isValid for a candidate parent."""
    ext = cert.ext
    if ext.unhandled_critical or not _valid_at(cert, now):
        return False
    if intermediate and not (ext.basic_constraints_valid and ext.is_ca):
        return False
    return not (ext.basic_constraints_valid and ext.max_path_len >= 0 and len(chain) - 1 > ext.max_path_len)


def _build(
    chain: tuple[GoCertificate, ...],
    roots: Pool,
    intermediates: Pool,
    now: dt.datetime,
    checks: list[int],
    operations: list[int],
    budget: int | None,
) -> list[tuple[GoCertificate, ...]]:
    found: list[tuple[GoCertificate, ...]] = []
    child = chain[-1]
    candidates = [(c, False) for c in roots.potential_parents(child)]
    candidates += [(c, True) for c in intermediates.potential_parents(child)]
    for candidate, intermediate in candidates:
        if candidate.key_oid not in _KNOWN_KEYS or _already_in_chain(candidate, chain):
            continue
        checks[0] += 1
        if checks[0] > MAX_SIGNATURE_CHECKS:
            continue
        if budget is not None and operations[1] + operation_cost(child, candidate) > budget:
            operations[2] = 1
            continue
        if not check_signature(child, candidate, operations) or not _ca_valid(candidate, intermediate, chain, now):
            continue
        if intermediate:
            found += _build((*chain, candidate), roots, intermediates, now, checks, operations, budget)
        else:
            found.append((*chain, candidate))
    return found


def _eku_allows_client(chain: Sequence[GoCertificate]) -> bool:
    """Go's checkChainForKeyUsage for [ClientAuth]: every certificate with an EKU list must allow it (or any)."""
    return all(
        not c.ext.ext_key_usages or EKU_ANY in c.ext.ext_key_usages or EKU_CLIENT_AUTH in c.ext.ext_key_usages
        for c in chain
    )


def _policies_valid(chain: Sequence[GoCertificate]) -> bool:
    """Go's policiesValid (RFC 5280 6.1 as updated by RFC 9618) with no user policy set. Mirrored exactly where no
    certificate below the root carries certificatePolicies (the valid-policy graph is then empty, and only the
    explicit-policy counter decides) or none carries policy constraints, mappings or inhibitAnyPolicy (nothing
    can then fail). The rest, policies together with those constraints, is refused: not mirrored."""
    below = chain[:-1]
    if not any(c.ext.policy_processing for c in below):
        return True
    if any(c.ext.has_policies for c in below):
        return False
    explicit = len(chain)  # n + 1, n = certificates below the trust anchor
    for index in range(len(below) - 1, -1, -1):
        cert = chain[index]
        if explicit == 0:
            return False
        if index:
            if cert.raw_issuer != cert.raw_subject and explicit:
                explicit -= 1
            required = cert.ext.require_explicit_policy
            if required is not None and required < explicit:
                explicit = required
    explicit = max(explicit - 1, 0)
    if chain[0].ext.require_explicit_policy == 0:
        explicit = 0
    return explicit != 0


def verify(
    leaf: GoCertificate,
    intermediates: Sequence[GoCertificate],
    roots: Pool,
    now: dt.datetime,
    budget: int | None = None,
) -> Outcome:
    """Go's ``leaf.Verify`` with ``Roots=roots``, ``Intermediates`` the rest of the chain, ``KeyUsages=[ClientAuth]``
    and ``CurrentTime=now``; ``budget`` (None: Go's limits only) bounds the signature_cost of the checks run."""
    if leaf.ext.unhandled_critical:
        return Outcome(failure="untrusted")
    if not _valid_at(leaf, now):
        return Outcome(failure="expired")
    operations = [0, 0, 0]  # operations, their cost, whether the budget stopped a check
    candidates: list[tuple[GoCertificate, ...]]
    if roots.contains(leaf):
        candidates = [(leaf,)]
    else:
        candidates = _build((leaf,), roots, Pool(intermediates), now, [0], operations, budget)
    if not candidates:
        return Outcome(failure="untrusted", operations=operations[0], cost=operations[1], exhausted=bool(operations[2]))
    usable = [c for c in candidates if _policies_valid(c) and _eku_allows_client(c) and constraints_hold(c)]
    if usable:
        return Outcome(tuple(usable), operations=operations[0], cost=operations[1], exhausted=bool(operations[2]))
    # Go's IncompatibleUsage only when every candidate failed on its usage alone (none on policies or names)
    eku_only = all(_policies_valid(c) and not _eku_allows_client(c) for c in candidates)
    failure = "eku" if eku_only else "untrusted"
    return Outcome(failure=failure, operations=operations[0], cost=operations[1], exhausted=bool(operations[2]))
