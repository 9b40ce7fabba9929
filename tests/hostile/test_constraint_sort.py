"""Name constraints past Go's stable sort: a wildcard SAN under 13 excluded names, one of them written twice in
different case. Go 1.26 refuses the arrangement below (the differential's ``constraints/dns-excluded-13-...``,
decided by the Go oracle): its pdqsort keeps EXAMPLE.COM, whose parent .COM answers *.COM. We kept the first
spelling written, example.com, and granted."""

from __future__ import annotations

import datetime as dt

from secure_orca.x509.chainverifier import ChainVerifier, Failure
from tests import x509corpus as shapes


def test_a_wildcard_under_13_excluded_names_with_a_case_duplicate_is_refused() -> None:
    names = shapes.case_duplicates(13, 2)
    ca = shapes.with_constraints(shapes.raw_constraints((), [shapes.tlv(0x82, n) for n in names]))
    leaf = shapes.with_san(ca, shapes.tlv(0x82, b"*.COM"))
    result = ChainVerifier([ca.cert], [shapes.ALLOWED]).verify_der([leaf.der], dt.datetime.now(dt.UTC))
    assert (result.ok, result.failure) == (False, Failure.UNTRUSTED)
