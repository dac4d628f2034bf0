"""The placebo wrappers keep a reward's values and cut their link to the completions."""

import pickle
import random

import pytest

from procrl.rewards.placebo import ShuffledReward, ShuffledStepRewards
from procrl.step_rewards import StepRewards


def index_reward(prompts, completions, **kwargs):
    return [float(c) for c in completions]


def test_shuffled_reward_keeps_the_values_and_breaks_their_order():
    placebo = ShuffledReward(index_reward, seed=3)
    completions = list(range(64))
    calls = [placebo(["p"] * 64, completions) for _ in range(3)]
    for out in calls:
        assert sorted(out) == [float(c) for c in completions]
    # a permutation of 64 items equals the identity with probability 1/64!: never here
    assert all(out != [float(c) for c in completions] for out in calls)
    assert calls[0] != calls[1]  # a new permutation per call


def test_shuffled_reward_is_reproducible_and_picklable():
    a, b = ShuffledReward(index_reward, seed=7), ShuffledReward(index_reward, seed=7)
    assert a(["p"] * 10, list(range(10))) == b(["p"] * 10, list(range(10)))
    clone = pickle.loads(pickle.dumps(a))
    assert clone(["p"] * 10, list(range(10))) == a(["p"] * 10, list(range(10)))


def test_shuffled_reward_keeps_none_and_checks_length():
    def with_none(prompts, completions, **kwargs):
        return [None, 1.0, 0.0, None]

    out = ShuffledReward(with_none)(["p"] * 4, ["a"] * 4)
    assert sorted(out, key=lambda v: (v is None, v or 0)) == [0.0, 1.0, None, None]

    def short(prompts, completions, **kwargs):
        return [1.0]

    with pytest.raises(ValueError, match="shuffled_short"):
        ShuffledReward(short)(["p"] * 2, ["a", "b"])


def test_shuffled_step_rewards_permute_the_pooled_steps_into_the_same_slots():
    rng = random.Random(0)
    originals = [
        None if i % 5 == 0 else StepRewards([float(100 * i + k) for k in range(n)], [3 * (k + 1) for k in range(n)])
        for i, n in enumerate(rng.randint(1, 4) for _ in range(20))
    ]

    def scorer(prompts, completions, completion_ids, **kwargs):
        return originals

    out = ShuffledStepRewards(scorer, seed=1)(["p"] * 20, ["c"] * 20, [[0] * 12] * 20)
    assert [o is None for o in out] == [o is None for o in originals]
    kept = [(o, s) for o, s in zip(originals, out, strict=True) if o is not None]
    assert all(s.boundaries == o.boundaries for o, s in kept)
    pooled = sorted(v for o, _ in kept for v in o.values)
    assert sorted(v for _, s in kept for v in s.values) == pooled
    assert [v for _, s in kept for v in s.values] != [v for o, _ in kept for v in o.values]


def test_the_placebo_names_and_logps_flag_follow_the_wrapped_function():
    class NeedsLogps:
        needs_logps = True

        def __call__(self, prompts, completions, completion_ids, **kwargs):
            return [None] * len(completions)

    placebo = ShuffledStepRewards(NeedsLogps())
    assert placebo.__name__ == "shuffled_NeedsLogps" and placebo.needs_logps
    assert not ShuffledReward(index_reward).needs_logps
    with pytest.raises(ValueError, match="callable"):
        ShuffledReward("outcome")


def test_the_placebo_forwards_the_trainers_binding_hook():
    class Bound:
        def __init__(self):
            self.bound = None

        def bind_policy(self, model, tokenizer):
            self.bound = (model, tokenizer)

        def __call__(self, prompts, completions, completion_ids, **kwargs):
            return [None] * len(completions)

    inner = Bound()
    ShuffledStepRewards(inner).bind_policy("model", "tokenizer")
    assert inner.bound == ("model", "tokenizer")
    ShuffledReward(index_reward).bind_policy("model", "tokenizer")  # nothing to forward: no error
