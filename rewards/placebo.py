"""Placebo rewards: a reward's (or a step scorer's) own values, shuffled within the batch.

A process reward is credited with an effect only if it beats its placebo (docs/architecture.md "Placebo arms"): the
same reward with the same distribution of values, but with the link between a completion and its value cut. Any
gain the placebo also shows comes from the values' scale or from extra noise, not from what the reward measures.

- `ShuffledReward(reward_func)`: the TRL reward's values permuted over the batch's completions (None stays a value
  like any other, so the share of "does not apply" is kept).
- `ShuffledStepRewards(step_func)`: every scored step value of the batch pooled and permuted, then put back into the
  same slots: each completion keeps its own step count and token boundaries; a None completion stays None.

The permutation comes from `random.Random(seed)` advanced on each call, so a run is reproducible and the wrappers
pickle. In a GRPO config, write `shuffled:<name>` for any reward or step-scorer name (`procrl.trainers.tasks.rewards`).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from procrl.step_rewards import StepRewards
from procrl.utils import check_reward_length, reads_completion_logps

__all__ = ["ShuffledReward", "ShuffledStepRewards"]


def _name(func: Any) -> str:
    return getattr(func, "__name__", type(func).__name__)


class _Shuffled:
    def __init__(self, func: Callable, seed: int = 0):
        if not callable(func):
            raise ValueError(f"a placebo wraps a callable reward or step scorer, got {type(func).__name__}")
        self.func = func
        self.seed = seed
        self.rng = random.Random(seed)
        self.__name__ = f"shuffled_{_name(func)}"
        self.needs_logps = reads_completion_logps(func)

    def bind_policy(self, model: Any, tokenizer: Any) -> None:
        """Forward the trainer's binding hook (`ProcessGRPOTrainer`) to the wrapped function when it has one."""
        if hasattr(self.func, "bind_policy"):
            self.func.bind_policy(model, tokenizer)


class ShuffledReward(_Shuffled):
    """A TRL reward whose values are permuted within each batch (the placebo of `func`).

    Args:
        func: a TRL reward function `f(prompts, completions, **kwargs) -> list[float | None]`.
        seed: seed of the permutations (one per call, from one `random.Random(seed)`).

    Returns (on call): `func`'s values, permuted; the same multiset, so the mean and spread are unchanged.

    Raises:
        ValueError: `func` returns a list of the wrong length.

    >>> def reward(prompts, completions, **kwargs): return [float(len(c)) for c in completions]
    >>> placebo = ShuffledReward(reward, seed=1)
    >>> out = placebo(["p"] * 3, ["a", "bb", "ccc"])
    >>> sorted(out), placebo.__name__
    ([1.0, 2.0, 3.0], 'shuffled_reward')
    """

    def __call__(self, prompts: list, completions: list, **kwargs: Any) -> list[float | None]:
        values = check_reward_length(self.__name__, list(self.func(prompts, completions, **kwargs)), len(completions))
        order = list(range(len(values)))
        self.rng.shuffle(order)
        return [values[i] for i in order]


class ShuffledStepRewards(_Shuffled):
    """A step scorer whose step values are permuted over all the batch's steps (the placebo of `func`).

    Args:
        func: a step scorer (`procrl.step_rewards.StepRewardFunc`).
        seed: seed of the permutations.

    Returns (on call): one `StepRewards` or None per completion: the same boundaries as `func` gave, the values
    drawn without replacement from the pool of all step values in the batch.

    Raises:
        ValueError: `func` returns a list of the wrong length.

    >>> def scorer(prompts, completions, completion_ids, **kwargs):
    ...     return [StepRewards([1.0, 0.0], [2, 4]), None, StepRewards([5.0], [3])]
    >>> out = ShuffledStepRewards(scorer, seed=0)(["p"] * 3, ["a", "b", "c"], [[0] * 4, [0], [0] * 3])
    >>> out[1], [s.boundaries for s in (out[0], out[2])], sorted(out[0].values + out[2].values)
    (None, [[2, 4], [3]], [0.0, 1.0, 5.0])
    """

    def __call__(
        self, prompts: list, completions: list, completion_ids: list[list[int]], **kwargs: Any
    ) -> list[StepRewards | None]:
        scored = check_reward_length(
            self.__name__, list(self.func(prompts, completions, completion_ids, **kwargs)), len(completions)
        )
        pool = [v for s in scored if s is not None for v in s.values]
        self.rng.shuffle(pool)
        out: list[StepRewards | None] = []
        position = 0
        for s in scored:
            if s is None:
                out.append(None)
                continue
            out.append(replace(s, values=pool[position : position + len(s.values)]))
            position += len(s.values)
        return out
