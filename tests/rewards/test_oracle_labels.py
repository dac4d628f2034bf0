"""Oracle labels (`procrl.rewards.oracle.labels`): hand-labelled completions of one two-step problem, then repeated
gold values, grounding, and the bounded potential."""

import random

import pytest

from procrl.rewards.oracle import GoldStep, gold_steps_from_json, oracle_labels

QUESTION = "Sam has 14 marbles. He wins 7 more, then gives 9 away. How many marbles does he have now?"
GOLD = gold_steps_from_json('[[14,"+",7,21],[21,"-",9,12]]')


def _labels(text, question=QUESTION, gold=GOLD, **kwargs):
    return oracle_labels(text, question, gold, **kwargs)


def _flags(labels):
    """(valid, grounded, on_track) per step, as 'V'/'v', 'G'/'g', 'T'/'t' (upper case: true)."""
    return [
        ("V" if s.valid else "v") + ("G" if s.grounded else "g") + ("T" if s.on_track else "t") for s in labels.steps
    ]


# (completion, step flags, first_error, process_acc, gold_matched), labelled by hand
CASES = {
    "correct chain": ("14 + 7 = 21. 21 - 9 = 12. The answer is 12.", ["VGT", "VGT"], None, 1.0, (0, 1)),
    "chained on one line": ("14 + 7 = 21 - 9 = 12. The answer is 12.", ["VGT", "VGT"], None, 1.0, (0, 1)),
    # a slip makes the step invalid; the next step uses the wrong 22, which is known to nobody: ungrounded
    "arithmetic slip": ("14 + 7 = 22. 22 - 9 = 13. The answer is 13.", ["vGt", "Vgt"], 0, 0.0, (None, None)),
    # the slip is an error even when the model recovers; the recovery still earns both gold results
    "slip, then recovery": ("14 + 7 = 22. No: 14 + 7 = 21. 21 - 9 = 12.", ["vGt", "VGT", "VGT"], 0, 1.0, (1, 2)),
    # 8 is neither in the problem nor a result: ungrounded, and so is what is computed from it
    "invented operand": ("14 + 7 = 21. 21 - 8 = 13. 13 - 1 = 12.", ["VGT", "Vgt", "VgT"], 1, 0.5, (0, None)),
    "invented route to a gold value": ("100 - 79 = 21. 21 - 9 = 12.", ["VgT", "VgT"], 0, 0.0, (None, None)),
    # a combined operation is one valid, grounded step: no error, but the skipped 21 is not credited
    "skipped step": ("14 + 7 - 9 = 12. The answer is 12.", ["VGT"], None, 0.5, (None, 0)),
    # 21 is used before it is computed: ungrounded there, credited when computed
    "steps out of order": ("21 - 9 = 12. 14 + 7 = 21.", ["VgT", "VGT"], 0, 0.5, (1, None)),
    "steps in words": ("14 plus 7 is 21, and 21 minus 9 equals 12.", ["VGT", "VGT"], None, 1.0, (0, 1)),
    "prefix words": ("Add 7 to 14 to get 21. Subtract 9 from 21 to get 12.", ["VGT", "VGT"], None, 1.0, (0, 1)),
    # a valid, grounded step off the gold path is no error
    "off track": ("14 + 9 = 23. 14 + 7 = 21. 21 - 9 = 12.", ["VGt", "VGT", "VGT"], None, 1.0, (1, 2)),
    "right value, wrong arithmetic": ("14 + 7 = 12.", ["vGT"], 0, 0.0, (None, None)),
    "truncated mid-equation": ("14 + 7 = 21. 21 - 9 =", ["VGT"], None, 0.5, (0, None)),
    "empty": ("", [], None, 0.0, (None, None)),
    "no arithmetic": ("I think the answer is 12.", [], None, 0.0, (None, None)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_hand_labelled_completions(case):
    text, flags, first_error, acc, matched = CASES[case]
    labels = _labels(text)
    assert _flags(labels) == flags
    assert labels.first_error == first_error and labels.process_acc == acc and labels.gold_matched == matched
    assert [s.gold_index for s in labels.steps] == [
        matched.index(i) if i in matched else None for i in range(len(labels.steps))
    ]
    assert all(text[s.span[0] : s.span[1]] == s.text for s in labels.steps)


def test_a_truncated_completion_drops_a_result_that_may_be_cut():
    text = "14 + 7 = 21. 21 - 9 = 1"  # cut inside "12"
    cut = _labels(text, truncated=True)
    assert _flags(cut) == ["VGT"] and cut.first_error is None and cut.process_acc == 0.5
    assert _flags(_labels(text)) == ["VGT", "vGt"]  # the model ended there: a wrong step


def test_padding_and_repeats_do_not_raise_process_acc():
    clean = _labels("14 + 7 = 21. 21 - 9 = 12.")
    question = QUESTION + " (Sam is 2 years older than his 2 cousins.)"  # 2 is a known number here
    padded = _labels("2 + 2 = 4. " * 20 + "14 + 7 = 21. " * 5 + "7 + 14 = 21. 21 - 9 = 12. " * 5, question)
    assert padded.process_acc == clean.process_acc == 1.0
    assert padded.first_error is None and padded.n_off_track == 20 and padded.score(0.5) == clean.score(0.5)
    repeats = _labels("14 + 7 = 21. " * 10)
    assert repeats.process_acc == 0.5
    # "2 + 2 = 4" where 2 is not in the problem is an invented operand: an error, the score falls
    assert _labels("2 + 2 = 4. 14 + 7 = 21. 21 - 9 = 12.").score(0.5) == 0.5


def test_repeated_gold_values_need_distinct_computations():
    gold = gold_steps_from_json('[[3,"*",4,12],[20,"-",8,12],[12,"+",12,24]]')
    question = "3 boxes of 4, and 20 minus 8; add the two."
    assert oracle_labels("3 * 4 = 12. 4 * 3 = 12. 3 * 4 = 12.", question, gold).process_acc == pytest.approx(1 / 3)
    both = oracle_labels("20 - 8 = 12. 3 * 4 = 12. 12 + 12 = 24.", question, gold)
    assert both.process_acc == 1.0 and both.gold_matched == (1, 0, 2)  # each credited with its own computation
    # two different computations of 12 (both from known numbers) credit both gold 12s, never a third
    other = oracle_labels("3 * 4 = 12. 4 + 8 = 12. 20 - 8 = 12.", question, gold)
    assert other.process_acc == pytest.approx(2 / 3) and other.gold_matched == (0, 1, None)


def test_independent_steps_in_any_order():
    gold = gold_steps_from_json('[[3,"*",4,12],[5,"*",6,30],[12,"+",30,42]]')
    labels = oracle_labels("5 * 6 = 30. 4 * 3 = 12. 30 + 12 = 42.", "3 rows of 4 and 5 rows of 6", gold)
    assert labels.process_acc == 1.0 and labels.first_error is None and labels.gold_matched == (1, 0, 2)


def test_known_numbers_include_distractors_and_unwritten_gold_givens():
    gold = [GoldStep(14, "*", 2, 28)]  # "twice": the 2 is not written as a digit
    labels = oracle_labels("14 * 2 = 28. 14 + 5 = 19.", "Ann has 14 pens and 5 pencils; Bob has twice her pens.", gold)
    assert _flags(labels) == ["VGT", "VGt"]


def test_exact_values():
    gold = [GoldStep(7, "+", 1, 8)]
    labels = oracle_labels("7 / 2 = 3.5. 10 / 4 = 2.50. 7 / 3 = 2.33. 7 / 0 = 0.", "7, 2, 10, 4, 3 and 0", gold)
    assert [s.valid for s in labels.steps] == [True, True, False, False]


def test_no_gold_step_is_refused():
    with pytest.raises(ValueError, match="needs at least one gold step"):
        oracle_labels("14 + 7 = 21.", QUESTION, [])


def test_potential_is_bounded_and_labels_depend_only_on_earlier_steps():
    pool = ["14 + 7 = 21. ", "14 + 7 = 22. ", "21 - 9 = 12. ", "22 - 9 = 13. ", "2 + 2 = 4. ", "14 + 9 = 23. ",
            "21 - 8 = 13. ", "14 plus 7 is 21. ", "The answer is 12. ", "Hmm. ", "14 + 7 - 9 = 12. "]  # fmt: skip
    rng = random.Random(0)
    for _ in range(300):
        text = "".join(rng.choice(pool) for _ in range(rng.randint(0, 40)))
        labels = _labels(text)
        penalty = rng.choice([0.0, 0.5, 2.0])
        phi = labels.potentials(penalty)
        assert phi[0] == 0.0 and all(-penalty <= p <= 1.0 for p in phi)
        accs = [labels.process_acc_at(k) for k in range(len(labels.steps) + 1)]
        assert accs == sorted(accs) and accs[-1] == labels.process_acc
        # the labels of a prefix of the completion are the first labels of the whole
        k = rng.randint(0, len(labels.steps))
        cut = labels.steps[k - 1].span[1] if k else 0
        assert _flags(_labels(text[:cut])) == _flags(labels)[:k]
    with pytest.raises(ValueError, match="penalty must be >= 0"):
        _labels("14 + 7 = 21").potentials(-1.0)
