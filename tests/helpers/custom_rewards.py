"""A user's own reward function and step scorer, as a config names them by import path
(`reward_funcs: [outcome, custom_rewards:token_count_reward]`, `step_reward_func: custom_rewards:halves_step_scorer`):
the GRPO job tests of that contract (importable: pyproject adds tests/helpers to pytest's pythonpath). Every call
is recorded in `CALLS`."""

from __future__ import annotations

from dataclasses import replace

from procrl.rewards.oracle.scorer import OracleStepRewards
from procrl.step_rewards import StepRewards

CALLS: dict[str, list[list[int]]] = {"reward": [], "scorer": []}  # the completion lengths (tokens) of each call


def token_count_reward(prompts, completions, completion_ids, **kwargs) -> list[float]:
    """A TRL reward function: each completion's length in tokens."""
    CALLS["reward"].append([len(ids) for ids in completion_ids])
    return [float(len(ids)) for ids in completion_ids]


def halves_step_scorer(prompts, completions, completion_ids, **kwargs) -> list[StepRewards | None]:
    """A step scorer: two steps, the first half of the tokens (reward 1.0) and the rest (0.0); one step (1.0) for a
    one-token completion, None for an empty one."""
    CALLS["scorer"].append([len(ids) for ids in completion_ids])
    rows: list[StepRewards | None] = []
    for ids in completion_ids:
        n = len(ids)
        if n == 0:
            rows.append(None)
        elif n == 1:
            rows.append(StepRewards(values=[1.0], boundaries=[1]))
        else:
            rows.append(StepRewards(values=[1.0, 0.0], boundaries=[n // 2, n]))
    return rows


class NegatedOracleStepRewards(OracleStepRewards):
    """The oracle step scorer with every step reward negated: the advantage's sign flipped (the learning check's
    arm that must not learn, tests/learning)."""

    def __call__(self, prompts, completions, completion_ids, **kwargs):
        rows = super().__call__(prompts, completions, completion_ids, **kwargs)
        return [None if r is None else replace(r, values=[-v for v in r.values]) for r in rows]


negated_oracle = NegatedOracleStepRewards()
negated_oracle.__name__ = "negated_oracle_step_rewards"
