"""PUM reward functions (rewards/pum_rewards.py) on a tiny random LlamaForSequenceClassification.

The score head is drawn with std 1 so U values are O(1) and differ between prefixes (the identities below compare
values that are far apart). References are computed with the scorer's own per-prefix path `score`, independent
of the one-pass `score_steps` the rewards use.
"""

import math
import pickle

import pytest

from procrl.rewards.pum import PrefixUtilityModel
from procrl.rewards.pum_rewards import PUMReward, PUMStepRewards, get_pum_reward
from procrl.rewards.steps import token_steps
from procrl.trainers.advantages import StepRewards

PROBLEM = "Tom has 3 apples and buys 5 more. How many apples does he have?"
COMPLETION = "Tom starts with 3 apples.\n\nHe buys 5 more, so 3 + 5 = 8.\n\nThe answer is 8."


@pytest.fixture(scope="module")
def pum(smollm2_tokenizer, tiny_pum_factory):
    return PrefixUtilityModel(tiny_pum_factory(len(smollm2_tokenizer)), smollm2_tokenizer, max_length=1024)


def sampled_ids(tok, text: str, eos: bool = True) -> list[int]:
    """Ids as SmolLM2 samples them: "\\n\\n" as its single token (encode would give the same here), plus EOS."""
    nn = tok.convert_tokens_to_ids("ĊĊ")
    ids: list[int] = []
    for k, part in enumerate(text.split("\n\n")):
        if k:
            ids.append(nn)
        ids += tok.encode(part, add_special_tokens=False)
    return ids + ([tok.eos_token_id] if eos else [])


def test_full_equals_last_and_min_is_at_most_last(pum):
    kw = dict(prompts=["ignored"] * 2, completions=[COMPLETION, "One step only."], question=[PROBLEM] * 2)
    full = PUMReward(pum, "full")(**kw)
    last = PUMReward(pum, "last")(**kw)
    low = PUMReward(pum, "min")(**kw)
    assert full == pytest.approx(last, abs=1e-4)
    assert all(m <= v + 1e-6 for m, v in zip(low, last, strict=True))
    # min over the 3 step prefixes, scored one by one (independent per-prefix path)
    prefixes = [
        "Tom starts with 3 apples.\n\n",
        "Tom starts with 3 apples.\n\nHe buys 5 more, so 3 + 5 = 8.\n\n",
        COMPLETION,
    ]
    assert low[0] == pytest.approx(min(pum.score([PROBLEM] * 3, prefixes)), abs=1e-4)
    # a one-step completion: min == last
    assert low[1] == pytest.approx(last[1], abs=1e-4)
    assert all(isinstance(v, float) and math.isfinite(v) for v in full + last + low)


def test_trailing_eos_is_stripped(pum, smollm2_tokenizer):
    eos = smollm2_tokenizer.eos_token
    reward = get_pum_reward(pum)
    with_eos, without = reward(completions=[COMPLETION + eos, COMPLETION], question=[PROBLEM] * 2, prompts=[""] * 2)
    assert with_eos == pytest.approx(without, abs=1e-5)


def test_empty_completion_is_none_and_messages_are_accepted(pum):
    reward = PUMReward(pum)
    values = reward(
        prompts=[[{"role": "user", "content": PROBLEM}]] * 3,
        completions=["  \n", [{"role": "assistant", "content": COMPLETION}], COMPLETION],
        question=[PROBLEM] * 3,
    )
    assert values[0] is None
    assert values[1] == pytest.approx(values[2], abs=1e-6)


def test_problem_falls_back_to_prompt_with_warning(pum, caplog):
    reward = PUMReward(pum)
    with caplog.at_level("WARNING"):
        fallback = reward(prompts=[[{"role": "user", "content": PROBLEM}]], completions=[COMPLETION])
    assert "question" in caplog.text
    assert fallback == pytest.approx(reward(prompts=["x"], completions=[COMPLETION], question=[PROBLEM]), abs=1e-6)


def test_wrong_lengths_raise_naming_the_function(pum):
    with pytest.raises(ValueError, match="pum_utility_min"):
        PUMReward(pum, "min")(prompts=["a"], completions=["a", "b"], question=[PROBLEM])
    with pytest.raises(ValueError, match="mode"):
        PUMReward(pum, "mean")


def test_names_and_pickling_by_path(tmp_path):
    reward = PUMReward(str(tmp_path), "last")
    assert reward.__name__ == "pum_utility_last" and PUMReward(str(tmp_path)).__name__ == "pum_utility"
    copy = pickle.loads(pickle.dumps(reward))
    assert copy.path == str(tmp_path) and copy.__name__ == "pum_utility_last" and copy._pum is None


def test_model_object_does_not_pickle(pum):
    with pytest.raises(TypeError, match="path"):
        pickle.dumps(PUMReward(pum))


def test_step_increments_sum_and_boundaries(pum, smollm2_tokenizer):
    tok = smollm2_tokenizer
    ids = sampled_ids(tok, COMPLETION)
    ids_no_eos = sampled_ids(tok, COMPLETION, eos=False)
    scorer = PUMStepRewards(pum)
    out = scorer(
        prompts=["p"] * 3, completions=[COMPLETION] * 3, completion_ids=[ids, ids_no_eos, []], question=[PROBLEM] * 3
    )
    assert out[2] is None  # no ids -> not applicable
    steps, bounds = token_steps(ids, tok)
    assert isinstance(out[0], StepRewards) and len(steps) == 3
    assert out[0].boundaries == bounds and bounds[-1] == len(ids)  # EOS belongs to the last step
    # Hand identity: increments telescope to U(full) - U(empty), both scored independently by `score`.
    u_full, u_empty = pum.score([PROBLEM, PROBLEM], [COMPLETION, ""])
    assert sum(out[0].values) == pytest.approx(u_full - u_empty, abs=1e-4)
    # first increment: U(step 1) - U(empty)
    (u1,) = pum.score([PROBLEM], ["Tom starts with 3 apples.\n\n"])
    assert out[0].values[0] == pytest.approx(u1 - u_empty, abs=1e-4)
    # with or without the sampled EOS: same values; boundaries differ only in the last step's end
    assert out[1].values == pytest.approx(out[0].values, abs=1e-6)
    assert out[1].boundaries == bounds[:-1] + [bounds[-1] - 1]


def test_step_scorer_binds_the_policy_tokenizer(pum, smollm2_tokenizer):
    scorer = PUMStepRewards(pum)
    scorer.bind_policy(None, smollm2_tokenizer)
    assert scorer.tokenizer is smollm2_tokenizer
    with pytest.raises(ValueError, match="pum_step_increments"):
        scorer(prompts=["p"], completion_ids=[[5, 6]], question=[PROBLEM, PROBLEM])
