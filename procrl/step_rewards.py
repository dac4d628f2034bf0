"""Per-step rewards and their aggregation: the step-scorer contract of docs/architecture.md "Step scorers" (core layer).

A step scorer returns, per completion, one `StepRewards` (raw per-step values aligned with token boundaries) or
None ("does not apply"). The trainer turns them into process advantages (`procrl.trainers.advantages`); a reward
that needs ONE number per completion reduces the values with `aggregate_step_values` (`last | min | mean | sum`),
the same reduction for the PUM rewards (`min`, `last`) and StepGap (`sum`, R = EM + λ Σ_k r_k).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["AGGREGATIONS", "StepRewardFunc", "StepRewards", "aggregate_step_values"]

AGGREGATIONS = ("last", "min", "mean", "sum")


@dataclass(frozen=True)
class StepRewards:
    """The step rewards of ONE completion, aligned with its sampled token ids.

    Attributes:
        values: one reward per step (raw, not normalised; NaN = this step could not be scored).
        boundaries: exclusive token end of each step within the completion ids (0-based): step k covers tokens
            `[boundaries[k-1], boundaries[k])` (step 0 starts at 0). Strictly increasing, first >= 1; the last must
            equal the completion length in tokens, so every token (EOS included) belongs to a step. Use
            `procrl.rewards.steps.token_steps(completion_ids, tokenizer)` for sampled ids.

    Raises:
        ValueError: empty, unequal lengths, or boundaries that are not strictly increasing positive integers.

    >>> StepRewards(values=[0.2, 0.9], boundaries=[4, 8])
    StepRewards(values=[0.2, 0.9], boundaries=[4, 8])
    """

    values: list[float]
    boundaries: list[int]

    def __post_init__(self) -> None:
        if len(self.values) == 0 or len(self.values) != len(self.boundaries):
            raise ValueError(
                f"StepRewards needs one value per step and at least one step; got {len(self.values)} values and "
                f"{len(self.boundaries)} boundaries (return None for a completion the scorer does not apply to)."
            )
        previous = 0
        for b in self.boundaries:
            if isinstance(b, bool) or int(b) != b or b <= previous:
                raise ValueError(
                    f"StepRewards boundaries must be strictly increasing positive token indices, got {self.boundaries}."
                )
            previous = b


class StepRewardFunc(Protocol):
    """A step scorer as the trainer calls it (TRL's reward signature, one `StepRewards` or None per completion).

    `f(prompts, completions, completion_ids, **kwargs) -> list[StepRewards | None]`, one entry per completion:
    dataset columns and the rollout's extra fields arrive as keywords (as for TRL reward functions),
    `completion_ids` are the sampled ids the boundaries refer to (the last boundary must equal the completion's
    length), and None means "not applicable" (zero process advantage, counted in `process/not_applicable`). Values
    are raw: the trainer normalises them over the steps of each prompt's group. A step scorer used for process
    advantages must not also be one of TRL's `reward_funcs`, or it would be counted twice.

    Give it to `ProcessGRPOTrainer(step_reward_func=...)` with `advantage_mode: process | mixed`; in a
    `train_grpo.py` config, name it by import path, `step_reward_func: my_pkg.my_mod:my_scorer` (the object there
    is used as it is; `procrl.trainers.tasks.rewards`). An optional `needs_logps = True` attribute asks the rollout
    for `completion_logps` when the scorer reads them from `**kwargs`.
    """

    __name__: str

    def __call__(
        self, prompts: list, completions: list, completion_ids: list[list[int]], **kwargs: Any
    ) -> list[StepRewards | None]: ...


def aggregate_step_values(values: Sequence[float], how: str) -> float:
    """One number from a completion's per-step values: `last`, `min`, `mean` or `sum` over the K steps.

    Args:
        values: the K per-step values (any real numbers; K >= 0).
        how: one of `AGGREGATIONS`.

    Returns:
        The aggregate as a float; NaN when there is no step or any value is NaN (a step that could not be scored
        makes every aggregate unknown; the caller maps NaN to its neutral value, e.g. a None reward).

    Raises:
        ValueError: for an unknown `how`.

    >>> [aggregate_step_values([0.5, -1.0, 2.0], how) for how in AGGREGATIONS]
    [2.0, -1.0, 0.5, 1.5]
    >>> aggregate_step_values([0.5, float("nan")], "min"), aggregate_step_values([], "sum")
    (nan, nan)
    """
    if how not in AGGREGATIONS:
        raise ValueError(f"step aggregation must be one of {AGGREGATIONS}, got {how!r}")
    values = [float(v) for v in values]
    if not values or any(math.isnan(v) for v in values):
        return math.nan
    if how == "last":
        return values[-1]
    if how == "min":
        return min(values)
    total = math.fsum(values)
    return total / len(values) if how == "mean" else total
