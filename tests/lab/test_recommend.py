"""The evaluation's recommendation follows from the figures: synthetic matrices, each rule moved both ways."""

from __future__ import annotations

from dataclasses import replace

from secure_orca.lab.recommend import POLICY, Figures, derive, recommended, timing_sentence
from secure_orca.lab.results import MatchedCell, OutOfBand, Spread

LOW, MID, HIGH = Spread(1.002, 1.001, 1.003), Spread(1.005, 1.004, 1.006), Spread(1.009, 1.008, 1.010)
H1 = Figures("header-only", "1. header only", 14, 52, "leak", "nothing needed", False, False, LOW)
FP = Figures("front-proxy", "2. front-proxy", 0, 52, "no-leak", "any identity", False, True, MID, layouts=3)
LR = Figures("load-reader", "2b. load reader", 0, 52, "no-leak", "load only", False, True, MID, layouts=3)
SS = Figures("shared-secret", "3. shared secret", 0, 60, "no-leak", "load only", True, False, LOW, layouts=3,
             timing_p=0.68)  # fmt: skip
MATRIX = [H1, FP, LR, SS]


def verdict(matrix: list[Figures]) -> str:
    return derive(matrix)[-1]


def test_measured_today_the_load_reader_is_the_default() -> None:
    text = verdict(MATRIX)
    assert text.startswith("Recommendation for the KEP: resolve the open question with 2b. load reader as the default")
    assert "2. front-proxy where the load balancer already authenticates certificate users" in text
    assert "3. shared secret only where the above cannot be deployed" in text
    assert "never 1. header only" in text
    assert recommended(MATRIX) == "load-reader"


# --- rule 1: exposure --------------------------------------------------------------------------------------------


def test_rule_exposure_a_bypass_leak_moves_an_option_to_never_and_back() -> None:
    leaky = [H1, FP, replace(LR, bypass_leaks=3), SS]
    assert "never 1. header only, 2b. load reader" in verdict(leaky)
    assert recommended(leaky) != "load-reader"
    assert any(line.startswith("2b. load reader: not safe") and "3 of 52" in line for line in derive(leaky))
    healed = [replace(H1, bypass_leaks=0, bypass_verdict="no-leak", grants="load only"), LR]
    assert "never" not in verdict(healed)  # the header-only option without leaks is no longer excluded


def test_rule_exposure_a_timing_leak_excludes_the_secret_and_none_does_not() -> None:
    assert recommended([H1, replace(SS, timing_p=1e-9)]) is None
    line = derive([H1, replace(SS, timing_p=1e-9)])[1]
    assert line == "3. shared secret: not safe: its secret comparison timed differently (p = 1e-09)."
    assert recommended([H1, SS]) == "shared-secret"


def test_an_inconclusive_probe_is_never_recommended() -> None:
    lines = derive([replace(LR, bypass_verdict="inconclusive"), SS])
    assert lines[0].startswith("2b. load reader: no verdict (inconclusive)")
    assert "3. shared secret as the default" in lines[-1]


def test_nothing_safe_nothing_recommended() -> None:
    assert verdict([H1]) == "Recommendation for the KEP: none of the measured options held against the bypass client."
    assert recommended([H1]) is None


# --- rule 2: grants ----------------------------------------------------------------------------------------------


def test_rule_grants_a_load_reader_that_grants_identity_loses_to_the_secret_and_back() -> None:
    assert recommended([FP, replace(LR, grants="any identity"), SS]) == "shared-secret"  # load only beats identity
    assert recommended([FP, LR, SS]) == "load-reader"  # a certificate beats a secret that grants the same


def test_rule_grants_without_the_load_reader_the_secret_leads_unless_it_grants_identity() -> None:
    assert recommended([FP, SS]) == "shared-secret"
    assert recommended([FP, replace(SS, grants="any identity")]) == "front-proxy"


def test_a_safe_option_whose_grants_were_not_read_says_so() -> None:
    lines = derive([H1, replace(LR, grants="unknown")])
    assert lines[1].startswith(
        "2b. load reader: no leak to the bypass client; what else its credential grants: unknown."
    )


# --- rule 3: cost, where the ranges separate --------------------------------------------------------------------

OTHER = replace(LR, option="load-reader-2", title="2c. another load reader")


def test_rule_cost_a_cheaper_range_wins_and_a_dearer_one_loses() -> None:
    assert recommended([LR, replace(OTHER, cost=LOW)]) == "load-reader-2"
    assert recommended([LR, replace(OTHER, cost=HIGH)]) == "load-reader"
    line = next(line for line in derive([LR, replace(OTHER, cost=LOW)]) if line.startswith("2b."))
    assert "x1.005 [1.004, 1.006] instructions against the feature off; more than 2c. another load reader" in line


def test_rule_cost_overlapping_ranges_do_not_decide() -> None:
    overlap = Spread(1.0045, 1.0035, 1.0055)
    assert recommended([LR, replace(OTHER, cost=overlap)]) == "load-reader"  # the KEP's order: policy
    assert recommended([replace(OTHER, cost=overlap), LR]) == "load-reader-2"
    line = next(line for line in derive([LR, replace(OTHER, cost=overlap)]) if line.startswith("2b."))
    assert "within the spread of every other in-band option" in line


# --- rule 4: in band (2b) or out of band (4) at matched freshness ----------------------------------------------


def cell(path: str, period: float, stale: Spread, wire: Spread) -> MatchedCell:
    return MatchedCell(path, period, wire, stale, 10, 10, [wire.median] * 10, [stale.median] * 10)


FAST, SLOW, MIDDLE = Spread(0.4, 0.3, 0.5), Spread(1.5, 1.1, 2.0), Spread(0.9, 0.45, 1.2)
SMALL, LARGE = Spread(70.0, 68.0, 72.0), Spread(90.0, 85.0, 95.0)


def stream(oob_stale: Spread, oob_wire: Spread, in_stale: Spread = MIDDLE, in_wire: Spread = LARGE) -> OutOfBand:
    cells = [c for period in (1.0, 0.1) for c in (cell("in-band", period, in_stale, in_wire),
                                                   cell("out-of-band", period, oob_stale, oob_wire))]  # fmt: skip
    return OutOfBand("step", 8.0, 40.0, 20.0, 10, cells)


def oob(s: OutOfBand) -> Figures:
    return Figures("out-of-band", "4. out-of-band stream", 0, 52, "no-leak", "load only", False, True,
                   Spread(0.999, 0.998, 1.001), layouts=3, stream=s, per_report=304937.0)  # fmt: skip


def test_rule_stream_out_of_band_leads_where_it_is_fresher_and_smaller() -> None:
    worse = oob(stream(SLOW, LARGE, in_stale=FAST, in_wire=SMALL))  # staler and more bytes: in band leads
    assert recommended([*MATRIX, worse]) == "load-reader"
    assert "(the figures favour in band)" in verdict([*MATRIX, worse])
    assert "(but staler at a 1 s period, but more bytes at a 1 s period" in verdict([*MATRIX, worse])
    mixed = oob(stream(SLOW, SMALL, in_stale=FAST))  # staler but fewer bytes: the figures do not decide
    assert recommended([*MATRIX, mixed]) == "load-reader"
    assert "(not measured: policy, see below)" in verdict([*MATRIX, mixed])
    leads = oob(stream(FAST, SMALL, in_stale=SLOW))  # fresher and fewer bytes, nothing worse: out of band leads
    assert recommended([*MATRIX, leads]) == "out-of-band"
    text = verdict([*MATRIX, leads])
    assert text.startswith("Recommendation for the KEP: resolve the open question with 4. out-of-band stream as the "
                           "default (fresher at a 1 s period, fewer bytes at a 1 s period")  # fmt: skip
    assert "2b. load reader where the load balancer reads reports in band" in text


def test_rule_stream_more_bytes_flips_it_back() -> None:
    assert recommended([*MATRIX, oob(stream(FAST, LARGE, in_stale=SLOW, in_wire=SMALL))]) is not None
    assert recommended([*MATRIX, oob(stream(MIDDLE, LARGE, in_wire=SMALL))]) == "load-reader"  # only worse
    assert recommended([*MATRIX, oob(stream(MIDDLE, SMALL))]) == "out-of-band"  # only better


def test_rule_stream_unresolved_figures_leave_it_to_policy_said_as_such() -> None:
    tie = oob(stream(MIDDLE, SMALL, in_wire=SMALL))
    assert recommended([*MATRIX, tie]) == "load-reader"
    text = verdict([*MATRIX, tie])
    assert "(not measured: policy, see below); 4. out-of-band stream instead where the load balancer reads " in text
    assert "(the matched figures do not resolve)" in text
    assert "KEP-6315's alpha specifies reports on responses" in POLICY


def test_option_4_sentence_cites_every_cell_and_writes_comparisons_only_where_ranges_separate() -> None:
    (line,) = [line for line in derive([*MATRIX, oob(stream(MIDDLE, SMALL))]) if line.startswith("4. ")]
    assert "304,937 instructions per streamed report" in line
    assert ("At a 1 s period (median, range over 10 runs): the weight halved in 0.9 s (0.45–1.2) out of band "
            "against 0.9 s (0.45–1.2) in band, which does not resolve; 70 B/s (68–72) on the wire against 90 B/s "
            "(85–95), fewer bytes.") in line  # fmt: skip


def test_option_4_leads_when_every_in_band_option_leaks() -> None:
    assert recommended([H1, replace(LR, bypass_leaks=2), oob(stream(MIDDLE, LARGE, in_wire=SMALL))]) == "out-of-band"


def test_option_4_that_leaks_is_never_recommended() -> None:
    advice = verdict([*MATRIX, replace(oob(stream(FAST, SMALL, in_stale=SLOW)), bypass_leaks=1)])
    assert "never 1. header only, 4. out-of-band stream" in advice


# --- the timing sentence ----------------------------------------------------------------------------------------


def test_the_timing_sentence_depends_on_p() -> None:
    assert timing_sentence(0.68) == ("the timing check of its comparison gave p = 0.68: no evidence of a timing leak "
                                     "at p < 0.001")  # fmt: skip
    assert timing_sentence(1e-9) == ("the timing check of its comparison gave p = 1e-09: evidence of a timing leak "
                                     "(p < 0.001)")  # fmt: skip
    assert timing_sentence(None) == "its comparison was not timed in this run"


def test_rule_cost_one_memory_layout_orders_nothing() -> None:
    one = [replace(LR, layouts=1), replace(OTHER, cost=LOW, layouts=1)]
    assert recommended(one) == "load-reader"  # no spread measured: the lower count does not win
    assert recommended([LR, replace(OTHER, cost=LOW)]) == "load-reader-2"  # with a spread it does
    line = next(line for line in derive(one) if line.startswith("2b."))
    assert line.endswith("(one memory layout: no spread was measured, so the counts order nothing).")
