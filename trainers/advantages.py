"""Process advantages: per-token GRPO advantages from per-step rewards (DeepSeekMath §4.1.3; docs/architecture.md "Process advantages").

GRPO with process supervision (Shao et al. 2024, "DeepSeekMath", §4.1.3): each of the G completions of one
prompt is cut into steps, a step scorer gives every step a reward, and

1. every step reward is normalised over ALL steps of the G completions of the prompt,
   r~ = (r - mean) / (std + eps);
2. a token's advantage is the sum of r~ over the steps that end at or after it (suffix sums), so a token is
   credited with the quality of its own step and of everything that follows.

Conventions are TRL's (trl 1.16): `std` is `trl.trainer.utils.nanstd`, the sample standard deviation (Bessel's
correction) ignoring NaNs (trl/trainer/utils.py:1021-1046, NaN for fewer than two values), and eps = 1e-4 as in
`GRPOTrainer._generate_and_score_completions` (trl/trainer/grpo_trainer.py:2787, 2799); rows are grouped as
TRL groups them, `num_generations` consecutive rows per prompt (grpo_trainer.py:2765, 2770). With one step per
completion whose reward is the outcome, the process advantage of every token therefore equals TRL's outcome
advantage for `multi_objective_aggregation="sum_then_normalize"` and `scale_rewards="group"` (TRL's defaults).

Neutral values instead of NaN: a NaN (or infinite) step reward is left out of the statistics and gets r~ = 0; a
completion the scorer does not apply to (`None`) has no steps and gets advantage 0 on every token; a group of
one completion (no baseline to compare against, as TRL's `num_generations == 1` branch), a group with fewer
than two finite step rewards, and a group whose step rewards are all equal give 0.

Units: boundaries are 0-based, end-exclusive TOKEN indices into a completion's sampled ids (the convention of
`procrl.rewards.steps.token_steps`, which maps sampled ids to steps without re-encoding text).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from trl.trainer.utils import nanstd

from procrl import step_rewards as _step_rewards
from procrl.rewards.outcome import outcome_reward
from procrl.utils import check_reward_length, reads_completion_logps

__all__ = [
    "EPS",
    "OutcomeStepRewards",
    "check_step_reward_func",
    "check_step_rewards",
    "func_name",
    "normalize_step_rewards",
    "pad_step_rewards",
    "process_advantages",
    "token_advantages",
]


EPS = 1e-4  # TRL's epsilon in the advantage denominator (trl/trainer/grpo_trainer.py:2787)


class OutcomeStepRewards:
    """Reference step scorer: ONE step per completion whose reward is the outcome reward.

    With it, process advantages equal TRL's outcome advantages (see the module docstring); it is the
    equivalence check of the process path and a template for real step scorers.

    Args:
        reward_func: a TRL reward function (1.0 / 0.0 / None per completion); default
            `procrl.rewards.outcome.outcome_reward` (reads the dataset column `answer`).

    >>> f = OutcomeStepRewards()
    >>> f(prompts=["p", "p"], completions=["The answer is 4", "no"], completion_ids=[[5, 6, 2], [7, 2]], answer=["4", "4"])
    [StepRewards(values=[1.0], boundaries=[3]), StepRewards(values=[0.0], boundaries=[2])]
    """

    __name__ = "outcome_step_rewards"

    def __init__(self, reward_func=outcome_reward):
        self.reward_func = reward_func
        self.needs_logps = reads_completion_logps(reward_func)  # it forwards the rollout's fields to reward_func

    def __call__(self, prompts, completions, completion_ids, **kwargs) -> list[_step_rewards.StepRewards | None]:
        name = getattr(self.reward_func, "__name__", type(self.reward_func).__name__)
        rewards = self.reward_func(prompts=prompts, completions=completions, completion_ids=completion_ids, **kwargs)
        rewards = check_reward_length(name, rewards, len(completion_ids))
        return [
            None if r is None or len(ids) == 0 else _step_rewards.StepRewards(values=[float(r)], boundaries=[len(ids)])
            for r, ids in zip(rewards, completion_ids, strict=True)
        ]


def check_step_rewards(
    name: str, step_rewards: Sequence[_step_rewards.StepRewards | None], completion_ids: Sequence[Sequence[int]]
) -> list[_step_rewards.StepRewards | None]:
    """Validate a step scorer's output against the sampled ids; raise `ValueError` naming the scorer.

    Checks one entry per completion, each a `StepRewards` or None, and that the last boundary equals the
    completion length in tokens (no token outside a step, no step past the completion).
    """
    step_rewards = list(step_rewards)
    if len(step_rewards) != len(completion_ids):
        raise ValueError(
            f"Step scorer '{name}' returned {len(step_rewards)} entries for {len(completion_ids)} completions; "
            "it must return exactly one StepRewards (or None) per completion."
        )
    for i, (item, ids) in enumerate(zip(step_rewards, completion_ids, strict=True)):
        if item is None:
            continue
        if not isinstance(item, _step_rewards.StepRewards):
            raise ValueError(
                f"Step scorer '{name}' returned {type(item).__name__} for completion {i}; expected StepRewards or None."
            )
        if item.boundaries[-1] != len(ids):
            raise ValueError(
                f"Step scorer '{name}': completion {i} has {len(ids)} tokens but its last step ends at token "
                f"{item.boundaries[-1]}; boundaries are token indices into the sampled completion ids (use "
                "procrl.rewards.steps.token_steps, never re-encoded text) and the last must equal the length."
            )
    return step_rewards


def pad_step_rewards(
    step_rewards: Sequence[_step_rewards.StepRewards | None], num_steps: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pack per-completion step rewards into tensors.

    Args:
        step_rewards: one `StepRewards` or None per completion (B entries).
        num_steps: S, the padded step count; default the largest step count in the batch (0 for an empty or
            all-None batch).

    Returns:
        values `(B, S)` float32, NaN-padded (a None row is all NaN); ends `(B, S)` int64, 0-padded (a padded step
        ends before every token, so it never contributes).
    """
    width = max((len(s.values) for s in step_rewards if s is not None), default=0)
    num_steps = width if num_steps is None else num_steps
    if num_steps < width:
        raise ValueError(f"pad_step_rewards: num_steps={num_steps} is smaller than the longest row ({width} steps).")
    values = torch.full((len(step_rewards), num_steps), math.nan, dtype=torch.float32)
    ends = torch.zeros((len(step_rewards), num_steps), dtype=torch.long)
    for i, item in enumerate(step_rewards):
        if item is not None:
            values[i, : len(item.values)] = torch.tensor([float(v) for v in item.values], dtype=torch.float32)
            ends[i, : len(item.boundaries)] = torch.tensor([int(b) for b in item.boundaries], dtype=torch.long)
    return values, ends


def normalize_step_rewards(step_rewards: torch.Tensor, num_generations: int, eps: float = EPS) -> torch.Tensor:
    """r~ = (r - mean) / (std + eps) over all steps of each group of `num_generations` consecutive rows.

    Args:
        step_rewards: `(N, S)` raw step rewards, N = number of prompts × num_generations, rows of one prompt
            consecutive (TRL's order); NaN marks padding, unscored steps and not-applicable rows (±inf is treated
            like NaN).
        num_generations: G, rows per group.
        eps: added to the standard deviation (TRL: 1e-4).

    Returns:
        `(N, S)` normalised step rewards; 0 wherever the input is not finite, and everywhere in a group with
        G = 1 or fewer than two finite step rewards. mean = `torch.nanmean`, std = TRL's `nanstd` (sample std).

    Raises:
        ValueError: N is not a multiple of num_generations, or num_generations < 1.

    >>> normalize_step_rewards(torch.tensor([[1.0], [float("nan")], [3.0]]), num_generations=3)
    tensor([[-0.7071],
            [ 0.0000],
            [ 0.7071]])
    """
    if step_rewards.dim() != 2:
        raise ValueError(f"normalize_step_rewards expects a (N, S) tensor, got shape {tuple(step_rewards.shape)}.")
    n, s = step_rewards.shape
    if num_generations < 1 or n % num_generations:
        raise ValueError(
            f"normalize_step_rewards: {n} rows do not split into groups of num_generations={num_generations}."
        )
    values = torch.where(torch.isfinite(step_rewards), step_rewards, torch.nan)
    if num_generations == 1 or s == 0:
        return torch.zeros_like(values)
    grouped = values.reshape(n // num_generations, num_generations * s)  # all steps of one prompt in one row
    mean = torch.nanmean(grouped, dim=1, keepdim=True)
    std = nanstd(grouped, dim=1, keepdim=True)  # NaN with < 2 finite values -> r~ NaN -> 0 below
    normalized = (grouped - mean) / (std + eps)
    return torch.nan_to_num(normalized, nan=0.0).reshape(n, s)


def token_advantages(normalized: torch.Tensor, step_ends: torch.Tensor, num_tokens: int) -> torch.Tensor:
    """Per-token advantages: A[b, t] = Σ_k r~[b, k] · [t < ends[b, k]] (suffix sums over steps).

    Token t (0-based, completion tokens) lies in step k when ends[k-1] <= t < ends[k]; its advantage is the sum of
    the normalised rewards of step k and every later step. Tokens at or after a row's last end (padding) get 0.

    Args:
        normalized: `(B, S)` normalised step rewards (`normalize_step_rewards`), 0 for padded steps.
        step_ends: `(B, S)` exclusive token end of each step, 0 for padded steps.
        num_tokens: T, the padded completion length in tokens.

    Returns:
        `(B, T)` float32 advantages on `normalized`'s device.

    >>> token_advantages(torch.tensor([[1.0, -2.0, 0.5]]), torch.tensor([[2, 3, 5]]), num_tokens=6)
    tensor([[-0.5000, -0.5000, -1.5000,  0.5000,  0.5000,  0.0000]])
    """
    positions = torch.arange(num_tokens, device=normalized.device)  # (T,)
    covers = step_ends.to(normalized.device).unsqueeze(-1) > positions  # (B, S, T): step k ends after token t
    return (normalized.unsqueeze(-1) * covers).sum(dim=1)  # (B, T)


def process_advantages(
    step_rewards: torch.Tensor,
    step_ends: torch.Tensor,
    num_generations: int,
    num_tokens: int,
    eps: float = EPS,
) -> torch.Tensor:
    """Per-token process advantages (DeepSeekMath §4.1.3): `token_advantages(normalize_step_rewards(...))`.

    Args:
        step_rewards: `(N, S)` raw step rewards, NaN-padded, groups of `num_generations` consecutive rows.
        step_ends: `(N, S)` exclusive token ends, 0-padded.
        num_generations: G.
        num_tokens: T.
        eps: TRL's 1e-4.

    Returns:
        `(N, T)` advantages. In the example the group's finite rewards are [1, 0, 0]: mean 1/3, sample std
        sqrt(1/3) = 0.5774, so r~ = [1.1545, -0.5772, -0.5772] and row 0's first token gets 1.1545 - 0.5772. (Shown
        to 3 decimals: 0.57725... sits next to a 4-decimal rounding edge, where float32 kernels may differ.)

    >>> adv = process_advantages(torch.tensor([[1.0, 0.0], [0.0, float("nan")]]), torch.tensor([[1, 2], [2, 0]]), 2, 3)
    >>> [[round(a, 3) for a in row] for row in adv.tolist()]
    [[0.577, -0.577, 0.0], [-0.577, -0.577, 0.0]]
    """
    return token_advantages(normalize_step_rewards(step_rewards, num_generations, eps), step_ends, num_tokens)


def check_step_reward_func(mode: str, step_reward_func, reward_funcs) -> None:
    """Refuse a missing step scorer in process/mixed mode, a superfluous one in outcome mode, and a step scorer
    that is also a TRL reward function (it would be counted twice)."""
    if mode in ("process", "mixed") and step_reward_func is None:
        raise ValueError(
            f"advantage_mode={mode!r} needs a step scorer: ProcessGRPOTrainer(step_reward_func=...), a callable "
            "returning one procrl.step_rewards.StepRewards (or None) per completion, e.g. "
            "OutcomeStepRewards(). Or set advantage_mode: outcome."
        )
    if mode == "outcome" and step_reward_func is not None:
        raise ValueError(
            "step_reward_func is only used with advantage_mode 'process' or 'mixed' (a ProcessGRPOConfig field); "
            "set one of them or drop step_reward_func."
        )
    if step_reward_func is None or reward_funcs is None:
        return
    owner = getattr(step_reward_func, "__self__", None)  # a bound method: its object may be the reward function
    for func in reward_funcs if isinstance(reward_funcs, list | tuple) else [reward_funcs]:
        if func is step_reward_func or (owner is not None and func is owner):
            raise ValueError(
                f"The step scorer {func_name(step_reward_func)!r} is also one of reward_funcs: in advantage_mode "
                f"{mode!r} it would be counted twice (scalar reward and process advantage). Remove it from "
                "reward_funcs."
            )


def func_name(func) -> str:
    """A reward or step function's name for messages: its `__name__`, else its class name."""
    return getattr(func, "__name__", type(func).__name__)
