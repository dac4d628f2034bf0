"""Best-of-k curves (evals/bestofn.py) on hand-made `procrl select` problem rows: the pick rules, every method at
k == n against values computed by hand, the subsets shared by the methods and reproducible, the AUROC with ties, the
table, the figure and the metrics. The command end to end: tests/scripts/test_select_beam_commands.py.
"""

from __future__ import annotations

import json
import math

import pytest

from procrl.evals.bestofn import (
    Samples,
    bestofn_curves,
    bestofn_table,
    curve_metrics,
    draw_subsets,
    parse_ks,
    pick_argmax,
    pick_majority,
    plot_bestofn,
    samples_from_problems,
)
from procrl.evals.stats import MISSING

# (extracted, correct, num_tokens, score_pum, score_picsar) per candidate; problem "d" has an unparseable gold
ROWS = {
    "a": [("4", False, 10, 0.1, -5.0), ("5", True, 30, 0.9, -7.0), ("5", True, 20, None, -3.0), ("4", False, 30, 0.9, -3.0)],
    "b": [(None, False, 5, None, None), ("7", False, 8, 0.2, -1.0), ("3", True, 50, 0.8, None), ("3", True, 12, 0.1, -2.0)],
    "c": [(None, False, 7, None, None), (None, False, 7, None, None), (None, True, 3, None, None), (None, False, 1, None, None)],
    "d": [("1", None, 4, 0.5, -1.0), ("2", None, 4, 0.4, -1.0), ("1", None, 4, 0.3, -1.0), ("2", None, 4, 0.2, -1.0)],
}  # fmt: skip
GREEDY = {"a": True, "b": False, "c": True}


def problems(columns=("pum", "picsar"), greedy=True, rows=ROWS) -> list[dict]:
    """Problem rows as `run_select` returns them (`problems`)."""
    out = []
    for pid, cands in rows.items():
        candidates = []
        for i, (extracted, correct, tokens, pum, picsar) in enumerate(cands):
            c = {"text": f"{pid}-{i}", "extracted": extracted, "correct": correct, "num_tokens": tokens}
            c |= {f"score_{name}": v for name, v in (("pum", pum), ("picsar", picsar)) if name in columns}
            candidates.append(c)
        row = {"problem_id": pid, "answer": "x", "candidates": candidates, "picks": {}}
        if greedy and pid in GREEDY:
            row["greedy"] = {"text": f"{pid}-g", "extracted": "1", "correct": GREEDY[pid]}
        out.append(row)
    return out


@pytest.fixture()
def samples() -> Samples:
    return samples_from_problems(problems(), 4)


def at(result, method, k) -> float:
    return next(p["accuracy"] for p in result["curves"][method] if p["k"] == k)


# ----------------------------------------------------------------------------------------------------------
# Pick rules
# ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answers", "expected"),
    [
        (["4", "5", "5"], 1),  # 5 wins 2:1: its first occurrence
        (["4", None, "5", "5", "4"], 0),  # 2:2 tie -> the answer seen first
        (["5", "4", "4", "5"], 0),  # tie again, now "5" is seen first
        ([None, "7", "3", "3"], 2),  # None does not vote
        ([None, None], None),  # nobody answered
        ([r"\frac{1}{2}", "0.5", "1/2", "3", "3"], 0),  # three spellings of 1/2 (3 votes) beat 3 (2 votes)
    ],
)
def test_pick_majority(answers, expected):
    assert pick_majority(answers) == expected


@pytest.mark.parametrize(
    ("values", "expected"),
    [([0.1, 0.9, 0.3], 1), ([0.5, None, 0.5], 0), ([None, -2.0, -2.0], 1), ([None, None], None), ([3, 7, 7], 1)],
)
def test_pick_argmax(values, expected):
    assert pick_argmax(values) == expected


# ----------------------------------------------------------------------------------------------------------
# The samples
# ----------------------------------------------------------------------------------------------------------


def test_samples_leave_out_unparseable_gold_and_read_columns(samples):
    assert samples.n == 4 and samples.unparseable_gold == 1
    assert [p.problem_id for p in samples.problems] == ["a", "b", "c"]
    assert samples.score_names == ["pum", "picsar"]
    assert samples.problems[0].scores["pum"] == [0.1, 0.9, None, 0.9]
    assert [p.greedy for p in samples.problems] == [True, False, True]


def test_non_finite_scores_are_none_and_baseline_names_are_kept_apart():
    rows = problems(columns=("pum",))
    rows[0]["candidates"][0]["score_pum"] = math.inf
    for c in rows[1]["candidates"]:
        c["score_majority"] = 1.0
    samples = samples_from_problems(rows, 4)
    assert samples.problems[0].scores["pum"][0] is None
    assert samples.score_names == ["pum", "score_majority"]  # not the majority vote's row
    assert samples.problems[0].scores["score_majority"] == [None] * 4  # a column a problem lacks: unscored


def test_samples_need_n_candidates_per_problem_and_may_hold_no_problem():
    rows = problems()
    rows[0]["candidates"].pop()
    with pytest.raises(ValueError, match="problem 'a' has 3 candidates, expected n = 4"):
        samples_from_problems(rows, 4)
    only_unparseable = samples_from_problems(problems(rows={"d": ROWS["d"]}), 4)
    assert (only_unparseable.problems, only_unparseable.unparseable_gold) == ([], 1)


def test_parse_ks():
    assert parse_ks("8, 2,2") == [2, 8] and parse_ks("") == [] and parse_ks(" , ") == []
    with pytest.raises(ValueError, match="comma-separated integers"):
        parse_ks("1,two")
    with pytest.raises(ValueError, match="every k must be >= 1"):
        parse_ks("0,2")


# ----------------------------------------------------------------------------------------------------------
# Curves
# ----------------------------------------------------------------------------------------------------------


def test_every_method_at_k_equal_n_by_hand(samples):
    result = bestofn_curves(samples, [4], subsets=8, resamples=200)
    assert result["methods"] == ["greedy", "random", "majority", "longest", "pum", "picsar", "pass@k"]
    # per problem (a, b, c): random = mean correctness; majority: a's 4-5 tie goes to "4" (wrong), b's "3" (right),
    # c has no answer (wrong); longest: a's 30-30 tie -> index 1 (right), b's 50 (right), c's 7-7 tie -> index 0
    # (wrong); pum: a's 0.9-0.9 tie -> index 1, b's 0.8, c unscored (abstain: wrong); picsar: a's -3/-3 -> index 2
    # (right), b's -1 -> index 1 (wrong); pass@k: all; greedy: True, False, True.
    expected = {
        "greedy": [1, 0, 1], "random": [0.5, 0.5, 0.25], "majority": [0, 1, 0], "longest": [1, 1, 0],
        "pum": [1, 1, 0], "picsar": [1, 0, 0], "pass@k": [1, 1, 1],
    }  # fmt: skip
    for method, values in expected.items():
        assert result["per_problem"][method]["4"] == pytest.approx(values), method
        assert at(result, method, 4) == pytest.approx(sum(values) / 3), method
    point = result["curves"]["pass@k"][0]
    assert (point["ci_low"], point["ci_high"]) == (1.0, 1.0)
    low, high = result["curves"]["majority"][0]["ci_low"], result["curves"]["majority"][0]["ci_high"]
    assert 0.0 <= low <= 1 / 3 <= high <= 1.0
    assert result["problems"] == 3 and result["unparseable_gold"] == 1 and result["problem_ids"] == ["a", "b", "c"]
    assert result["settings"] == {"ks": [4], "subsets": 8, "seed": 0, "resamples": 200, "n": 4}
    json.dumps(result)  # json-safe


def test_majority_counts_answers_not_spellings():
    # gold 1/2: the outcome check grades \frac{1}{2}, 0.5 and 1/2 correct and 3 wrong. Voting by answer, 1/2 has
    # 3 of 5 votes, so majority@5 picks a correct sample: 1.0 (counting strings, "3" would win 2:1:1:1 -> 0.0).
    answers = [r"\frac{1}{2}", "0.5", "1/2", "3", "3"]
    rows = {"half": [(a, a != "3", 10, None, None) for a in answers]}
    samples = samples_from_problems(problems(columns=(), greedy=False, rows=rows), 5)
    result = bestofn_curves(samples, [5], subsets=1, resamples=10)
    assert result["per_problem"]["majority"]["5"] == [1.0]
    assert at(result, "random", 5) == pytest.approx(3 / 5)  # the same samples: 3 of 5 correct


def test_subsets_are_shared_by_the_methods(samples):
    result = bestofn_curves(samples, [1, 2, 3], subsets=16, resamples=50)
    per = result["per_problem"]
    # k = 1: every method that picks something picks the one candidate, so random, longest and pass@k agree on
    # every problem only if they saw the same subsets; majority too on problem a (every candidate answers)
    assert per["random"]["1"] == pytest.approx(per["longest"]["1"])
    assert per["random"]["1"] == pytest.approx(per["pass@k"]["1"])
    assert per["majority"]["1"][0] == per["random"]["1"][0]
    # a score column equal to num_tokens is the longest method; one equal to correctness is pass@k, at every k
    for p in samples.problems:
        p.scores = {"length": [float(t) for t in p.num_tokens], "oracle": [float(c) for c in p.correct]}
    paired = bestofn_curves(samples, [1, 2, 3], subsets=16, resamples=50)["per_problem"]
    for k in ("1", "2", "3"):
        assert paired["length"][k] == paired["longest"][k]
        assert paired["oracle"][k] == pytest.approx(paired["pass@k"][k], abs=1e-12)  # pass@k is exact


def test_subsets_are_reproducible_and_seeded():
    draws = draw_subsets("svamp/3", 16, 6, 64, 0)
    assert draws == draw_subsets("svamp/3", 16, 6, 64, 0)
    assert len(draws) == 64 and all(len(s) == 6 == len(set(s)) and list(s) == sorted(s) for s in draws)
    assert draws != draw_subsets("svamp/3", 16, 6, 64, 1) != draw_subsets("svamp/4", 16, 6, 64, 0)
    assert draw_subsets("p", 5, 5, 64, 0) == [(0, 1, 2, 3, 4)]  # k == n: the full set, once
    for k in (0, 6):
        with pytest.raises(ValueError, match=f"k = {k}"):
            draw_subsets("p", 5, k, 64, 0)


def test_curves_are_reproducible_and_random_and_pass_at_k_are_exact(samples):
    # subsets=2 < C(4, 2) = 6: the argmax methods average 2 drawn subsets, random and pass@k are closed forms
    one = bestofn_curves(samples, [2], subsets=2, resamples=50)
    assert one == bestofn_curves(samples, [2], subsets=2, resamples=50)
    # random: the mean correctness 0.5, 0.5, 0.25; pass@2 of c (one correct of 4): 1 - C(3,2)/C(4,2) = 0.5
    assert one["per_problem"]["random"]["2"] == pytest.approx([0.5, 0.5, 0.25], abs=1e-12)
    assert one["per_problem"]["pass@k"]["2"][2] == pytest.approx(0.5, abs=1e-12)


def test_every_subset_once_when_there_are_few():
    assert draw_subsets("p", 4, 2, 6, 0) == [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]
    assert len(draw_subsets("p", 4, 2, 5, 0)) == 5  # C(4, 2) = 6 > 5: drawn


def test_bad_ks(samples):
    with pytest.raises(ValueError, match="k = 5 must be in"):
        bestofn_curves(samples, [1, 5])
    with pytest.raises(ValueError, match="ks is empty"):
        bestofn_curves(samples, [])


def test_no_greedy_row_unless_every_problem_has_one():
    rows = problems()
    del rows[1]["greedy"]
    result = bestofn_curves(samples_from_problems(rows, 4), [4], resamples=20)
    assert "greedy" not in result["methods"]


# ----------------------------------------------------------------------------------------------------------
# AUROC, table, plot
# ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("scores", "correct", "expected"),
    [
        ([30, 20, 10, 30], [True, True, False, False], 2.5 / 4),  # (30>10) (30=30: 1/2) (20>10) (20<30)
        ([0.9, 0.1, 0.9, None], [True, False, False, True], 0.75),  # None left out: pos [0.9], neg [0.1, 0.9]
        ([1.0, 1.0], [True, False], 0.5),  # a tie
        ([1.0, 2.0], [True, False], 0.0),
        ([None, 2.0], [True, False], None),  # no scored correct candidate
        ([1.0, 2.0], [False, False], None),  # all wrong: no AUROC
        ([1.0, 2.0, 3.0], [True, True, True], None),  # all right: no AUROC either
        ([None, None, 2.0], [True, True, False], None),  # every correct candidate unscored
    ],
)
def test_one_problems_auroc_leaves_unscored_candidates_out(scores, correct, expected):
    rows = {"p": [("1", c, 1, s, None) for s, c in zip(scores, correct, strict=True)]}
    auroc = bestofn_curves(samples_from_problems(problems(("pum",), rows=rows), len(scores)), [1])["auroc"]["pum"]
    assert auroc["auroc"] == (None if expected is None else pytest.approx(expected))
    assert auroc["problems"] == (0 if expected is None else 1)


def test_score_auroc_over_problems(samples):
    auroc = bestofn_curves(samples, [4], resamples=100)["auroc"]
    # longest: a 0.625, b 1.0, c (3 vs 7, 7, 1) 1/3; pum: a 0.75, b (0.8 > 0.2, 0.1 < 0.2) 0.5, c unscored;
    # picsar: a (-7, -3 vs -5, -3) 1.5/4, b (-2 vs -1) 0.0
    assert auroc["longest"]["auroc"] == pytest.approx((0.625 + 1.0 + 1 / 3) / 3) and auroc["longest"]["problems"] == 3
    assert auroc["pum"]["auroc"] == pytest.approx(0.625) and auroc["pum"]["problems"] == 2
    assert auroc["picsar"]["auroc"] == pytest.approx(0.1875) and auroc["picsar"]["problems"] == 2
    assert 0.0 <= auroc["picsar"]["ci_low"] <= 0.1875 <= auroc["picsar"]["ci_high"] <= 0.375
    # the run record: the mean, its interval and the count of problems behind it
    metrics = curve_metrics(bestofn_curves(samples, [4], resamples=100))
    assert metrics["bestofn/picsar/auroc"] == pytest.approx(0.1875) and metrics["bestofn/picsar/auroc_problems"] == 2
    assert (metrics["bestofn/picsar/auroc_ci_low"], metrics["bestofn/picsar/auroc_ci_high"]) == (
        auroc["picsar"]["ci_low"], auroc["picsar"]["ci_high"],
    )  # fmt: skip
    for p in samples.problems:
        p.scores["pum"] = [None] * 4
    empty = bestofn_curves(samples, [4], resamples=10)["auroc"]["pum"]
    assert empty == {"auroc": None, "problems": 0, "ci_low": None, "ci_high": None}


def test_tied_scores_pick_the_earliest_candidate_of_each_subset():
    # four equal scores, the 2nd and 4th right: a k-subset's pick is its lowest index. k = 2, all 6 subsets:
    # {0,1} {0,2} {0,3} pick 0 (wrong), {1,2} {1,3} pick 1 (right), {2,3} picks 2 (wrong) -> 2/6. k = 3: {0,..}
    # three subsets wrong, {1,2,3} right -> 1/4. k = 4: candidate 0, wrong. The AUROC: all pairs tied -> 0.5.
    rows = {"t": [("1", False, 5, 1.0, None), ("2", True, 5, 1.0, None), ("1", False, 5, 1.0, None),
                  ("2", True, 5, 1.0, None)]}  # fmt: skip
    result = bestofn_curves(samples_from_problems(problems(("pum",), rows=rows), 4), [1, 2, 3, 4], subsets=64)
    assert [at(result, "pum", k) for k in (1, 2, 3, 4)] == pytest.approx([0.5, 2 / 6, 1 / 4, 0.0])
    assert [at(result, "longest", k) for k in (1, 2, 3, 4)] == pytest.approx([0.5, 2 / 6, 1 / 4, 0.0])  # same ties
    assert [at(result, "pass@k", k) for k in (1, 2, 3, 4)] == pytest.approx([0.5, 5 / 6, 1.0, 1.0])
    assert result["auroc"]["pum"]["auroc"] == pytest.approx(0.5)


def test_table_and_plot(samples, tmp_path):
    result = bestofn_curves(samples, [1, 2, 4], subsets=8, resamples=100)
    table = bestofn_table(result)
    lines = table.splitlines()
    assert "| method | k=1 | k=2 | k=4 |" in lines
    assert "| pass@k | " in table and lines[lines.index("| method | k=1 | k=2 | k=4 |") + 2].startswith(
        "| greedy | 66.7 ["
    )
    pass_row = next(line for line in lines if line.startswith("| pass@k |"))
    assert pass_row.endswith("| 100.0 [100.0, 100.0] |")
    assert next(line for line in lines if line.startswith("| pum |")).count("[") == 3
    auroc_row = next(line for line in lines if line.startswith("| picsar | 0.188 |"))
    assert auroc_row.endswith("| 2 |")
    png = plot_bestofn(result, tmp_path / "plots" / "curves.png")
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_no_problem_gives_undefined_points_not_zero(tmp_path):
    # every problem left out (unparseable gold): nothing to average at any k
    empty = Samples(problems=[], n=4, unparseable_gold=2)
    result = bestofn_curves(empty, [1, 4], subsets=8, resamples=50)
    assert result["problems"] == 0 and result["methods"] == ["random", "majority", "longest", "pass@k"]  # no greedy
    undefined = [{"k": 1, "accuracy": None, "ci_low": None, "ci_high": None}, {"k": 4, "accuracy": None,
                 "ci_low": None, "ci_high": None}]  # fmt: skip
    assert all(points == undefined for points in result["curves"].values())  # None, not 0 [0, 0]
    assert result["auroc"]["longest"] == {"auroc": None, "problems": 0, "ci_low": None, "ci_high": None}
    assert f"| random | {MISSING} | {MISSING} |" in bestofn_table(result).splitlines()
    assert plot_bestofn(result, tmp_path / "empty.png").read_bytes()[:4] == b"\x89PNG"  # nothing drawn, no crash
    # the run record keeps the counts and leaves the undefined values out
    assert curve_metrics(result) == {"bestofn/problems": 0, "bestofn/unparseable_gold": 2}


def test_paired_contrasts_by_hand(samples):
    """Per problem (a, b, c) at k = 4 (the full set, once): longest [1, 1, 0] and majority [0, 1, 0] (the by-hand
    values above), so longest@4 - majority@4 = [1, 0, 0]: mean 1/3, and every bootstrap mean lies in [0, 1]."""
    from procrl.evals.bestofn import parse_contrasts
    from procrl.evals.stats import bootstrap_mean_interval

    result = bestofn_curves(
        samples, [2, 4], subsets=8, resamples=200, contrasts=parse_contrasts("longest@4-majority@4")
    )
    (contrast,) = result["contrasts"]
    assert contrast["name"] == "longest@4-majority@4" and contrast["problems"] == 3
    assert (contrast["first"], contrast["second"], contrast["diff"]) == pytest.approx((2 / 3, 1 / 3, 1 / 3))
    expected = bootstrap_mean_interval([1.0, 0.0, 0.0], resamples=200, seed=0)
    assert (contrast["ci_low"], contrast["ci_high"]) == pytest.approx(expected)
    assert curve_metrics(result)["bestofn/contrast/longest@4-majority@4"] == pytest.approx(1 / 3)
    assert "| longest@4-majority@4 | 66.7 | 33.3 | +33.3 [" in bestofn_table(result)
    # across ks: pick at k = 2 (expected over subsets) against the full set
    cross = bestofn_curves(samples, [2, 4], subsets=8, contrasts=[("random", 2, "random", 4)])["contrasts"][0]
    assert cross["diff"] == pytest.approx(0.0)  # random's expected accuracy does not depend on k
    with pytest.raises(ValueError, match="no curve point picsar@3"):
        bestofn_curves(samples, [2, 4], contrasts=[("picsar", 3, "majority", 4)])
    with pytest.raises(ValueError, match="no curve point nope@2"):
        bestofn_curves(samples, [2, 4], contrasts=[("nope", 2, "majority", 4)])


@pytest.mark.parametrize("text", ["picsar@6", "picsar@0-majority@16", "picsar-majority", "a@x-b@2"])
def test_parse_contrasts_refuses_malformed_entries(text):
    from procrl.evals.bestofn import parse_contrasts

    with pytest.raises(ValueError, match="write METHOD@K-METHOD@K"):
        parse_contrasts(text)
