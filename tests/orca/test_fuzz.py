"""Property-based tests of the parsers that face untrusted input: the opt-in grammar, the TEXT encoder and
parser, and the authorization decision. ``python -m tests.test_fuzz`` runs the same properties for longer."""

from __future__ import annotations

import datetime as dt
import math
import sys

from hypothesis import event, given, settings
from hypothesis import strategies as st

from secure_orca.authz.policy import Mode, Policy
from secure_orca.authz.secrets import SecretSet
from secure_orca.orca.optin import OptInError, parse
from secure_orca.orca.report import LoadReport, OrcaFormatError, encode_text, parse_text
from secure_orca.x509.chainverifier import NO_CERTIFICATE

if __name__ == "__main__":  # longer fuzzing outside CI: python -m tests.test_fuzz [examples per property]
    settings.register_profile("long", max_examples=int(sys.argv[1]) if len(sys.argv) > 1 else 100_000, deadline=None)
    settings.load_profile("long")

SECRET = "fuzz-secret-0123456789abcdef"
POLICY = Policy(frozenset({Mode.FRONT_PROXY, Mode.SHARED_SECRET}), SecretSet([SECRET]))
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


def _granting(values: list[bytes]) -> bool:
    """The oracle: one well-formed opt-in whose secret is exactly SECRET."""
    try:
        return parse(values).secret == SECRET
    except OptInError:
        return False


# Opt-ins around the real secret (spacing, case of the format, other parameters, duplicates, suffixes), so the
# granting branch runs as often as the refusing one.
_SPACE = st.sampled_from(["", " ", "  ", "\t"])
secret_opt_ins = st.builds(
    lambda fmt, s1, s2, extra, secret: f"{fmt};{s1}secret={secret}{s2}{extra}".encode(),
    st.sampled_from(["TEXT", "TEXT", "TEXT", "text", "JSON", ""]),
    _SPACE,
    _SPACE,
    st.sampled_from(["", "", "", "; foo=bar", ";", ",TEXT"]),
    st.sampled_from([SECRET, SECRET, SECRET, SECRET + "x", SECRET[:-1], SECRET.upper()]),
)


@given(secret_opt_ins.map(lambda v: [v]) | st.lists(header_bytes | secret_opt_ins, min_size=1, max_size=3))
def test_only_the_exact_secret_grants(values: list[bytes]) -> None:
    decision = POLICY.decide(values, NO_CERTIFICATE, NOW)
    event(f"granted={decision.attach}")  # --hypothesis-show-statistics shows both branches running
    assert decision.attach == _granting(values), (values, decision)
    if decision.attach:
        assert decision.reason == "shared-secret" and len(values) == 1
    assert SECRET not in decision.reason


def _near(secret: str, edit: str, index: int, char: str) -> str:
    """``secret`` with one edit at ``index``: a character replaced, deleted or inserted, cut there, or extended."""
    i = index % (len(secret) + 1)
    return {
        "replace": secret[:i] + char + secret[i + 1 :],
        "delete": secret[:i] + secret[i + 1 :],
        "insert": secret[:i] + char + secret[i:],
        "truncate": secret[:i],
        "extend": secret + char * (index % 3 + 1),
        "swapcase": secret[:i] + secret[i:].swapcase(),
    }[edit]


_EDITS = ["replace", "delete", "insert", "truncate", "extend", "swapcase"]
_SECRET_CHAR = st.characters(min_codepoint=33, max_codepoint=126, exclude_characters=',;"')


@given(st.sampled_from(_EDITS), st.integers(min_value=0, max_value=200), _SECRET_CHAR)
def test_near_secrets_never_grant(edit: str, index: int, char: str) -> None:
    guess = _near(SECRET, edit, index, char)
    granted = POLICY.decide([f"TEXT; secret={guess}".encode()], NO_CERTIFICATE, NOW).attach
    assert granted == (guess == SECRET), guess


if __name__ == "__main__":
    for name, test in [(n, v) for n, v in dict(globals()).items() if n.startswith("test_")]:
        print(f"fuzzing {name} ({settings().max_examples} examples)", flush=True)
        test()
