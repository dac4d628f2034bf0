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

from procrl.evals.frs import (
    DIMENSIONS,
    REPLY_FORMAT,
    RUBRIC,
    RUBRIC_WITHOUT_CORRECTNESS,
    FRSConfig,
    ReasoningJudgement,
    Trace,
    compute_frs,
    expected_scores,
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
from procrl.judges import Judge, JudgeResult, parse_judgement
from procrl.judges.base import reply_result

# --------------------------------------------------------------------------------------------------------------------
# A scripted judge: answers each request with a recorded raw output, found by the trace text in the request.
# --------------------------------------------------------------------------------------------------------------------


class ScriptedJudge(Judge):
    """A real `Judge` whose backend answers each request with a recorded raw output (found by the trace text in the
    request), parsed by the client's own `parse_judgement`; None records a timeout. `probs` (trace text ->
    `JudgeResult.probs`) plays a backend with log-probs. Keeps every request."""

    def __init__(self, recorded: dict[str, str | None], probs: dict[str, dict] | None = None, cache_dir=None):
        super().__init__("scripted", cache_dir=cache_dir)
        self.recorded = recorded  # trace text -> raw judge output
        self.probs = probs or {}
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
                probs = self.probs.get(_trace_text(messages)) if value is not None else None
                finish(j, JudgeResult(value=value, unscored=reason, raw=raw, attempts=1, probs=probs))

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


_VALID = {"faithfulness": 3, "utility": 4, "coherence": 5, "factuality": 1}


@pytest.mark.parametrize(
    "reply",
    [
        {**_VALID, "faithfulness": 0},  # below the scale
        {**_VALID, "faithfulness": 6},  # above it
        {**_VALID, "faithfulness": 3.5},  # not an integer
        {**_VALID, "faithfulness": 3.0},  # a float, even a whole one: lax pydantic would make it 3
        {**_VALID, "faithfulness": True},  # lax pydantic would make it 1
        {**_VALID, "faithfulness": False},
        {**_VALID, "faithfulness": "3"},  # a numeric string: lax pydantic would make it 3
        {**_VALID, "faithfulness": None},
        {k: v for k, v in _VALID.items() if k != "factuality"},  # a dimension missing
        {**_VALID, "reason": "fine"},  # an extra key
        {**_VALID, "overall": 4},
    ],
)
def test_schema_is_strict_on_both_validation_paths(reply):
    text = json.dumps(reply)
    # the constrained path: a backend returns one JSON document, validated in JSON mode
    with pytest.raises(ValidationError):
        ReasoningJudgement.model_validate_json(text)
    # the parse-and-extract path (a judge that ignored the schema): the first JSON object, validated in Python mode
    assert parse_judgement(f"Here are my scores: {text} Thanks.", ReasoningJudgement) == (None, "schema_mismatch")
    with pytest.raises(ValidationError):
        ReasoningJudgement(**reply)  # building one in code is strict too


def test_schema_accepts_integers_and_is_sent_bounded_and_closed():
    text = json.dumps(_VALID)
    assert ReasoningJudgement.model_validate_json(text).model_dump() == _VALID
    value, reason = parse_judgement(f"```json\n{text}\n```", ReasoningJudgement)
    assert reason is None and value.model_dump() == _VALID
    schema = ReasoningJudgement.model_json_schema()
    assert schema["additionalProperties"] is False and schema["required"] == list(DIMENSIONS)
    for name in DIMENSIONS:
        assert (schema["properties"][name]["type"], schema["properties"][name]["minimum"]) == ("integer", 1)
        assert schema["properties"][name]["maximum"] == 5


def test_a_coercible_reply_is_unscored_not_a_score():
    # through the whole FRS path: a judge replying `true` or "3" gets no score (lax validation made them 1 and 3)
    recorded = {f"trace-{i}": raw(4) for i in range(12)}
    recorded["trace-0"] = json.dumps({**_VALID, "utility": True})
    recorded["trace-4"] = json.dumps({**_VALID, "utility": "3"})
    report = compute_frs(build_traces(), ScriptedJudge(recorded), FRSConfig(selection_gain=False), progress=False)
    assert report.unscored == {"schema_mismatch": 2}
    assert report.at_k[20] is None  # the top two (0 and 4) both unscored
    assert report.at_k[30] == 75.0  # trace 8: raw(4)


def test_a_repeated_score_is_unscored_in_either_order():
    # issue 25 §3.2: json.loads keeps the last value, so these scored faithfulness 5 and 1 by key order alone
    rest = '"utility": 4, "coherence": 4, "factuality": 4'
    five_last = '{"faithfulness": 1, ' + rest + ', "faithfulness": 5}'
    one_last = '{"faithfulness": 5, ' + rest + ', "faithfulness": 1}'
    for reply in (five_last, one_last):
        assert parse_judgement(reply, ReasoningJudgement) == (None, "duplicate_key")
    recorded = {f"trace-{i}": raw(4) for i in range(12)}
    recorded["trace-0"], recorded["trace-4"] = five_last, one_last
    report = compute_frs(build_traces(), ScriptedJudge(recorded), FRSConfig(selection_gain=False), progress=False)
    assert report.unscored == {"duplicate_key": 2}  # the two traces, one per order
    # judged: the K50 set {0, 4, 8, 5, 1, 9}; 0 and 4 unscored, the other four scored
    assert report.judge["unscored/duplicate_key"] == 2 and report.judge["scored"] == 4


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


def test_no_trace_and_no_parseable_gold_give_undefined_values_not_zero():
    empty = compute_frs([], None, FRSConfig(), progress=False)
    # no trace: every rate and mean is over nothing (None); the counts are 0; nothing undefined is logged
    assert [empty.score, empty.accuracy, empty.accuracy_kept, empty.selection_gain, empty.mean_confidence] == [None] * 5
    assert set(empty.at_k.values()) == {None} and set(empty.accuracy_at_k.values()) == {None}
    assert (empty.n_traces, empty.n_problems, empty.n_judged, empty.n_scored) == (0, 0, 0, 0)
    assert empty.metrics() == {"frs/unscored": 0.0, "frs/judged": 0.0}
    # 12 traces, no gold parseable: no trace has a known answer, so no accuracy anywhere (never 0)
    traces = build_traces()
    for t in traces:
        t.correct = None
    report = compute_frs(traces, None, FRSConfig(selection_gain=False), progress=False)
    assert report.accuracy is None and set(report.accuracy_at_k.values()) == {None}
    assert report.n_unparseable_gold == 12 and report.mean_confidence is not None  # confidence needs no gold


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


# --------------------------------------------------------------------------------------------------------------------
# 5. Probability scores: expected scores (G-Eval) and RS_expected
# --------------------------------------------------------------------------------------------------------------------


def test_expected_scores_by_hand():
    probs = {
        "faithfulness": {"4": 0.5, "5": 0.5},  # 4.5
        "utility": {"3": 1.0},  # 3
        "coherence": {"1": 0.25, "2": 0.25, "3": 0.5},  # 0.25 + 0.5 + 1.5 = 2.25
        "factuality": {"5": 0.8, "4": 0.2},  # 4 + 0.8 = 4.8
    }
    got = expected_scores(probs)
    assert got == pytest.approx({"faithfulness": 4.5, "utility": 3.0, "coherence": 2.25, "factuality": 4.8})
    # RS_expected = (4.5 + 3 + 2.25 + 4.8 - 4) / 16 * 100 = 10.55 / 16 * 100 = 65.9375
    assert reasoning_score(got) == pytest.approx(65.9375)
    # top log-probs that covered only part of the mass: renormalised, {"2": 0.3, "4": 0.1} -> 2 * 0.75 + 4 * 0.25
    partial = {**probs, "utility": {"2": 0.3, "4": 0.1}}
    assert expected_scores(partial)["utility"] == pytest.approx(2.5)


@pytest.mark.parametrize(
    "probs",
    [
        None,  # the backend gave no log-probs
        {},
        {name: {"3": 1.0} for name in DIMENSIONS[:3]},  # a dimension missing
        {**{name: {"3": 1.0} for name in DIMENSIONS}, "coherence": {}},  # an empty distribution
        {**{name: {"3": 1.0} for name in DIMENSIONS}, "coherence": {"6": 1.0}},  # not a 1-5 value
        {**{name: {"3": 1.0} for name in DIMENSIONS}, "coherence": {"3.0": 1.0}},
        {**{name: {"3": 1.0} for name in DIMENSIONS}, "coherence": {"true": 1.0}},
        {**{name: {"3": 1.0} for name in DIMENSIONS}, "coherence": {"3": float("nan")}},
        {**{name: {"3": 1.0} for name in DIMENSIONS}, "coherence": {"3": -0.5, "4": 1.5}},
        {**{name: {"3": 1.0} for name in DIMENSIONS}, "coherence": {"3": 0.0}},  # no mass
    ],
)
def test_expected_scores_are_none_rather_than_made_up(probs):
    assert expected_scores(probs) is None


def dist(*pairs) -> dict[str, float]:
    return {str(v): p for v, p in pairs}


# Two questions x two traces, ranked (index: confidence) 0:.9  2:.8  1:.7  3:.6; N = 4 -> kept 1 (K25), 2 (K50), 4.
# Each trace: (the validated reply -> RS, the probabilities -> expected scores -> RS_expected), by hand.
PROB_TRACES = {
    # RS (4+5+4+4 - 4) / 16 * 100 = 81.25; E = 4.5, 5, 4, 4 -> (17.5 - 4) * 6.25 = 84.375
    0: (raw(4, 5, 4, 4), [dist((4, 0.5), (5, 0.5)), dist((5, 1.0)), dist((3, 0.5), (5, 0.5)), dist((4, 1.0))]),
    # RS 25; E = 0.5 + 1.5 + 1 = 3 each -> (12 - 4) * 6.25 = 50
    1: (raw(2), [dist((2, 0.25), (3, 0.5), (4, 0.25))] * 4),
    # RS 50; E = 3 each -> 50
    2: (raw(3), [dist((3, 1.0))] * 4),
    # RS 100; E = 5 each -> 100
    3: (raw(5), [dist((5, 1.0))] * 4),
}
PROB_CORRECT = [True, True, False, False]


def prob_traces() -> list[Trace]:
    confidences = [0.9, 0.7, 0.8, 0.6]
    return [trace(i, "AB"[i // 2], c, PROB_CORRECT[i]) for i, c in enumerate(confidences)]


def prob_judge(without_probs: tuple[int, ...] = (), cache_dir=None) -> ScriptedJudge:
    recorded = {f"trace-{i}": reply for i, (reply, _) in PROB_TRACES.items()}
    probs = {
        f"trace-{i}": dict(zip(DIMENSIONS, dists, strict=True))
        for i, (_, dists) in PROB_TRACES.items()
        if i not in without_probs
    }
    return ScriptedJudge(recorded, probs, cache_dir=cache_dir)


PROB_CONFIG = FRSConfig(k_percent=50, k_values=(25, 50, 100), random_baseline="mean")


def test_frs_from_expected_scores_by_hand():
    traces = prob_traces()
    report = compute_frs(traces, prob_judge(), PROB_CONFIG, progress=False)
    assert [t.rs for t in traces] == [81.25, 25.0, 50.0, 100.0]
    assert [t.rs_expected for t in traces] == pytest.approx([84.375, 50.0, 50.0, 100.0])
    assert traces[0].scores == {"faithfulness": 4, "utility": 5, "coherence": 4, "factuality": 4}  # the argmax
    assert traces[0].expected_scores == pytest.approx(
        {"faithfulness": 4.5, "utility": 5.0, "coherence": 4.0, "factuality": 4.0}
    )
    # RS: K25 {0} 81.25; K50 {0, 2} (81.25 + 50) / 2 = 65.625; K100 (81.25 + 50 + 25 + 100) / 4 = 64.0625
    assert report.at_k == {25: 81.25, 50: 65.625, 100: 64.0625} and report.score == 65.625
    # RS_expected: 84.375; (84.375 + 50) / 2 = 67.1875; (84.375 + 50 + 50 + 100) / 4 = 71.09375
    assert report.at_k_expected == pytest.approx({25: 84.375, 50: 67.1875, 100: 71.09375})
    assert report.score_expected == pytest.approx(67.1875)
    # selection gain, exact expectation: A (0, 1): 81.25 - 53.125 = 28.125, B (2, 3): 50 - 75 = -25 -> 1.5625;
    # expected: A 84.375 - 67.1875 = 17.1875, B 50 - 75 = -25 -> -3.90625
    assert report.selection_gain == pytest.approx(1.5625)
    assert report.selection_gain_expected == pytest.approx(-3.90625)
    # AUC, correct {0, 1} vs incorrect {2, 3}: RS 81.25 > 50 is the only win of 4 pairs -> 0.25; RS_expected
    # 84.375 > 50 wins and 50 = 50 ties -> 1.5 / 4 = 0.375
    assert report.rs_auc == pytest.approx(0.25) and report.rs_expected_auc == pytest.approx(0.375)
    assert (report.auc_n_correct, report.auc_n_incorrect, report.n_scored_without_probs) == (2, 2, 0)
    metrics = report.metrics()
    assert metrics["frs/score_expected"] == pytest.approx(67.1875)
    assert metrics["frs/at_k_expected/100"] == pytest.approx(71.09375)
    assert metrics["frs/rs_auc"] == pytest.approx(0.25) and metrics["frs/rs_expected_auc"] == pytest.approx(0.375)
    # the traces file keeps both readings
    row = traces[0].to_dict()
    assert row["rs"] == 81.25 and row["rs_expected"] == pytest.approx(84.375)
    assert row["expected_scores"] == traces[0].expected_scores
    assert Trace.from_dict(json.loads(json.dumps(row))) == traces[0]


def test_expected_frs_needs_probabilities_for_every_scored_trace():
    traces = prob_traces()
    report = compute_frs(traces, prob_judge(without_probs=(3,)), PROB_CONFIG, progress=False)
    assert traces[3].expected_scores is None and traces[3].rs_expected is None and traces[3].rs == 100.0
    assert "rs_expected" not in traces[3].to_dict()
    assert report.n_scored_without_probs == 1
    # K25 and K50 do not reach trace 3, but no RS_expected estimate mixes in traces without probabilities
    assert report.at_k_expected == {25: None, 50: None, 100: None} and report.score_expected is None
    assert report.selection_gain_expected is None and report.rs_expected_auc is None
    assert report.at_k == {25: 81.25, 50: 65.625, 100: 64.0625} and report.rs_auc == pytest.approx(0.25)
    assert not any("expected" in key for key in report.metrics())


def test_expected_scores_survive_the_judge_cache(tmp_path):
    first = compute_frs(prob_traces(), prob_judge(cache_dir=tmp_path), PROB_CONFIG, progress=False)
    judge = prob_judge(without_probs=(0, 1, 2, 3), cache_dir=tmp_path)  # would give no probabilities if asked
    traces = prob_traces()
    again = compute_frs(traces, judge, PROB_CONFIG, progress=False)
    assert judge.requests == [] and again.judge["cache_hits"] == 4
    assert again.at_k_expected == pytest.approx(first.at_k_expected)
    assert traces[0].expected_scores == pytest.approx(
        {"faithfulness": 4.5, "utility": 5, "coherence": 4, "factuality": 4}
    )


def test_expected_frs_with_the_bin_estimator():
    # N = 4, 2 bins of 2 ranks ({0, 2}, {1, 3}), all judged: on bin edges the bin estimate is the exact top-K mean
    config = FRSConfig(k_percent=50, k_values=(50, 100), estimator="bins", n_bins=2, selection_gain=False)
    report = compute_frs(prob_traces(), prob_judge(), config, progress=False)
    assert report.at_k_expected == pytest.approx({50: 67.1875, 100: 71.09375})


class TokenJudge(Judge):
    """A backend with log-probs: every reply is REPLY, generated one digit per token with the top alternatives below,
    and goes through the judges' own `reply_result` (`procrl.judges.choices` reads the probabilities)."""

    REPLY = '{"faithfulness": 4, "utility": 5, "coherence": 4, "factuality": 4}'
    # natural-log top alternatives at a digit's position; the chosen digit first
    ALTERNATIVES = {
        "4": [("4", math.log(0.5)), ("5", math.log(0.3)), ("3", math.log(0.2))],
        "5": [("5", math.log(0.6)), ("4", math.log(0.4))],
    }

    def __init__(self):
        super().__init__("tokens")

    def _request_payload(self, messages, schema):
        return {"messages": messages}

    async def _judge_uncached(self, requests, schemas, finish):
        tokens, pos = [], 0
        for match in re.finditer(r"\d", self.REPLY):  # the text between digits as one sure token
            tokens.append((self.REPLY[pos : match.start()], [(self.REPLY[pos : match.start()], 0.0)]))
            tokens.append((match.group(), self.ALTERNATIVES[match.group()]))
            pos = match.end()
        tokens.append((self.REPLY[pos:], [(self.REPLY[pos:], 0.0)]))
        for j in range(len(requests)):
            finish(j, reply_result(self.REPLY, schemas[j], attempts=1, tokens=tokens))


def test_expected_scores_from_the_replys_token_log_probs():
    # E[4-slot] = 3 * 0.2 + 4 * 0.5 + 5 * 0.3 = 4.1; E[5-slot] = 4 * 0.4 + 5 * 0.6 = 4.6
    # RS = (4 + 5 + 4 + 4 - 4) * 6.25 = 81.25; RS_expected = (3 * 4.1 + 4.6 - 4) * 6.25 = 80.625
    traces = prob_traces()
    report = compute_frs(traces, TokenJudge(), PROB_CONFIG, progress=False)
    assert traces[0].expected_scores == pytest.approx(
        {"faithfulness": 4.1, "utility": 4.6, "coherence": 4.1, "factuality": 4.1}
    )
    assert traces[0].rs == 81.25 and traces[0].rs_expected == pytest.approx(80.625)
    assert report.at_k_expected == pytest.approx({25: 80.625, 50: 80.625, 100: 80.625})
    assert report.judge["with_probs"] == 4 and report.n_scored_without_probs == 0


# --------------------------------------------------------------------------------------------------------------------
# 6. The correctness-flag ablation and the AUC of RS
# --------------------------------------------------------------------------------------------------------------------


def test_the_flag_can_be_left_out_of_the_request():
    args = ("Tom has 3 apples.", "3 + 4 = 7", "#### 7", True)
    shown, hidden = judge_messages(*args), judge_messages(*args, show_final_correct=False)
    assert hidden[0]["content"] == RUBRIC_WITHOUT_CORRECTNESS != RUBRIC
    assert "correctness check" not in RUBRIC_WITHOUT_CORRECTNESS and "correctness check" in RUBRIC
    assert "final_correct" not in hidden[1]["content"] and "Correctness check" not in hidden[1]["content"]
    # everything else is the same request: the problem, the reference answer, the trace, the reply format
    line = 'Correctness check of the student\'s final answer: {"final_correct": true}\n\n'
    assert shown[1]["content"].replace(line, "") == hidden[1]["content"]
    assert "Reference final answer: 7\n" in hidden[1]["content"] and hidden[1]["content"].endswith(REPLY_FORMAT)


def test_frs_without_the_flag_sends_no_flag():
    judge = scripted_judge()
    config = FRSConfig(judge_sees_correctness=False)
    report = compute_frs(build_traces(), judge, config, progress=False)
    assert judge.requests and all("final_correct" not in m[-1]["content"] for m in judge.requests)
    assert all(m[0]["content"] == RUBRIC_WITHOUT_CORRECTNESS for m in judge.requests)
    assert report.judge_sees_correctness is False and report.at_k[50] == 50.0  # the scripted replies are the same
    shown = scripted_judge()
    assert compute_frs(build_traces(), shown, FRSConfig(), progress=False).judge_sees_correctness is True
    assert all('{"final_correct": ' in m[-1]["content"] for m in shown.requests)


def test_rs_auc_over_scored_traces_with_a_known_answer():
    # build_traces/RECORDED: scored traces with a parseable gold, by correctness (5 is unscored, 11's gold is not
    # parseable): correct 0 (100), 2 (50), 4 (75), 9 (0); incorrect 1 (25), 3 (0), 6 (25), 7 (50), 8 (50), 10 (100).
    # Pairs won (ties 1/2) against the six incorrect: 100 -> 5 + 0.5; 50 -> 3 + 1; 75 -> 5; 0 -> 0 + 0.5 -> 15 / 24.
    report = compute_frs(build_traces(), scripted_judge(), FRSConfig(random_baseline="mean"), progress=False)
    assert (report.auc_n_correct, report.auc_n_incorrect) == (4, 6)
    assert report.rs_auc == pytest.approx(15 / 24)
    assert report.rs_expected_auc is None and report.n_scored_without_probs == 11  # a judge without log-probs


def test_rs_auc_is_none_without_one_of_the_classes():
    traces = build_traces()
    for t in traces:
        t.correct = False
    report = compute_frs(traces, scripted_judge(), FRSConfig(), progress=False)
    assert report.rs_auc is None and report.auc_n_correct == 0 and report.auc_n_incorrect > 0
    assert "frs/rs_auc" not in report.metrics()
