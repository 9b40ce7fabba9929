"""The opt-in header grammar (pure)."""

from __future__ import annotations

import pytest

from secure_orca.orca.headers import OPTIN_SPELLINGS, spellings
from secure_orca.orca.optin import BARE, OptIn, OptInError, format_of, header_value, parse


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b"TEXT", OptIn("TEXT")),
        (b"  TEXT ", OptIn("TEXT")),
        (b"TEXT; secret=abc", OptIn("TEXT", "abc")),
        (b"TEXT;secret=abc", OptIn("TEXT", "abc")),
        (b"TEXT ;  secret=a-b_c", OptIn("TEXT", "a-b_c")),
        (b"TEXT; secret=", OptIn("TEXT", "")),
        (b"JSON", OptIn("JSON")),  # the formats Envoy parses (orca.dialect.CALLER_FORMATS)
        (b"BIN; secret=abc", OptIn("BIN", "abc")),
    ],
)
def test_accepted(raw: bytes, expected: OptIn) -> None:
    assert parse([raw]) == expected


@pytest.mark.parametrize(
    ("values", "reason"),
    [
        ([], "no-opt-in"),
        ([b"TEXT", b"TEXT"], "duplicate-opt-in"),
        ([b"Json"], "unsupported-format"),
        ([b"bin"], "unsupported-format"),
        ([b"BIN2"], "unsupported-format"),
        ([b"XML"], "unsupported-format"),
        ([b"TEXT-BIN"], "unsupported-format"),
        ([b"text"], "unsupported-format"),
        ([b"TEXT JSON"], "malformed-opt-in"),
        ([b"JSON, BIN"], "malformed-opt-in"),
        ([b"JSON", b"TEXT"], "duplicate-opt-in"),
        ([b""], "malformed-opt-in"),
        ([b"TEXT; token=abc"], "malformed-opt-in"),
        ([b"TEXT; secret=a b"], "malformed-opt-in"),
        ([b"TEXT; secret=a; secret=b"], "malformed-opt-in"),
        ([b"TEXT, JSON"], "malformed-opt-in"),
        (["TEXT; secret=é".encode()], "malformed-opt-in"),
        ([b"TEXT; secret=" + b"a" * 600], "malformed-opt-in"),
    ],
)
def test_refused(values: list[bytes], reason: str) -> None:
    with pytest.raises(OptInError) as refused:
        parse(values)
    assert refused.value.reason == reason
    assert "secret=" not in str(refused.value)


def test_the_length_limit_is_512_bytes_exactly() -> None:
    prefix = b"TEXT; secret="
    at_limit = prefix + b"a" * (512 - len(prefix))
    assert len(at_limit) == 512 and parse([at_limit]) == OptIn("TEXT", "a" * (512 - len(prefix)))
    with pytest.raises(OptInError, match="malformed-opt-in"):
        parse([at_limit + b"a"])


def test_repr_hides_secret() -> None:
    assert "hunter2" not in repr(OptIn("TEXT", "hunter2"))
    assert repr(OptIn("TEXT", "hunter2")) == "OptIn(format='TEXT', secret=<set>)"
    assert repr(OptIn("TEXT")) == "OptIn(format='TEXT', secret=None)"


def test_the_front_proxy_s_plain_opt_in_takes_the_shared_answer() -> None:
    """``TEXT`` alone, what a front proxy sends on every request, is answered without the grammar or an
    allocation."""
    assert parse([b"TEXT"]) is BARE


def test_header_value() -> None:
    assert header_value() == "TEXT"
    assert parse([header_value(secret="s3cr3t").encode()]) == OptIn("TEXT", "s3cr3t")


def test_every_spelling_of_the_opt_in_header() -> None:
    """Each ``-`` kept or written ``_``, the first label in front (orca.headers.spellings)."""
    assert spellings(b"a-b-c") == {b"a-b-c", b"a_b-c", b"a-b_c", b"a_b_c"}
    assert spellings(b"plain") == {b"plain"}
    assert len(OPTIN_SPELLINGS) == 8 and b"endpoint_load-metrics_request" in OPTIN_SPELLINGS


def test_the_formats_are_those_the_dialect_encodes() -> None:
    from secure_orca.orca import dialect
    from secure_orca.orca.optin import SUPPORTED_FORMATS

    assert set(dialect.CALLER_FORMATS) == SUPPORTED_FORMATS


@pytest.mark.parametrize(
    "value", [b"TEXT", b"JSON", b"BIN", b"  JSON\t", b"TEXT; secret=abc", b"BIN ;secret=a-b_c", b"\tJSON;  secret=x  "]
)
def test_the_format_of_an_accepted_opt_in_is_the_parsed_one(value: bytes) -> None:
    """``format_of`` (the middleware's regex-free read of a granted opt-in) agrees with ``parse``."""
    assert format_of([value]) == parse([value]).format
