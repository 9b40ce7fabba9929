"""The evaluation's recommendation follows from the figures: synthetic matrices, one rule at a time."""

from __future__ import annotations

from dataclasses import replace

from secure_orca.lab.recommend import Figures, derive

H1 = Figures("header-only", "1. header only", 14, 52, "leak", "nothing needed", False, False, 1.0, 1.02)
FP = Figures("front-proxy", "2. front-proxy", 0, 52, "no-leak", "any identity", False, True, 1.01, 1.02)
LR = Figures("load-reader", "2b. load reader", 0, 52, "no-leak", "load only", False, True, 1.01, 1.02)
SS = Figures("shared-secret", "3. shared secret", 0, 60, "no-leak", "load only", True, False, 1.01, 1.02)
MATRIX = [H1, FP, LR, SS]


def verdict(matrix: list[Figures]) -> str:
    return derive(matrix)[-1]


def test_measured_today_the_load_reader_is_the_default() -> None:
    text = verdict(MATRIX)
    assert text.startswith("Recommendation for the KEP: resolve the open question with 2b. load reader as the default")
    assert "2. front-proxy where the load balancer already authenticates certificate users" in text
    assert "3. shared secret only where the above cannot be deployed" in text
    assert "never 1. header only" in text


def test_a_load_reader_that_leaks_identity_loses_the_default() -> None:
    text = verdict([H1, FP, replace(LR, grants="any identity"), SS])
    assert "with 3. shared secret as the default" not in text  # the secret is still worse than a certificate
    assert "as the default" in text and "2b. load reader as the default" not in text


def test_a_bypass_leak_moves_an_option_to_never() -> None:
    text = verdict([H1, FP, replace(LR, bypass_leaks=3), SS])
    assert "never 1. header only, 2b. load reader" in text
    lines = derive([H1, FP, replace(LR, bypass_leaks=3), SS])
    assert any(line.startswith("2b. load reader: not safe") and "3 of 52" in line for line in lines)


def test_without_the_load_reader_the_front_proxy_leads() -> None:
    assert "with 2. front-proxy as the default" in verdict([H1, FP, SS])


def test_a_measurable_cost_is_said_and_ranks_lower() -> None:
    lines = derive([H1, FP, replace(LR, cost=1.2), replace(SS, grants="load only")])
    (line,) = [line for line in lines if line.startswith("2b. load reader:")]  # one sentence per option
    assert line.endswith("It costs x1.2 per request against the feature off (noise bound x1.02).")
    assert "with 3. shared secret as the default" not in lines[-1]  # the secret still ranks below a costly cert


def test_one_sentence_per_option_and_the_bypass_exposure_is_named() -> None:
    lines = derive([replace(H1, through_lb_verdict="no-leak"), FP, LR, SS])
    assert [line.split(":")[0] for line in lines[:-1]] == ["1. header only", "2. front-proxy", "2b. load reader",
                                                           "3. shared secret"]  # fmt: skip
    assert lines[0].endswith("leaked nothing: the exposure is exactly the clients that bypass it.")
    assert "exactly the clients" not in derive(MATRIX)[0]  # unknown through the load balancer: not claimed


def test_a_safe_option_whose_grants_were_not_read_says_so() -> None:
    lines = derive([H1, replace(LR, grants="unknown")])
    assert lines[1] == "2b. load reader: no leak to the bypass client; what else its credential grants: unknown."


def test_an_inconclusive_probe_is_never_recommended() -> None:
    lines = derive([replace(LR, bypass_verdict="inconclusive"), SS])
    assert lines[0].startswith("2b. load reader: no verdict (inconclusive)")
    assert "3. shared secret as the default" in lines[-1]


def test_nothing_safe_nothing_recommended() -> None:
    assert verdict([H1]) == "Recommendation for the KEP: none of the measured options held against the bypass client."
