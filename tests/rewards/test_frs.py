"""FRS: tail confidence, pooled top-K% filter, bin estimator, judge rubric and the report, against hand values.

Judgement logic is tested on recorded judge outputs (raw JSON strings as a judge server returns them) through a
scripted judge: the 135M local judge is too weak to test quality on.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from fractions import Fraction

import pytest
from pydantic import ValidationError

from procrl.judges import Judge, JudgeResult, parse_judgement
from procrl.rewards.frs import (
    DIMENSIONS,
    REPLY_FORMAT,
    RUBRIC,
    FRSConfig,
    ReasoningJudgement,
    Trace,
    compute_frs,
    judge_messages,
    kept_count,
    plan_judging,
    rank_by_confidence,
    reasoning_score,
    summarize,
    tail_confidence,
    tail_confidence_from_logps,
    tail_size,
)

# --------------------------------------------------------------------------------------------------------------------
# A scripted judge: answers each request with a recorded raw output, found by the trace text in the request.
# --------------------------------------------------------------------------------------------------------------------


class ScriptedJudge(Judge):
    """A real `Judge` whose backend answers each request with a recorded raw output (found by the trace text in the
    request), parsed by the client's own `parse_judgement`; None records a timeout. Keeps every request."""

    def __init__(self, recorded: dict[str, str | None]):
        super().__init__("scripted")
        self.recorded = recorded  # trace text -> raw judge output
        self.requests: list[list[dict]] = []

    def _request_payload(self, messages, schema):
        return {"messages": messages, "schema": schema.__name__}

    async def _judge_uncached(self, requests, schemas, finish):
        for j, messages in enumerate(requests):
            self.requests.append(messages)
            raw = self.recorded[_trace_text(messages)]
            if raw is None:
                finish(j, JudgeResult(value=None, unscored="timeout", raw=None, attempts=4))
            else:
                value, reason = parse_judgement(raw, schemas[j])
                finish(j, JudgeResult(value=value, unscored=reason, raw=raw, attempts=1))

    def judged_traces(self) -> list[str]:
        return [_trace_text(m) for m in self.requests]


def _trace_text(messages) -> str:
    return re.search(r"<<<\n(.*)\n>>>", messages[-1]["content"], re.S).group(1)


def raw(f, u=None, c=None, x=None) -> str:
    """A recorded judge output with the four scores (one value repeated when only `f` is given)."""
    u, c, x = (f, f, f) if u is None else (u, c, x)
    return json.dumps({"faithfulness": f, "utility": u, "coherence": c, "factuality": x})


def trace(i, pid, confidence, correct=False) -> Trace:
    return Trace(
        problem_id=pid,
        problem=f"problem {pid}",
        completion=f"trace-{i}",
        gold="#### 7",
        correct=correct,
        confidence=confidence,
        num_tokens=10,
    )


# --------------------------------------------------------------------------------------------------------------------
# 1. Tail confidence
# --------------------------------------------------------------------------------------------------------------------


def test_thirty_tokens_tail_is_exactly_the_three_lowest():
    # L = 30 -> n_low = floor(3.0) = 3 -> mean(0.1, 0.2, 0.3) ~ 0.2. What is exact: the documented value, the
    # correctly rounded mean of the three floats, computed here in exact rational arithmetic.
    probs = [0.9] * 27 + [0.1, 0.2, 0.3]
    exact = float(sum(map(Fraction, [0.1, 0.2, 0.3])) / 3)
    assert tail_confidence(probs) == exact == pytest.approx(0.2, abs=1e-15)
    assert tail_confidence(list(reversed(probs))) == exact  # position does not matter
    # from natural-log probabilities, exp(log p) may differ from p in the last bit
    assert tail_confidence_from_logps([math.log(p) for p in probs]) == pytest.approx(0.2, abs=1e-15)


def test_sharp_dip_ranks_below_flat_mediocre_trace():
    # L = 20 -> n_low = 2: 18 x 0.95 + 2 x 0.2 -> mean(0.2, 0.2) = 0.2; 20 x 0.6 -> 0.6. A plain mean would say
    # 0.875 vs 0.6, the opposite order.
    dip = tail_confidence([0.95] * 18 + [0.2, 0.2])
    flat = tail_confidence([0.6] * 20)
    assert dip == pytest.approx(0.2, abs=1e-15)
    assert flat == pytest.approx(0.6, abs=1e-15)
    assert rank_by_confidence([dip, flat]) == [1, 0]


@pytest.mark.parametrize(
    "length, n_low",
    [
        (9, 1),  # floor(0.9) = 0 -> at least 1
        (10, 1),
        (19, 1),  # floor(1.9) = 1
        (20, 2),
        (30, 3),  # floor(3.0000000000000004) with floats; exact 3 here
        (29, 2),
        (1, 1),
    ],
)
def test_tail_size(length, n_low):
    assert tail_size(length) == n_low


@pytest.mark.parametrize(
    "probs, expected",
    [
        ([0.1] + [0.5] * 18, 0.1),  # L = 19 -> n_low = 1: the minimum only (n_low = 2 would give 0.3)
        ([0.3] + [0.9] * 8, 0.3),  # L = 9 -> n_low = 1
        ([0.4], 0.4),  # L = 1
        ([1.0, 1.0], 1.0),
    ],
)
def test_tail_confidence_small_traces(probs, expected):
    assert tail_confidence(probs) == pytest.approx(expected, abs=1e-15)


def test_empty_trace_has_no_confidence_and_bad_values_raise():
    assert tail_confidence([]) is None
    assert tail_confidence_from_logps([]) is None
    assert tail_confidence_from_logps([float("-inf"), 0.0]) == 0.0  # p = 0 is a probability; L = 2 -> min
    assert tail_confidence_from_logps([1e-7, math.log(0.5)]) == pytest.approx(0.5)  # float error above 0 is clamped
    with pytest.raises(ValueError, match="log"):
        tail_confidence_from_logps([0.5])  # a probability passed as a log-probability
    with pytest.raises(ValueError):
        tail_confidence_from_logps([float("nan")])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        tail_confidence([1.5])


def test_ties_are_ordered_by_input_position():
    assert rank_by_confidence([0.5, 0.7, 0.5, 0.7, None]) == [1, 3, 0, 2]
    # the top-10% of 10 tied traces is the first one, every time
    traces = [trace(i, f"q{i}", 0.5) for i in range(10)]
    judge = ScriptedJudge({f"trace-{i}": raw(1 + i % 5) for i in range(10)})
    config = FRSConfig(k_values=(10,), selection_gain=False)
    report = compute_frs(traces, judge, config, progress=False)
    assert judge.judged_traces() == ["trace-0"]
    assert report.score == 0.0  # trace-0 has all 1s: RS = (4 - 4) / 16 * 100


@pytest.mark.parametrize(
    "n, k, kept",
    [(800, 10, 80), (5, 10, 1), (15, 10, 1), (25, 30, 7), (12, 50, 6), (0, 10, 0), (3, 100, 3)],
)
def test_kept_count(n, k, kept):
    # floor(K% * N), at least one: 25 x 30% = 7.5 -> 7; 5 x 10% = 0.5 -> 1
    assert kept_count(n, k) == kept


# --------------------------------------------------------------------------------------------------------------------
# 2. Judge rubric and reasoning score
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "scores, rs",
    [((1, 1, 1, 1), 0.0), ((5, 5, 5, 5), 100.0), ((5, 4, 5, 4), 87.5), ((3, 3, 3, 3), 50.0), ((2, 1, 1, 1), 6.25)],
)
def test_reasoning_score(scores, rs):
    # RS = (sum - 4) / 16 * 100: (18 - 4) / 16 * 100 = 87.5
    assert reasoning_score(ReasoningJudgement(**dict(zip(DIMENSIONS, scores, strict=True)))) == rs


@pytest.mark.parametrize(
    "recorded",
    [
        raw(0, 3, 3, 3),  # below the scale
        raw(6, 3, 3, 3),  # above it
        '{"faithfulness": 3.5, "utility": 3, "coherence": 3, "factuality": 3}',  # not an integer
        '{"faithfulness": 3, "utility": 3, "coherence": 3}',  # a dimension missing
    ],
)
def test_schema_rejects_out_of_rubric_outputs(recorded):
    with pytest.raises(ValidationError):
        ReasoningJudgement.model_validate_json(recorded)


def test_judge_request_holds_problem_trace_gold_and_correctness():
    messages = judge_messages("Tom has 3 apples.", "3 + 4 = 7", "He adds <<3+4=7>>7.\n#### 7", True)
    assert [m["role"] for m in messages] == ["system", "user"]
    assert messages[0]["content"] == RUBRIC
    for name in DIMENSIONS:
        assert name in RUBRIC
    user = messages[1]["content"]
    assert "Tom has 3 apples." in user
    assert "<<<\n3 + 4 = 7\n>>>" in user
    assert user.endswith(REPLY_FORMAT)  # the format again, last: small judges follow the end of the prompt
    assert "Reference final answer: 7\n" in user  # GSM8K gold shown as its final value only
    assert '{"final_correct": true}' in user
    assert '{"final_correct": false}' in judge_messages("p", "t", "7", False)[1]["content"]
    assert '{"final_correct": null}' in judge_messages("p", "t", None, None)[1]["content"]
    long = judge_messages("p", "a" * 300 + "b" * 300, "7", True, max_trace_chars=200)[1]["content"]
    assert "a" * 100 + "\n[... 400 characters cut ...]\n" + "b" * 100 in long


# --------------------------------------------------------------------------------------------------------------------
# 3. FRS@K, accuracies, selection gain, judging cost
# --------------------------------------------------------------------------------------------------------------------

# Three questions x four traces. Ranked by confidence (index: confidence):
#   0:.90  4:.80  8:.70  5:.60  1:.50  9:.40  10:.35  2:.30  6:.20  11:.15  3:.10  7:.05
# N = 12 -> kept for K = 10..50: floor(1.2)=1, floor(2.4)=2, floor(3.6)=3, floor(4.8)=4, floor(6.0)=6.
CONFIDENCES = [0.90, 0.50, 0.30, 0.10, 0.80, 0.60, 0.20, 0.05, 0.70, 0.40, 0.35, 0.15]
CORRECT = [True, False, True, False, True, True, False, False, False, True, False, None]  # 11: unparseable gold
# Recorded outputs; RS = (sum - 4) * 6.25. Trace 5 returned an out-of-range score (invalid -> unscored).
RECORDED = {
    0: raw(5),  # RS 100
    1: raw(2),  # 25
    2: raw(3),  # 50
    3: raw(1),  # 0
    4: raw(4),  # 75
    5: raw(6, 2, 2, 2),  # invalid
    6: raw(2),  # 25
    7: raw(3),  # 50
    8: raw(3),  # 50
    9: raw(1),  # 0
    10: raw(5),  # 100
    11: raw(2),  # 25
}


def build_traces() -> list[Trace]:
    return [trace(i, "ABC"[i // 4], c, CORRECT[i]) for i, c in enumerate(CONFIDENCES)]


def scripted_judge() -> ScriptedJudge:
    return ScriptedJudge({f"trace-{i}": r for i, r in RECORDED.items()})


def test_frs_at_k_accuracy_and_dropped_scores():
    judge = scripted_judge()
    report = compute_frs(build_traces(), judge, FRSConfig(), progress=False)
    # kept sets: K10 {0}, K20 {0,4}, K30 {0,4,8}, K40 {0,4,8,5}, K50 {0,4,8,5,1,9}; 5 is unscored -> dropped
    assert report.at_k == {10: 100.0, 20: 87.5, 30: 75.0, 40: 75.0, 50: 50.0}  # K50: (100+75+50+25+0)/5
    assert report.score == 100.0 and report.k_percent == 10
    assert report.judge["requests"] == len(judge.requests) and report.judge["unscored/schema_mismatch"] == 1
    assert report.dropped_at_k == {10: 0, 20: 0, 30: 0, 40: 1, 50: 1}
    assert report.kept_at_k == {10: 1, 20: 2, 30: 3, 40: 4, 50: 6}
    # accuracy over the 11 traces with a parseable gold: 0, 2, 4, 5, 9 correct -> 5/11
    assert report.accuracy == pytest.approx(5 / 11)
    assert report.accuracy_kept == 1.0  # trace 0
    assert report.accuracy_at_k[50] == pytest.approx(4 / 6)  # 0, 4, 5, 9 of {0,4,8,5,1,9}
    assert report.n_unparseable_gold == 1 and report.n_traces == 12 and report.n_problems == 3
    assert report.unscored == {"schema_mismatch": 1}
    assert report.metrics()["frs/unscored"] == 1.0


def test_only_needed_traces_are_judged():
    judge = scripted_judge()
    compute_frs(build_traces(), judge, FRSConfig(), progress=False)
    judged = Counter(judge.judged_traces())
    assert max(judged.values()) == 1  # each at most once, in one batched call
    judged = {int(t.split("-")[1]) for t in judged}
    top_half = {0, 4, 8, 5, 1, 9}  # FRS@50's kept set
    assert top_half <= judged
    # selection gain ("sample") adds at most one random trace per question beyond its most confident (0, 4, 8)
    extra = judged - top_half
    assert len(extra) <= 3 and len({i // 4 for i in extra}) == len(extra)
    assert sorted(judged) == plan_judging(build_traces(), FRSConfig())
    # without the selection gain, exactly the top floor(50% * 12) = 6
    judge = scripted_judge()
    compute_frs(build_traces(), judge, FRSConfig(selection_gain=False), progress=False)
    assert {int(t.split("-")[1]) for t in judge.judged_traces()} == top_half


def test_selection_gain_with_the_exact_expectation():
    # random_baseline="mean": every trace of each question is judged; valid = ranked and scored.
    # A: top 0 (100); mean(100, 25, 50, 0) = 43.75 -> +56.25
    # B: 5 is unscored, so the most confident valid trace is 4 (75); mean(75, 25, 50) = 50 -> +25
    # C: top 8 (50); mean(50, 0, 100, 25) = 43.75 -> +6.25
    judge = scripted_judge()
    report = compute_frs(build_traces(), judge, FRSConfig(random_baseline="mean"), progress=False)
    assert len(judge.requests) == 12
    assert report.selection_gain == pytest.approx((56.25 + 25 + 6.25) / 3)
    assert report.selection_gain_questions == 3 and report.selection_gain_dropped == 0


def test_sampled_random_baseline_is_deterministic_and_unbiased():
    traces = build_traces()
    compute_frs(traces, scripted_judge(), FRSConfig(random_baseline="mean"), progress=False)  # score all 12
    assert summarize(traces, FRSConfig(seed=3)).selection_gain == summarize(traces, FRSConfig(seed=3)).selection_gain
    # Per seed, each question contributes RS(top) - RS(one uniformly picked trace); B's pick of its unscored
    # trace 5 (1 in 4) drops B. Over many seeds, the mean gain of the seeds without a drop tends to the
    # expectation computed by hand in the previous test: (56.25 + 25 + 6.25) / 3 = 29.17.
    reports = [summarize(traces, FRSConfig(seed=seed)) for seed in range(600)]
    assert all(r.selection_gain_questions + r.selection_gain_dropped == 3 for r in reports)
    dropped = sum(r.selection_gain_dropped for r in reports)
    assert 100 < dropped < 200  # ~150 expected
    full = [r.selection_gain for r in reports if r.selection_gain_dropped == 0]
    assert sum(full) / len(full) == pytest.approx((56.25 + 25 + 6.25) / 3, abs=4.0)


def test_judge_failures_are_counted_not_raised():
    recorded = {f"trace-{i}": raw(4) for i in range(12)}
    recorded["trace-0"] = None  # the request timed out
    recorded["trace-4"] = "I think it is good"  # not JSON
    report = compute_frs(build_traces(), ScriptedJudge(recorded), FRSConfig(selection_gain=False), progress=False)
    assert report.unscored == {"timeout": 1, "invalid_json": 1}
    assert report.at_k[10] is None  # the only kept trace has no score
    assert report.dropped_at_k[20] == 2
    assert report.at_k[30] == 75.0  # trace 8 alone
    assert "frs/score" not in report.metrics()  # nothing to log rather than NaN


def test_empty_traces_are_excluded_and_counted():
    traces = build_traces()
    traces[0].confidence, traces[0].num_tokens = None, 0
    report = compute_frs(traces, scripted_judge(), FRSConfig(selection_gain=False), progress=False)
    # 11 ranked: K10 keeps floor(1.1) = 1 -> trace 4 (RS 75)
    assert report.n_no_confidence == 1 and report.n_ranked == 11
    assert report.score == 75.0
    assert report.accuracy == pytest.approx(5 / 11)  # correctness needs no confidence: trace 0 still counts


def test_without_a_judge_only_accuracies():
    report = compute_frs(build_traces(), None, FRSConfig(), progress=False)
    assert report.score is None and report.n_judged == 0 and report.selection_gain is None
    assert report.accuracy_kept == 1.0
    assert set(report.metrics()) == {
        "frs/accuracy",
        "frs/accuracy_kept",
        "frs/unscored",
        "frs/judged",
        "frs/mean_confidence",
    }


# --------------------------------------------------------------------------------------------------------------------
# 4. The paper's bin estimator
# --------------------------------------------------------------------------------------------------------------------


def ranked_traces(rs_by_rank: list[int]) -> tuple[list[Trace], dict[str, str]]:
    """Traces whose rank equals their index (confidence decreasing), one question each, with the given RS."""
    n = len(rs_by_rank)
    traces = [trace(i, f"q{i}", 1 - i / (n + 1)) for i in range(n)]
    sums = {0: 1, 25: 2, 50: 3, 75: 4, 100: 5}
    return traces, {f"trace-{i}": raw(sums[rs]) for i, rs in enumerate(rs_by_rank)}


def test_bins_weight_each_bin_by_its_overlap_with_the_top_k():
    # N = 25, 5 bins of 5 ranks. Bin 0 all RS 100; bin 1 RS [50, 50, 0, 0, 0] (mean 20); the rest 25.
    # K30 keeps floor(7.5) = 7 ranks: 5 from bin 0 and 2 from bin 1 -> (5*100 + 2*20)/7 = 77.142857...
    # (the exact top-7 mean would be (5*100 + 50 + 50)/7 = 85.714...).
    traces, recorded = ranked_traces([100] * 5 + [50, 50, 0, 0, 0] + [25] * 15)
    config = FRSConfig(estimator="bins", n_bins=5, max_per_bin=5, k_values=(10, 30), selection_gain=False)
    judge = ScriptedJudge(recorded)
    report = compute_frs(traces, judge, config, progress=False)
    assert report.at_k[30] == pytest.approx(540 / 7)
    assert report.at_k[10] == 100.0  # floor(2.5) = 2 ranks, all in bin 0
    assert len(judge.requests) == 10  # only bins 0 and 1 reach into the top 30%
    exact = compute_frs(
        traces, ScriptedJudge(recorded), FRSConfig(k_values=(10, 30), selection_gain=False), progress=False
    )
    assert exact.at_k[30] == pytest.approx(600 / 7)


def test_bins_match_top_k_when_k_is_on_bin_edges_and_all_are_judged():
    rs = [100, 75, 50, 100, 25, 0, 50, 50, 75, 25] * 2
    traces, recorded = ranked_traces(rs)
    bins = compute_frs(
        traces, ScriptedJudge(recorded), FRSConfig(estimator="bins", selection_gain=False), progress=False
    )
    topk = compute_frs(traces, ScriptedJudge(recorded), FRSConfig(selection_gain=False), progress=False)
    for k in (10, 20, 30, 40, 50):  # 10 bins of 2 ranks; K% of 20 is a whole number of bins
        assert bins.at_k[k] == pytest.approx(topk.at_k[k])


def test_bins_cap_and_deterministic_sampling():
    rs = [100, 0] * 50  # N = 100, 10 bins of 10 ranks
    traces, recorded = ranked_traces(rs)
    config = FRSConfig(estimator="bins", max_per_bin=3, selection_gain=False)
    first, second = ScriptedJudge(recorded), ScriptedJudge(recorded)
    compute_frs(traces, first, config, progress=False)
    compute_frs(traces, second, config, progress=False)
    assert len(first.requests) == 15  # 3 per bin, bins 0-4 (top 50%)
    assert first.judged_traces() == second.judged_traces()
    per_bin = Counter(int(t.split("-")[1]) // 10 for t in first.judged_traces())
    assert per_bin == {0: 3, 1: 3, 2: 3, 3: 3, 4: 3}
    other = ScriptedJudge(recorded)
    compute_frs(traces, other, FRSConfig(estimator="bins", max_per_bin=3, selection_gain=False, seed=1), progress=False)
    assert other.judged_traces() != first.judged_traces()  # the seed matters


def test_config_validation():
    assert FRSConfig(k_percent=15).k_values == (10, 15, 20, 30, 40, 50)  # the headline K joins the curve
    with pytest.raises(ValueError, match="percentages"):
        FRSConfig(k_values=(0, 10))
    with pytest.raises(ValueError, match="estimator"):
        FRSConfig(estimator="deciles")
    with pytest.raises(ValueError, match="random_baseline"):
        FRSConfig(random_baseline="uniform")
