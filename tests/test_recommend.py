"""The evaluation's recommendation follows from the figures: synthetic matrices, one rule at a time."""

from __future__ import annotations

from dataclasses import replace

from secure_orca.lab.recommend import Figures, Stream, derive

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
    lines = derive([H1, FP, replace(LR, cost=1.2, cost_spread=0.0027, layouts=3), replace(SS, grants="load only")])
    (line,) = [line for line in lines if line.startswith("2b. load reader:")]  # one sentence per option
    assert line.endswith("It costs x1.2 per request against the feature off (the counts spread 0.27% over 3 memory "
                         "layouts).")  # fmt: skip
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


def test_one_memory_layout_states_no_spread() -> None:
    (line,) = [line for line in derive([replace(LR, cost=1.2, cost_spread=0.0, layouts=1)]) if "2b." in line[:3]]
    assert line.endswith("(one memory layout: the spread of the counts was not measured).")
    assert "noise bound" not in line


# --- option 4: the out-of-band stream --------------------------------------------------------------------------

STREAM = Stream(period=1.0, tls_bytes_per_report=70.7, bytes_per_s=70.7,
                in_band_bytes_per_s={1.0: 56.3, 10.0: 577.7, 100.0: 665.0, 1000.0: 3731.3}, per_report=299329.0,
                stale_in_band={2.0: 4.1, 20.0: 0.6}, stale_out_of_band={2.0: 1.3, 20.0: 1.2}, bound=15.0)  # fmt: skip
OOB = Figures("out-of-band", "4. out-of-band stream", 0, 60, "no-leak", "load only", False, True, 1.0003, 1.0055,
              cost_spread=0.0021, layouts=3, stream=STREAM)  # fmt: skip


def stream_line(matrix: list[Figures]) -> str:
    (line,) = [line for line in derive(matrix) if line.startswith("4. out-of-band stream:")]
    return line


def test_option_4_has_its_own_sentence_citing_its_figures() -> None:
    line = stream_line([*MATRIX, OOB])
    assert line.startswith("4. out-of-band stream: no leak to the bypass client, and the credential grants load "
                           "reports only; no request carries an opt-in and no response a report (x1.0003 "
                           "instructions per request against the feature off; the counts spread 0.21% over 3 "
                           "memory layouts).")  # fmt: skip
    assert "The stream costs 299,329 instructions and 70.7 bytes on the wire per report: 70.7 B/s" in line
    assert "against 56.3 B/s, 577.7 B/s, 665.0 B/s, 3,731.3 B/s in band at 1, 10, 100, 1,000 requests/s" in line
    assert line.endswith("halved in 1.3 s out of band against 4.1 s in band at 2 load-balanced requests/s; 1.2 s "
                         "out of band against 0.6 s in band at 20 load-balanced requests/s.")  # fmt: skip


def test_option_4_sentence_follows_its_figures() -> None:
    never = replace(STREAM, stale_out_of_band={2.0: None, 20.0: None}, per_report=None)
    line = stream_line([replace(OOB, stream=never)])
    assert "not within 15 s out of band against 4.1 s in band" in line
    assert "instructions and" not in line  # not counted: not claimed


def test_option_4_stands_beside_the_in_band_default_with_its_reasons() -> None:
    advice = verdict([*MATRIX, OOB])
    assert advice.startswith("Recommendation for the KEP: resolve the open question with 2b. load reader as the "
                             "default; 4. out-of-band stream instead where the load balancer reads reports out of "
                             "band (no opt-in for a bypass client to try, nothing on the data path, fewer bytes than "
                             "in band from 10 requests/s per connection up, fresher weights than in band at 2 "
                             "requests/s, but staler weights than in band at 20 requests/s)")  # fmt: skip


def test_option_4_that_costs_more_per_request_ranks_as_a_fallback() -> None:
    advice = verdict([*MATRIX, replace(OOB, cost=1.3)])
    assert "instead where the load balancer reads reports out of band" not in advice
    assert "4. out-of-band stream only where the above cannot be deployed" in advice


def test_option_4_leads_when_every_in_band_option_leaks() -> None:
    advice = verdict([H1, replace(LR, bypass_leaks=2), OOB])
    assert advice.startswith("Recommendation for the KEP: resolve the open question with 4. out-of-band stream as "
                             "the default")  # fmt: skip


def test_option_4_that_leaks_is_never_recommended() -> None:
    advice = verdict([*MATRIX, replace(OOB, bypass_leaks=1)])
    assert "never 1. header only, 4. out-of-band stream" in advice
