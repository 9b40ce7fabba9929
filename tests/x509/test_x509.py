"""The pure pieces of the Go mirror, without Go: DER strictness, Go's CN rule, client-go's bundle reading, and
the promise that no certificate, however malformed, makes the verifier raise."""

from __future__ import annotations

import datetime as dt

import pytest
from cryptography import x509
from hypothesis import given, settings
from hypothesis import strategies as st

from secure_orca.x509 import der, parse, pem, verify
from secure_orca.x509.chainverifier import ChainResult, ChainVerifier, Failure, common_name, parsed, shares_ca
from secure_orca.x509.parse import GoCertificate
from secure_orca.x509.verify import Pool
from tests import x509corpus as shapes


def test_an_end_marker_glued_to_the_base64_ends_no_block() -> None:
    """Go's pem.Decode needs the END marker at the start of a line; a block whose END follows the
    base64 on the same line is skipped, and only the next block is read (Go reads 1 CA here, not 2)."""
    first, second = shapes.root(), shapes.root("second-ca")
    glued = shapes.pem(first.der).replace(b"\n-----END", b"-----END")
    assert pem.ca_bundle(glued + shapes.pem(second.der)) == [second.der]
    assert pem.ca_bundle(shapes.pem(second.der) + glued) == [second.der]


@pytest.mark.parametrize(
    "encoding",
    [
        b"\x04\x81\x01a",  # long form for a short length
        b"\x04\x82\x00\x81" + b"a" * 0x81,  # leading zero length byte
        b"\x04\x80a\x00\x00",  # indefinite length
        b"\x1f\x22\x01a",  # high tag number
        b"\x04\x05abc",  # truncated
    ],
)
def test_der_reader_refuses_what_cryptobyte_refuses(encoding: bytes) -> None:
    with pytest.raises(der.Malformed):
        der.Reader(encoding).read(der.OCTET_STRING)


@pytest.mark.parametrize("value", [b"\x00\x01", b"\xff\x80", b""])
def test_non_minimal_integers_are_refused(value: bytes) -> None:
    with pytest.raises(der.Malformed):
        der.decode_integer(value)


def test_go_takes_the_last_common_name() -> None:
    attributes = [(parse.COMMON_NAME, "front-proxy-client"), ("2.5.4.10", "o"), (parse.COMMON_NAME, "x")]
    assert parse.go_common_name(attributes) == "x"
    assert parse.go_common_name([("2.5.4.10", "o")]) == ""


def test_common_name_is_go_s_last_cn_or_none() -> None:
    """chainverifier.common_name (the user's name in authn/x509): Go's last CN, None for a subject without one."""
    ca = shapes.root()
    assert common_name(shapes.leaf(ca, "front-proxy-client").cert) == "front-proxy-client"
    organization = x509.Name([x509.NameAttribute(x509.NameOID.ORGANIZATION_NAME, "o")])
    assert common_name(shapes.make(organization, ca).cert) is None


def test_a_verifier_without_roots_is_refused() -> None:
    """An empty CA bundle is a configuration error (kube-apiserver does not start), not a verifier that refuses
    every chain."""
    with pytest.raises(ValueError, match="no certificate"):
        ChainVerifier([], ["front-proxy-client"])


def test_shares_ca_only_for_a_certificate_in_both_bundles() -> None:
    one, other = shapes.root("one").cert, shapes.root("other").cert
    assert shares_ca([one, other], [other])
    assert not shares_ca([one], [other])


def test_bundle_blocks_with_headers_or_other_types_are_skipped() -> None:
    ca = shapes.root()
    headers = "Proc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,00\n\n"
    assert pem.ca_bundle(shapes.pem(b"\x30\x00", kind="PRIVATE KEY") + shapes.pem(ca.der)) == [ca.der]
    with pytest.raises(der.Malformed):
        pem.ca_bundle(shapes.pem(ca.der, headers=headers))
    with pytest.raises(der.Malformed):
        pem.ca_bundle(shapes.pem(ca.der) + shapes.pem(b"\x30\x03\x02\x01\x01"))


def test_no_certificate_of_the_corpus_makes_the_verifier_raise() -> None:
    """Every presented chain of the corpus, against every CA bundle it comes with: a result, never an exception
    (a malformed extension once gave a 500 with a traceback)."""
    outcomes = set()
    for case in shapes.build():
        try:
            roots = [x509.load_der_x509_certificate(block) for block in pem.ca_bundle(case.bundle)]
        except (ValueError, x509.InvalidVersion):
            continue
        result = ChainVerifier(roots, case.names).verify_der(case.chain, case.at)
        outcomes.add(result.failure)
    assert {None, *Failure} - {Failure.NO_CERTIFICATE} <= outcomes


_CA = shapes.root()
_MID = shapes.make("intermediate", _CA, ca=True, constraints=x509.NameConstraints([x509.DNSName("example.com")], None))
_LEAF = shapes.leaf(_MID, san=[x509.DNSName("a.example.com"), x509.RFC822Name("a@example.com")])
_VERIFIER = ChainVerifier([_CA.cert], [shapes.ALLOWED])
edits = st.lists(st.tuples(st.integers(0, 1), st.integers(0, 10_000), st.integers(-1, 255)), min_size=1, max_size=4)


def _mutated(edit_list: list[tuple[int, int, int]]) -> list[bytes]:
    chain = [bytearray(_LEAF.der), bytearray(_MID.der)]
    for which, position, byte in edit_list:
        target = chain[which]
        index = position % len(target)
        if byte < 0:
            del target[index]
        else:
            target[index] = byte
    return [bytes(c) for c in chain]


@settings(max_examples=300, deadline=None)
@given(edits)
def test_mutated_chains_give_a_result_never_an_exception(edit_list: list[tuple[int, int, int]]) -> None:
    """Whatever the edits, a result (never an exception), and only the untouched chain verifies: every byte of
    the leaf and the intermediate is signed or decides how the signature is read."""
    chain = _mutated(edit_list)
    result = _VERIFIER.verify_der(chain, shapes.NOW)
    assert result.ok == (chain == [_LEAF.der, _MID.der])
    assert (result.failure is None) == result.ok


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 10_000), st.integers(-1, 255))
def test_mutated_ca_bundles_are_read_or_refused_never_raise(position: int, byte: int) -> None:
    bundle = bytearray(shapes.pem(_CA.der))
    index = position % len(bundle)
    if byte < 0:
        del bundle[index]
    else:
        bundle[index] = byte
    try:
        roots = pem.ca_bundle(bytes(bundle))
    except der.Malformed:
        return
    for block in roots:
        parse.parse_certificate(block)


# Verdicts Go 1.26.0 gives on shapes a review of our verifier found (tests/x509/test_x509_differential.py checks them
# against real Go where a Go toolchain is installed; these hold without one).
GO_VERDICTS = {
    "constraints/ip-unmasked-permitted-in-wide": False,
    "constraints/ip-unmasked-excluded-in-wide": True,
    "constraints/email-same-local-part-first": False,
    "constraints/email-same-local-part-last": True,
    "constraints/dns-empty-name-excluded": False,
    "constraints/email-empty-domain-excluded": False,
    "algorithms/ed25519-signature-null-params": False,
    "algorithms/rsa-pss-null-params": True,
    "algorithms/rsa-pss-hash-params-integer": False,
    "algorithms/rsa-pss-mgf-hash-params-integer": False,
    "algorithms/rsa-root-exponent-2^31-1": True,
    "algorithms/rsa-root-exponent-2^31+11": False,
    "algorithms/rsa-intermediate-exponent-2^63-25": False,
    "algorithms/rsa-leaf-8192-bits": True,
    "algorithms/rsa-leaf-8194-bits": False,
    "bundle/end-on-base64-line-signer-first": False,
}


def test_the_audit_shapes_are_decided_as_go_decides_them() -> None:
    decided = {}
    for case in shapes.build():
        if case.name in GO_VERDICTS:
            try:
                roots = [x509.load_der_x509_certificate(block) for block in pem.ca_bundle(case.bundle)]
            except ValueError:
                decided[case.name] = False
                continue
            decided[case.name] = ChainVerifier(roots, case.names).verify_der(case.chain, case.at).ok
    assert decided == GO_VERDICTS


# --- exact edges (docs/mutation.md: each would survive a boundary mutant without its case) ---------------


def test_a_check_holds_from_not_before_to_not_after_both_included() -> None:
    start = shapes.NOW
    end = start + shapes.DAY
    result = ChainResult(True, None, ((start, end),))
    tick = dt.timedelta(microseconds=1)
    assert result.holds_at(start) and result.holds_at(end)
    assert not result.holds_at(start - tick) and not result.holds_at(end + tick)
    assert not ChainResult(False, Failure.UNTRUSTED, ((start, end),)).holds_at(start)


def test_validity_edges_are_go_s_not_before_and_not_after_inclusive() -> None:
    ca = shapes.root()
    start, end = shapes.NOW - shapes.DAY, shapes.NOW + shapes.DAY
    leaf = shapes.leaf(ca, not_before=start, not_after=end)
    verifier = ChainVerifier([x509.load_der_x509_certificate(ca.der)], [shapes.ALLOWED])
    second = dt.timedelta(seconds=1)
    verdicts = [
        verifier.verify_der([leaf.der], moment).failure for moment in (start - second, start, end, end + second)
    ]
    assert verdicts == [Failure.EXPIRED, None, None, Failure.EXPIRED]


def test_go_s_100_signature_checks_exactly() -> None:
    """Go's maxChainSignatureChecks: the 100th check still runs, the 101st does not (Go's limit alone, no cost
    budget): decoys named like the real intermediate are tried first."""
    ca = shapes.root()
    real = shapes.make("busy-intermediate", ca, ca=True, key_ids=False)
    signer = shapes.root("decoy-signer")
    decoys = [shapes.make("busy-intermediate", signer, ca=True, key_ids=False) for _ in range(99)]
    leaf = parsed(shapes.leaf(real, key_ids=False).der)
    roots = Pool([parsed(ca.der)])

    def outcome(count: int) -> verify.Outcome:
        return verify.verify(leaf, [parsed(d.der) for d in decoys[:count]] + [parsed(real.der)], roots, shapes.NOW)

    assert outcome(98).chains and outcome(98).operations == 100  # 98 decoys, the real one, then the root
    assert not outcome(99).chains and outcome(99).failure == "untrusted"


CA = shapes.root()


def _behind_decoys(real: shapes.Node, decoy_key_ids: bool, leaf_key_ids: bool = True) -> bool:
    """Whether the leaf of ``real`` (busy-intermediate, under CA) verifies with 99 same-name decoys presented
    before ``real`` (Go's 100
    signature checks leave room for one decoy at most before ``real`` and the root)."""
    signer = shapes.root("decoy-signer")
    decoys = [shapes.make("busy-intermediate", signer, ca=True, key_ids=decoy_key_ids) for _ in range(99)]
    presented = [*(parsed(d.der) for d in decoys), parsed(real.der)]
    roots = Pool([parsed(CA.der)])
    leaf = parsed(shapes.leaf(real, key_ids=leaf_key_ids).der)
    return bool(verify.verify(leaf, presented, roots, shapes.NOW).chains)


def test_parents_are_tried_matching_key_id_first_then_one_sided_then_mismatched() -> None:
    """Go's findPotentialParents: a candidate whose subject key id matches the child's authority key id, then
    one where either is missing, then mismatched ones, whatever the presented order. Go 1.26 (tests/x509oracle,
    run once on the first two shapes) grants the leaf that names its issuer's key behind 99 mismatched decoys,
    and refuses the one that names none (all candidates one-sided: the presented order decides)."""
    matching = shapes.make("busy-intermediate", CA, ca=True)
    assert _behind_decoys(matching, decoy_key_ids=True)  # matching before mismatched
    assert not _behind_decoys(matching, decoy_key_ids=True, leaf_key_ids=False)  # all one-sided
    assert _behind_decoys(matching, decoy_key_ids=False)  # matching before one-sided
    one_sided = shapes.make("busy-intermediate", CA, ca=True, key_ids=False)
    assert _behind_decoys(one_sided, decoy_key_ids=True)  # one-sided before mismatched


def _rsa_cert(ca: shapes.Node, modulus: int, exponent: int) -> GoCertificate:
    spki = shapes.rsa_public_key_info(modulus, exponent)
    return parsed(shapes.resign(shapes.make("rsa-ca", ca, ca=True), ca.key, shapes.set_field(shapes.SPKI, spki)).der)


def test_rsa_exponents_up_to_2_31_minus_1() -> None:
    """crypto/internal/fips140/rsa checkPublicKey: an odd exponent from 3 up to 2^31-1 (1 is refused)."""
    ca = shapes.root()
    modulus = (1 << 2047) | (int.from_bytes(bytes(range(256)), "big") % (1 << 2046)) | 1
    assert verify.rsa_key_usable(_rsa_cert(ca, modulus, (1 << 31) - 1))
    assert not verify.rsa_key_usable(_rsa_cert(ca, modulus, (1 << 31) + 1))
    assert verify.rsa_key_usable(_rsa_cert(ca, modulus, 3)) and not verify.rsa_key_usable(_rsa_cert(ca, modulus, 1))


def test_an_rsa_signature_of_another_length_costs_nothing() -> None:
    """An RSA-8192 "issuer" of a certificate signed with a 2048-bit key is refused before any public-key
    operation (Go 1.26.0 verifyPKCS1v15): it is not charged its signature_cost."""
    rsa_ca = shapes.root("rsa-ca", key=shapes.rsa.generate_private_key(65537, 2048))
    child = parsed(shapes.leaf(rsa_ca).der)
    big = (1 << 8191) | (int.from_bytes(bytes(range(256)) * 4, "big") % (1 << 8190)) | 1
    decoy = _rsa_cert(shapes.root(), big, 65537)
    assert verify.operation_cost(child, parsed(rsa_ca.der)) == 1
    assert verify.signature_cost(decoy) == 16 and verify.operation_cost(child, decoy) == 0


def test_an_rsa_signature_is_as_long_as_the_modulus_in_whole_bytes() -> None:
    """RFC 8017 8.2.2: a 2049-bit modulus takes 257-byte signatures; a 256-byte one is refused unrun."""
    ca = shapes.root()
    modulus = (1 << 2048) | (int.from_bytes(bytes(range(256)) * 2, "big") % (1 << 2047)) | 1
    parent = _rsa_cert(ca, modulus, 65537)
    sha256_rsa = shapes.algorithm_der_null("1.2.840.113549.1.1.11")
    costs = [
        verify.operation_cost(parsed(shapes.with_signature(shapes.leaf(ca), sha256_rsa, b"\x01" * size).der), parent)
        for size in (256, 257)
    ]
    assert costs == [0, 1]


def test_a_refused_verification_reports_its_operations_and_their_cost_apart() -> None:
    """One failed RSA-8192 check: one public-key operation, 16 units of work (what the budget and the metrics
    read)."""
    ca = shapes.root()
    big = (1 << 8191) | (int.from_bytes(bytes(range(256)) * 4, "big") % (1 << 8190)) | 1
    rsa_root = shapes.resign(
        shapes.root(), ca.key, shapes.set_field(shapes.SPKI, shapes.rsa_public_key_info(big, 65537))
    )
    sha256_rsa = shapes.algorithm_der_null("1.2.840.113549.1.1.11")
    leaf = parsed(shapes.with_signature(shapes.leaf(ca), sha256_rsa, b"\x01" * 1024).der)
    outcome = verify.verify(leaf, [], Pool([parsed(rsa_root.der)]), shapes.NOW)
    assert (outcome.chains, outcome.failure, outcome.operations, outcome.cost) == ((), "untrusted", 1, 16)
    assert not outcome.exhausted  # the check ran and failed: not the budget's refusal


def test_a_grant_s_window_is_the_latest_not_before_to_the_earliest_not_after() -> None:
    ca = shapes.root()
    mid = shapes.make(
        "intermediate", ca, ca=True, not_before=shapes.NOW - shapes.DAY, not_after=shapes.NOW + 9 * shapes.DAY
    )
    leaf = shapes.leaf(mid, not_before=shapes.NOW - 2 * shapes.DAY, not_after=shapes.NOW + 5 * shapes.DAY)
    verifier = ChainVerifier([x509.load_der_x509_certificate(ca.der)], [shapes.ALLOWED])
    assert (verifier.verifications, verifier.signature_operations, verifier.signature_cost) == (0, 0, 0)
    result = verifier.verify_der([leaf.der, mid.der], shapes.NOW)
    assert result.windows == ((shapes.NOW - shapes.DAY, shapes.NOW + 5 * shapes.DAY),)
    assert (verifier.verifications, verifier.signature_operations, verifier.signature_cost) == (1, 2, 2)


def test_a_caller_s_budget_below_the_cap_is_kept() -> None:
    """``verify_der``'s budget (what a connection's address has left) bounds the work below MAX_VERIFICATION_COST:
    a chain of two checks with room for one is refused, the budget named as the reason."""
    ca = shapes.root()
    mid = shapes.make("intermediate", ca, ca=True)
    verifier = ChainVerifier([x509.load_der_x509_certificate(ca.der)], [shapes.ALLOWED])
    chain = [shapes.leaf(mid).der, mid.der]
    spent: list[int] = []
    assert not verifier.verify_der(chain, shapes.NOW, budget=1, spent=spent).ok and spent == [1, 1]
    assert verifier.verify_der(chain, shapes.NOW, budget=2, spent=spent).ok and spent == [2, 0]


def test_rsa_moduli_from_1024_bits() -> None:
    """crypto/rsa checkKeySize (Go 1.26.0, rsa1024min): a 1023-bit modulus is refused, 1024 bits is not."""
    ca = shapes.root()
    for bits, usable in ((1023, False), (1024, True)):
        modulus = (1 << (bits - 1)) | (int.from_bytes(bytes(range(256)), "big") % (1 << (bits - 2))) | 1
        assert verify.rsa_key_usable(_rsa_cert(ca, modulus, 65537)) is usable


def test_signature_cost_is_bits_squared_times_exponent_bits_over_2048_squared_times_17() -> None:
    """Whole units, rounded down: an RSA-2896 key (e = 65537) is just under 2 units, RSA-2897 just over."""
    ca = shapes.root()
    costs = []
    for bits in (2896, 2897):
        modulus = (1 << (bits - 1)) | (int.from_bytes(bytes(range(256)) * 2, "big") % (1 << (bits - 2))) | 1
        costs.append(verify.signature_cost(_rsa_cert(ca, modulus, 65537)))
    assert costs == [1, 2]
    assert verify.MAX_VERIFICATION_COST == 256  # docs/x509-differential.md: 256 RSA-2048 public operations


def test_a_signature_of_another_key_type_costs_nothing() -> None:
    """An RSA signature checked against an EC key stops before any public-key operation."""
    rsa_ca = shapes.root("rsa-ca", key=shapes.rsa.generate_private_key(65537, 2048))
    ec_parent = parsed(shapes.root("rsa-ca").der)  # same name, an EC key
    assert verify.operation_cost(parsed(shapes.leaf(rsa_ca).der), ec_parent) == 0


def test_a_leaf_refused_before_any_check_reports_no_work() -> None:
    ca = shapes.root()
    expired = parsed(shapes.leaf(ca, not_before=shapes.NOW - 2 * shapes.DAY, not_after=shapes.NOW - shapes.DAY).der)
    outcome = verify.verify(expired, [], Pool([parsed(ca.der)]), shapes.NOW)
    assert outcome == verify.Outcome(failure="expired", operations=0, cost=0, exhausted=False)


def test_refusals_before_any_public_key_operation_count_none() -> None:
    """check_signature's ``operations`` counts only the public-key operations it runs: none for an RSA signature
    of another length than the key's, none for a key whose BIT STRING declares unused bits (Go would verify
    with the right-aligned key, which did not make the signature)."""
    rsa_ca = shapes.root("rsa-ca", key=shapes.rsa.generate_private_key(65537, 2048))
    big = (1 << 8191) | (int.from_bytes(bytes(range(256)) * 4, "big") % (1 << 8190)) | 1
    raw_format = (shapes.serialization.Encoding.Raw, shapes.serialization.PublicFormat.Raw)
    key = shapes.ed25519.Ed25519PrivateKey.generate()
    while key.public_key().public_bytes(*raw_format)[-1] & 1:  # one unused bit must be a zero bit
        key = shapes.ed25519.Ed25519PrivateKey.generate()
    raw = key.public_key().public_bytes(*raw_format)
    padded_spki = shapes.tlv(
        der.SEQUENCE, shapes.algorithm_der("1.3.101.112") + shapes.tlv(der.BIT_STRING, b"\x01" + raw)
    )
    shifted = shapes.resign(shapes.root("shifted", key=key), key, shapes.set_field(shapes.SPKI, padded_spki))
    for child, parent in (
        (shapes.leaf(rsa_ca), _rsa_cert(shapes.root(), big, 65537)),
        (shapes.leaf(shapes.Node(shifted.der, key)), parsed(shifted.der)),
    ):
        operations = [0, 0]
        assert not verify.check_signature(parsed(child.der), parent, operations)
        assert operations == [0, 0]


def test_a_loop_of_intermediates_is_walked_once() -> None:
    """Go's alreadyInChain: a candidate with the subject, key and SANs of a certificate already in the chain is
    not tried again, so two intermediates that certify each other cost two checks, not Go's 100."""
    key_a, key_b = shapes.ec_key(), shapes.ec_key()
    a_signer = shapes.Node(shapes.make("loop-a", key=key_a, ca=True).der, key_a)
    b_node = shapes.make("loop-b", a_signer, ca=True, key=key_b)
    a_node = shapes.make("loop-a", b_node, ca=True, key=key_a)
    leaf = parsed(shapes.leaf(a_node).der)
    outcome = verify.verify(leaf, [parsed(a_node.der), parsed(b_node.der)], Pool([parsed(CA.der)]), shapes.NOW)
    assert (outcome.chains, outcome.operations) == ((), 2)


def test_the_budget_counts_work_not_checks() -> None:
    """An RSA-4096 check costs 4 units: with 4 units, the intermediate's check fits and the root's does not."""
    ca = shapes.root()
    mid = shapes.make("intermediate", ca, ca=True, key=shapes.rsa.generate_private_key(65537, 4096))
    leaf = parsed(shapes.leaf(mid).der)
    outcome = verify.verify(leaf, [parsed(mid.der)], Pool([parsed(ca.der)]), shapes.NOW, budget=4)
    assert (outcome.chains, outcome.operations, outcome.cost, outcome.exhausted) == ((), 1, 4, True)
    granted = verify.verify(leaf, [parsed(mid.der)], Pool([parsed(ca.der)]), shapes.NOW, budget=5)
    assert granted.chains and (granted.operations, granted.cost, granted.exhausted) == (2, 5, False)
    server_only = parsed(shapes.leaf(mid, eku=[shapes.SERVER]).der)
    refused = verify.verify(server_only, [parsed(mid.der)], Pool([parsed(ca.der)]), shapes.NOW)
    assert (refused.failure, refused.operations, refused.cost, refused.exhausted) == ("eku", 2, 5, False)
