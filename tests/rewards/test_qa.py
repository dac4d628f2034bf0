"""SQuAD-style exact match (max over aliases) and the EM reward on search completions."""

import pytest

from procrl.rewards.qa import em_reward, exact_match, normalize_answer


@pytest.mark.parametrize(
    ("prediction", "golds", "expected"),
    [
        ("B", ["A"], 0.0),  # gold "A" normalises to "" (an article): compared as "a", which "b" is not
        ("", ["A"], 0.0),  # ... and an empty prediction never matches it
        ("", ["the"], 0.0),
        ("A", ["A"], 1.0),  # the correct one-letter answer: SQuAD gives "" == "" (refused), the fallback "a" == "a"
        ("a.", ["A"], 1.0),  # case-folded, punctuation removed: "a" == "a"
        ("(A)", ["A"], 1.0),  # parentheses are punctuation: "a" == "a"
        ("The", ["The"], 1.0),  # an article-only gold: "the" == "the"
        ("  the  ", ["The"], 1.0),  # whitespace collapsed: "the" == "the"
        ("A", ["The"], 0.0),  # "a" != "the": articles are not interchangeable in the fallback
        ("An", ["A"], 0.0),  # "an" != "a"
        ("A", ["..."], 0.0),  # a gold that is empty even without dropping articles never matches
        ("", ["..."], 0.0),  # ... not even an empty prediction
        ("A", ["B", "A"], 1.0),  # max over aliases also with the fallback
        ("Black.", ["black"], 1.0),  # case and punctuation
        ("not Mark Twain", ["Mark Twain"], 0.0),  # no substring credit
        ("100", ["10"], 0.0),
        ("10", ["100"], 0.0),
        ("The Beatles", ["Beatles"], 1.0),  # article dropped
        ("Fab  Four", ["Beatles", "fab four"], 1.0),  # max over aliases, whitespace collapsed
        ("20 March 851", "20 March 851", 1.0),  # a single gold string
        (None, ["x"], 0.0),  # no answer
        ("x", [], 0.0),
    ],
)
def test_exact_match_table(prediction, golds, expected):
    assert exact_match(prediction, golds) == expected


def test_normalize():
    assert normalize_answer("  The  Eiffel Tower! ") == "eiffel tower"
    assert normalize_answer("A") == ""


def test_em_reward_reads_completion_only():
    golds = [["Paris"]] * 6
    completions = [
        "<think>x</think><answer> Paris. </answer>",  # 1
        "<answer> <search> Paris </search> Paris </answer>",  # search inside the answer: not credited
        "<answer> Paris",  # unclosed answer
        "Paris",  # no tags
        [{"role": "assistant", "content": "<answer>paris</answer>"}],  # message list
        "<answer> London </answer> <answer> Paris </answer>",  # the first answer counts
    ]
    # the prompt contains an example answer "<answer> Paris </answer>": it must never count
    prompts = [[{"role": "user", "content": "e.g. <answer> Paris </answer>. Question: capital?"}]] * 6
    assert em_reward(prompts, completions, [[1]] * 6, golden_answers=golds) == [1.0, 0.0, 0.0, 0.0, 1.0, 0.0]


def test_em_reward_none_and_errors():
    assert em_reward(["q"], ["<answer>x</answer>"], [[1]], golden_answers=[[]]) == [None]
    with pytest.raises(ValueError, match="golden_answers"):
        em_reward(["q"], ["x"], [[1]])
    with pytest.raises(ValueError):
        em_reward(["q", "q"], ["x", "y"], [[1], [1]], golden_answers=[["x"]])
