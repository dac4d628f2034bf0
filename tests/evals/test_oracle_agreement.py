"""Agreement of step scorers with the step oracle: first-error F1 (ProcessBench), threshold selection, within-problem
and step-level AUROC against values computed by hand (undefined cases included), and the PUM adapter on the
oracle's units (tiny random PUM)."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import pytest

from procrl.evals.oracle_agreement import (
    choose_threshold,
    first_error_detection,
    is_error_free,
    predict_first_error,
    pum_scores,
    step_auroc,
    step_units,
    within_problem_auroc,
)
from procrl.rewards.oracle import OracleLabels, OracleStep, gold_steps_from_json, oracle_labels
from procrl.rewards.pum import PrefixUtilityModel
from procrl.rewards.pum_rewards import PUMReward

GOLD = gold_steps_from_json('[[14,"+",7,21],[21,"-",9,12]]')
QUESTION = "Tom has 14 apples, gets 7 more and eats 9. How many are left?"
TEXTS = {
    "A": "14 + 7 = 21.\n21 - 9 = 12.\nThe answer is 12.",  # error-free: ProcessAcc 1
    "B": "14 + 7 = 22.\n22 - 9 = 13.",  # first error 0 (then a valid step on the wrong 22: not grounded)
    "C": "14 + 7 = 21.\n21 - 9 = 11.",  # first error 1
    "D": "14 + 7 = 21.",  # no error, ProcessAcc 1/2: "correct" for first-error detection, not error-free
    "E": "No idea.",  # no step
}
L = {name: oracle_labels(text, QUESTION, GOLD) for name, text in TEXTS.items()}


def test_the_hand_labels():
    assert [L[n].first_error for n in "ABCDE"] == [None, 0, 1, None, None]
    assert [is_error_free(L[n]) for n in "ABCDE"] == [True, False, False, False, False]
    assert [[(s.valid, s.is_error) for s in L["B"].steps]] == [[(False, True), (True, True)]]


def test_units_are_the_oracle_steps_and_tile_the_completion():
    units = step_units(TEXTS["A"], L["A"])
    assert [u.text for u in units] == ["14 + 7 = 21", ".\n21 - 9 = 12.\nThe answer is 12."]
    assert len(units) == len(L["A"].steps) == 2 and "".join(u.text for u in units) == TEXTS["A"]
    assert [u.end for u in units] == [L["A"].steps[0].span[1], len(TEXTS["A"])]  # the last runs to the end
    assert step_units(TEXTS["E"], L["E"]) == []


def test_predicted_first_error():
    assert predict_first_error([0.9, 0.4, 0.1], 0.5) == 1
    assert predict_first_error([0.9, 0.6], 0.5) is None
    assert predict_first_error([math.nan, 0.1], 0.5) == 1  # an unscored step never flags
    assert predict_first_error([], 0.5) is None


SCORES = {"A": [0.9, 0.8], "B": [0.2, 0.6], "C": [0.7, 0.3], "D": [0.4], "E": []}


def _fed(names, scores=SCORES, threshold=0.5, **kwargs):
    return first_error_detection([scores[n] for n in names], [L[n] for n in names], threshold, resamples=0, **kwargs)


def test_first_error_f1_by_hand():
    # at 0.5: A -> none (hit), B -> 0 (hit), C -> 1 (hit), D -> 0 (a correct completion flagged: miss), E left out
    result = _fed("ABCDE")
    assert (result.acc_erroneous, result.acc_correct) == (1.0, 0.5)
    assert result.f1 == pytest.approx(2 * 1.0 * 0.5 / 1.5)
    assert (result.n_erroneous, result.n_correct, result.n_no_steps) == (2, 2, 1) and result.intervals == {}
    late = _fed("BC", {**SCORES, "B": [0.6, 0.2]})  # B flagged one step late: not its first error
    early = _fed("BC", {**SCORES, "C": [0.3, 0.3]})  # C flagged one step early
    assert late.acc_erroneous == early.acc_erroneous == 0.5
    assert _fed("C", {**SCORES, "C": [math.nan, 0.3]}).acc_erroneous == 1.0  # NaN at step 0 is passed over


def test_first_error_f1_is_undefined_without_a_class_and_zero_when_both_miss():
    only_correct = _fed("AD")
    assert only_correct.acc_erroneous is None and only_correct.f1 is None and only_correct.acc_correct == 0.5
    only_erroneous = _fed("BC")
    assert only_erroneous.acc_correct is None and only_erroneous.f1 is None and only_erroneous.acc_erroneous == 1.0
    nothing = _fed("E")
    assert (nothing.acc_erroneous, nothing.acc_correct, nothing.f1, nothing.n_no_steps) == (None, None, None, 1)
    all_miss = _fed("AB", {**SCORES, "A": [0.1, 0.1], "B": [0.9, 0.9]})
    assert (all_miss.acc_erroneous, all_miss.acc_correct, all_miss.f1) == (0.0, 0.0, 0.0)  # genuinely 0


def test_first_error_intervals_resample_problems():
    names = "ABAB"
    result = first_error_detection([SCORES[n] for n in names], [L[n] for n in names], 0.5,
                                   problem_ids=["p", "p", "q", "q"], resamples=50)  # fmt: skip
    assert result.f1 == 1.0 and result.intervals == {"acc_erroneous": (1.0, 1.0), "acc_correct": (1.0, 1.0),
                                                     "f1": (1.0, 1.0)}  # fmt: skip
    mixed = first_error_detection([SCORES[n] for n in "ABD"], [L[n] for n in "ABD"], 0.5,
                                  problem_ids=["p", "p", "q"], resamples=200, seed=1)  # fmt: skip
    low, high = mixed.intervals["acc_correct"]
    assert 0.0 <= low <= mixed.acc_correct <= high <= 1.0 and low < high  # p: 1 of 1 correct hit; q: 0 of 1
    assert (
        mixed.intervals
        == first_error_detection(
            [SCORES[n] for n in "ABD"], [L[n] for n in "ABD"], 0.5, problem_ids=["p", "p", "q"], resamples=200, seed=1
        ).intervals
    )
    assert _fed("AD").intervals == {}
    undefined = first_error_detection([SCORES["A"]], [L["A"]], 0.5, resamples=20)
    assert undefined.intervals["acc_erroneous"] is None and undefined.intervals["f1"] is None


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="completion 0: 1 step scores for 2 oracle steps"):
        first_error_detection([[0.5]], [L["A"]], 0.5)
    with pytest.raises(ValueError, match="2 score lists for 1"):
        first_error_detection([[0.5, 0.5], [0.1]], [L["A"]], 0.5)
    with pytest.raises(ValueError, match="NaN"):
        first_error_detection([[0.5, 0.5]], [L["A"]], math.nan)
    with pytest.raises(ValueError, match="1 problem ids for 2"):
        first_error_detection([SCORES["A"], SCORES["B"]], [L["A"], L["B"]], 0.5, problem_ids=["p"])
    with pytest.raises(ValueError, match="'valid' or 'no_error'"):
        step_auroc([SCORES["A"]], [L["A"]], positive="grounded")
    with pytest.raises(ValueError, match="give one each"):
        within_problem_auroc([0.5], [L["A"], L["B"]], ["p", "p"])


def test_threshold_selection_by_hand():
    # candidates 0.2, 0.25, 0.45, 0.65, 0.725, 0.775, 0.85, 0.9+: hits A t<=0.8, D t<=0.75, B t>0.2, C 0.3<t<=0.7
    # F1: 0, 2/3, 1, 1, 2/3, ...; the first maximum is the midpoint of 0.3 and 0.6
    scores = {**SCORES, "D": [0.75]}
    names = "ABCDE"
    threshold = choose_threshold([scores[n] for n in names], [L[n] for n in names])
    assert threshold == pytest.approx(0.45)
    assert _fed(names, scores, threshold).f1 == 1.0
    with pytest.raises(ValueError, match="needs erroneous and correct completions with steps, got 0 and 2"):
        choose_threshold([SCORES["A"], SCORES["D"]], [L["A"], L["D"]])
    with pytest.raises(ValueError, match="no finite step score"):
        choose_threshold([[math.nan, math.nan]], [L["A"]])


def _fake_labels(valid: list[bool], grounded: list[bool], process_acc: float) -> OracleLabels:
    steps = tuple(
        OracleStep((k, k + 1), "x", (), (), "", Fraction(0), v, g, False, None)
        for k, (v, g) in enumerate(zip(valid, grounded, strict=True))
    )
    first = next((k for k, s in enumerate(steps) if s.is_error), None)
    return OracleLabels(steps, first, process_acc, (None,), 1)


def test_chosen_threshold_reaches_the_best_f1_of_a_dense_search():
    rng, checked = random.Random(0), 0
    for _ in range(40):
        labels, scores = [], []
        for _ in range(rng.randint(2, 9)):
            k = rng.randint(0, 4)
            valid = [rng.random() < 0.7 for _ in range(k)]
            labels.append(_fake_labels(valid, [True] * k, 1.0))
            scores.append([rng.choice([0.1, 0.2, 0.3, 0.5, 0.8, math.nan]) for _ in range(k)])
        kinds = {label.first_error is None for label in labels if label.steps}
        if kinds != {True, False}:
            continue
        chosen = choose_threshold(scores, labels)
        dense = [x / 100 for x in range(-10, 111)]
        best = max(first_error_detection(scores, labels, t, resamples=0).f1 for t in dense)
        assert first_error_detection(scores, labels, chosen, resamples=0).f1 == pytest.approx(best)
        checked += 1
    assert checked >= 20


def test_within_problem_auroc_by_hand():
    rows = [  # (problem, completion, score)
        ("p1", "A", 0.8), ("p1", "B", 0.2), ("p1", "C", 0.9), ("p1", "D", 0.5), ("p1", "E", None),
        ("p2", "A", 0.3), ("p2", "A", 0.4),  # only error-free completions: undefined
        ("p3", "B", 0.3), ("p3", "C", 0.1),  # only erroneous ones: undefined
        ("p4", "A", 0.5), ("p4", "B", 0.5), ("p4", "D", math.nan),  # a tie: 1/2; the NaN is left out
    ]  # fmt: skip
    result = within_problem_auroc([s for _, _, s in rows], [L[n] for _, n, _ in rows], [p for p, _, _ in rows],
                                  resamples=0)  # fmt: skip
    # p1: 0.8 against 0.2, 0.9, 0.5 -> 2/3 (E unscored); p4: 1/2; mean 7/12
    assert result.auroc == pytest.approx(7 / 12)
    assert (result.n_problems, result.n_undefined, result.n_unscored, result.interval) == (2, 2, 2, None)
    with_interval = within_problem_auroc([s for _, _, s in rows], [L[n] for _, n, _ in rows],
                                         [p for p, _, _ in rows], resamples=100)  # fmt: skip
    low, high = with_interval.interval
    assert 0.5 <= low <= 7 / 12 <= high <= 2 / 3
    none = within_problem_auroc([0.3, 0.4], [L["A"], L["B"]], ["p", "q"])  # no problem with both
    assert (none.auroc, none.interval, none.n_problems, none.n_undefined) == (None, None, 0, 2)


def test_step_auroc_by_hand():
    names = "ABC"
    scores = {"A": [0.9, 0.8], "B": [0.2, 0.85], "C": [0.7, 0.3]}
    step_scores, labels = [scores[n] for n in names], [L[n] for n in names]
    valid = step_auroc(step_scores, labels, resamples=0)
    # valid steps 0.9, 0.8, 0.85, 0.7 (B's second step is valid) against the invalid 0.2, 0.3: every pair won
    assert (valid.auroc, valid.n_positive, valid.n_negative, valid.n_unscored) == (1.0, 4, 2, 0)
    # without error: 0.9, 0.8, 0.7 against 0.2, 0.85 (valid but not grounded), 0.3: 3 + 2 + 2 = 7 of 9 pairs
    no_error = step_auroc(step_scores, labels, positive="no_error", resamples=0)
    assert no_error.auroc == pytest.approx(7 / 9) and no_error.positive == "no_error"
    unscored = step_auroc([[0.9, math.nan]], [L["C"]], resamples=0)
    assert (unscored.auroc, unscored.n_positive, unscored.n_negative, unscored.n_unscored) == (None, 1, 0, 1)
    pooled = step_auroc(step_scores, labels, positive="no_error", problem_ids=["p", "q", "r"], resamples=200)
    low, high = pooled.interval
    assert 0.0 <= low <= high <= 1.0
    single = step_auroc(step_scores, labels, problem_ids=["p"] * 3, resamples=50)
    assert single.interval == (1.0, 1.0)  # one problem: the interval is the value


@pytest.fixture()
def pum(smollm2_tokenizer, tiny_pum_factory):
    return PrefixUtilityModel(tiny_pum_factory(len(smollm2_tokenizer)), smollm2_tokenizer, max_length=1024)


def test_pum_scores_read_the_prefix_utility_after_each_oracle_step(pum):
    names = "ABE"
    texts, labels = [TEXTS[n] for n in names], [L[n] for n in names]
    step_scores, completion_scores = pum_scores(pum, [QUESTION] * 3, texts, labels)
    assert [len(s) for s in step_scores] == [2, 2, 0]
    for text, label, scores in zip(texts, labels, step_scores, strict=True):
        units = step_units(text, label)
        for k, value in enumerate(scores):  # U(x, pieces 0..k), each prefix scored alone
            assert value == pytest.approx(pum.score([QUESTION], [units[: k + 1]])[0], abs=1e-4)
    expected = PUMReward(pum, mode="full")(completions=texts, question=[QUESTION] * 3)
    assert completion_scores == pytest.approx(expected) and all(s is not None for s in completion_scores)
    with_empty, _ = pum_scores(pum, [QUESTION] * 3, texts, labels, include_empty=True)
    assert [len(s) for s in with_empty] == [3, 3, 0]  # U(x, empty prefix) in front of rows with steps
    for row, scores in zip(with_empty[:2], step_scores[:2], strict=True):
        assert row[0] == pytest.approx(pum.score([QUESTION], [[]])[0], abs=1e-4)
        assert row[1:] == pytest.approx(scores, abs=1e-5)
    with pytest.raises(ValueError, match="3 questions, 2 completions"):
        pum_scores(pum, [QUESTION] * 3, texts[:2], labels)


def test_pum_steps_past_the_budget_are_unscored(pum, smollm2_tokenizer, tiny_pum_factory):
    units = step_units(TEXTS["A"], L["A"])
    first_end = pum.render(QUESTION, units).boundaries[0]  # tokens through the first unit
    short = PrefixUtilityModel(tiny_pum_factory(len(smollm2_tokenizer)), smollm2_tokenizer, max_length=first_end + 2)
    step_scores, completion_scores = pum_scores(short, [QUESTION], [TEXTS["A"]], [L["A"]])
    assert math.isfinite(step_scores[0][0]) and math.isnan(step_scores[0][1]) and completion_scores == [None]
    result = first_error_detection(step_scores, [L["A"]], 0.0, resamples=0)
    assert result.n_correct == 1  # the unscored step is passed over, not an error
