"""Property-based tests of the parsers that face untrusted input: the opt-in grammar, the TEXT encoder and
parser, and the authorization decision. ``python -m tests.test_fuzz`` runs the same properties for longer."""

from __future__ import annotations

import datetime as dt
import math
import sys

from hypothesis import given, settings
from hypothesis import strategies as st

from secure_orca.authz.frontproxy import NO_CERTIFICATE
from secure_orca.authz.policy import Policy
from secure_orca.authz.secrets import SecretSet
from secure_orca.orca.optin import OptInError, parse
from secure_orca.orca.report import LoadReport, OrcaFormatError, encode_text, parse_text

if __name__ == "__main__":  # longer fuzzing outside CI: python -m tests.test_fuzz [examples per property]
    settings.register_profile("long", max_examples=int(sys.argv[1]) if len(sys.argv) > 1 else 100_000, deadline=None)
    settings.load_profile("long")

SECRET = "fuzz-secret-0123456789abcdef"
POLICY = Policy(frozenset({"front-proxy", "shared-secret"}), SecretSet([SECRET]))
NOW = dt.datetime.now(dt.UTC)
values = st.floats(min_value=0, max_value=1e9, allow_nan=False, allow_infinity=False)
names = st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,20}", fullmatch=True)
reports = st.builds(
    LoadReport,
    cpu_utilization=st.none() | values,
    mem_utilization=st.none() | values,
    application_utilization=st.none() | values,
    rps_fractional=st.none() | values,
    eps=st.none() | values,
    named_metrics=st.dictionaries(names, values, max_size=4),
    utilization=st.dictionaries(names, values, max_size=3),
)
header_bytes = st.binary(max_size=700) | st.text(max_size=120).map(lambda t: t.encode("utf-8"))


@given(reports, st.integers(min_value=0, max_value=9))
def test_every_encoding_is_accepted_by_the_strict_parser(report: LoadReport, decimals: int) -> None:
    parsed = parse_text(encode_text(report, decimals))
    for key, value in report.items():
        prefix, _, name = key.partition(".")
        got = getattr(parsed, prefix)[name] if name else getattr(parsed, key)
        assert math.isclose(got, value, abs_tol=10**-decimals)


@given(reports)
def test_round_trip_at_full_precision(report: LoadReport) -> None:
    text = encode_text(report, decimals=12)
    assert parse_text(encode_text(parse_text(text), decimals=12)) == parse_text(text)


@given(st.text(max_size=200))
def test_parser_refuses_or_returns_a_valid_report(value: str) -> None:
    try:
        report = parse_text(value)
    except OrcaFormatError:
        return
    assert all(v >= 0 and math.isfinite(v) for _, v in report.items())


@given(st.lists(header_bytes, max_size=3))
def test_opt_in_parser_never_crashes_and_never_echoes(values: list[bytes]) -> None:
    try:
        parsed = parse(values)
    except OptInError as refused:
        assert refused.reason in {"no-opt-in", "duplicate-opt-in", "malformed-opt-in", "unsupported-format"}
        return
    assert parsed.format == "TEXT" and len(values) == 1


@given(st.lists(header_bytes, min_size=1, max_size=3))
def test_only_the_exact_secret_grants(values: list[bytes]) -> None:
    decision = POLICY.decide(values, NO_CERTIFICATE, NOW)
    if decision.attach:
        assert decision.reason == "shared-secret" and len(values) == 1
        assert parse(values).secret == SECRET
    assert SECRET not in decision.reason


@given(st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126), min_size=0, max_size=60))
def test_near_secrets_never_grant(guess: str) -> None:
    if guess != SECRET:
        assert not POLICY.decide([f"TEXT; secret={guess}".encode()], NO_CERTIFICATE, NOW).attach


if __name__ == "__main__":
    for name, test in [(n, v) for n, v in dict(globals()).items() if n.startswith("test_")]:
        print(f"fuzzing {name} ({settings.default.max_examples} examples)", flush=True)
        test()
