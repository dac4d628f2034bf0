"""Best-of-N selection and PUM beam search (trainers/selection.py, trainers/beam_search.py): pure selection rules
against hand examples, and the validation of the commands' settings. Both commands end to end:
tests/scripts/test_select_beam_commands.py."""

import math

import pytest

from procrl.trainers.beam_search import BeamConfig
from procrl.trainers.selection import SCORERS, SelectConfig, select_argmax, select_majority, select_random

# ----------------------------------------------------------------------------------------------------------
# Pure rules
# ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answers", "expected"),
    [
        (["4", "5", "5"], 1),  # 5 wins 2:1, its first occurrence is index 1
        (["4", None, "5", "5", "4"], 0),  # 2:2 tie -> the answer seen first ("4", index 0)
        (["5", "4", "4", "5"], 0),  # tie again, now "5" is seen first
        ([None, "7", "3", "3"], 2),  # None does not vote
        ([None, None], None),  # nobody answered
        (["12"], 0),
    ],
)
def test_select_majority(answers, expected):
    assert select_majority(answers) == expected


@pytest.mark.parametrize(
    ("scores", "expected"),
    [
        ([0.1, 0.9, 0.3], 1),
        ([0.5, None, 0.5], 0),  # tie -> earliest
        ([None, math.nan, -2.0], 2),  # None and NaN never picked
        ([None, None], None),
    ],
)
def test_select_argmax(scores, expected):
    assert select_argmax(scores) == expected


def test_select_random_is_seeded_per_key():
    picks = [select_random(8, 0, f"svamp/{i}") for i in range(50)]
    assert picks == [select_random(8, 0, f"svamp/{i}") for i in range(50)]  # reproducible
    assert all(0 <= p < 8 for p in picks) and len(set(picks)) > 1  # not constant
    assert picks != [select_random(8, 1, f"svamp/{i}") for i in range(50)]  # the seed matters
    with pytest.raises(ValueError):
        select_random(0, 0, "x")


# ----------------------------------------------------------------------------------------------------------
# Settings
# ----------------------------------------------------------------------------------------------------------


def test_scorer_registry_keeps_its_names_and_order():
    assert SCORERS == ("pum", "picsar", "majority", "random")


def test_select_config_parses_and_validates_the_scorer_list():
    assert SelectConfig(scorer=" pum, majority ,", pum="x").scorers == ["pum", "majority"]
    with pytest.raises(ValueError, match="unknown scorer"):
        SelectConfig(scorer="oracle")
    with pytest.raises(ValueError, match="--pum PATH"):
        SelectConfig(scorer="pum")
    with pytest.raises(ValueError, match="--n must be >= 1"):
        SelectConfig(scorer="random", n=0)
    with pytest.raises(ValueError, match="--scorer is empty"):
        SelectConfig(scorer=",")
    with pytest.raises(ValueError, match="--batch-size"):
        SelectConfig(scorer="random", batch_size=0)


def test_beam_config_validates_its_budgets_and_needs_a_pum():
    assert BeamConfig(pum="x").settings()["beams"] == 4
    with pytest.raises(ValueError, match="--expand"):
        BeamConfig(pum="x", expand=0)
    with pytest.raises(ValueError, match="--pum PATH"):
        BeamConfig()
    with pytest.raises(ValueError, match="--temperature"):
        BeamConfig(pum="x", temperature=0.0)
