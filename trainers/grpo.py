"""`ProcessGRPOTrainer`: TRL's GRPOTrainer with procrl's generation hook and reward-hacking telemetry.

What it adds to `trl.GRPOTrainer` (TRL pinned to 1.16.*):

- `rollout_func` defaults to `ProcessRollout`, which returns the sampler's raw per-token log-probs as the extra
  field `completion_logps` for every reward function (DESIGN §3 "Generation hook").
- Reward functions that need the live policy (they have a `bind_policy(model, tokenizer)` method, e.g. the
  PiCSAR bonus) are bound to it.
- Metrics, logged with TRL's own metric machinery next to `rewards/<name>/mean`:
  `task/accuracy` (the outcome check, computed here independently of the reward functions and their weights),
  `task/unparseable_gold`, `hacking/reward_minus_accuracy` (mean weighted reward minus accuracy),
  `hacking/bonus_length_corr` (Pearson correlation, over the batch, between the weighted sum of the
  non-outcome rewards and the completion length in tokens) and `hacking/truncated_frac` (completions that hit
  `max_completion_length` without EOS).

The metrics hook is the one private override: `_calculate_rewards` (trl/trainer/grpo_trainer.py:1579 in TRL
1.16.0, called once per generation batch from `_generate_and_score_completions`). The test
`tests/trainers/test_grpo.py::test_calculate_rewards_override_is_called` fails if TRL stops calling it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from trl import GRPOConfig, GRPOTrainer

from procrl.rewards.outcome import outcome_reward
from procrl.trainers.rollout import ProcessRollout
from procrl.utils import get_logger

logger = get_logger(__name__)


@dataclass
class ProcessGRPOConfig(GRPOConfig):
    """`GRPOConfig` with defaults that work on a CPU-only machine and procrl's reward aggregation.

    Differences from TRL's defaults:
    - `bf16`: None resolves to True only when a CUDA GPU supports bf16, else False (TRL resolves None to
      True, which raises on a CPU-only machine).
    - `multi_objective_aggregation`: "normalize_then_sum", so a bonus cannot dominate groups whose outcome
      rewards are all equal (DESIGN §3).
    """

    bf16: bool | None = field(
        default=None,
        metadata={
            "help": "bf16 mixed precision. None (default): on when a CUDA GPU supports bf16, off otherwise (CPU). "
            "Setting true on a machine without such a GPU is an error."
        },
    )
    multi_objective_aggregation: str = field(
        default="normalize_then_sum",
        metadata={
            "help": "How several reward functions combine (TRL): 'normalize_then_sum' (procrl default: each reward "
            "is normalised within its group, then weighted by reward_weights and summed) or 'sum_then_normalize'."
        },
    )

    def __post_init__(self):
        gpu_bf16 = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
        if self.bf16 is None:
            self.bf16 = bool(gpu_bf16 and not self.fp16)
        if self.bf16 and not gpu_bf16:
            raise ValueError(
                "bf16: true needs a CUDA GPU with bf16 support, and none is available here. Remove `bf16` from the "
                "config (procrl then picks fp32 on CPU) or set `bf16: false`."
            )
        super().__post_init__()


class ProcessGRPOTrainer(GRPOTrainer):
    """GRPO with process rewards; see the module docstring for what it adds.

    Args:
        outcome_func: the outcome check behind `task/accuracy` (TRL reward signature, 1.0 / 0.0 / None);
            defaults to `procrl.rewards.outcome.outcome_reward`, which reads the dataset column `answer`.
        rollout_func: defaults to `ProcessRollout()`.
        All other arguments are `trl.GRPOTrainer`'s.
    """

    def __init__(self, *args, outcome_func=outcome_reward, rollout_func=None, **kwargs):
        super().__init__(*args, rollout_func=rollout_func if rollout_func is not None else ProcessRollout(), **kwargs)
        self.outcome_func = outcome_func
        self.calculate_rewards_calls = 0  # read by the test that guards the private override
        for reward_func in self.reward_funcs:
            if hasattr(reward_func, "bind_policy"):
                reward_func.bind_policy(self.model, self._tokenizer)

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self.calculate_rewards_calls += 1
        try:
            self._log_process_metrics(inputs, prompts, completions, completion_ids_list, rewards_per_func)
        except Exception:  # telemetry must never stop training
            logger.exception("procrl metrics failed for this batch; training continues")
        return rewards_per_func

    def _log_process_metrics(self, inputs, prompts, completions, completion_ids_list, rewards_per_func):
        device = self.accelerator.device
        answers = [x.get("answer") for x in inputs]
        if all(a is not None for a in answers):
            correct = self.outcome_func(
                prompts=prompts, completions=completions, completion_ids=completion_ids_list, answer=answers
            )
        else:
            correct = [None] * len(prompts)
        local = torch.tensor([math.nan if c is None else float(c) for c in correct], device=device)
        lengths = torch.tensor([len(ids) for ids in completion_ids_list], dtype=torch.float32, device=device)
        truncated = torch.tensor(
            [float(not ids or ids[-1] not in self.eos_token_ids) for ids in completion_ids_list], device=device
        )
        # Gather in process order, like TRL gathers `rewards_per_func`, so rows line up across tensors.
        correct_all = self.accelerator.gather(local)
        lengths_all = self.accelerator.gather(lengths)
        truncated_all = self.accelerator.gather(truncated)

        accuracy = _nanmean(correct_all)
        weights = self.reward_weights.to(rewards_per_func.device)
        weighted = (rewards_per_func * weights.unsqueeze(0)).nansum(dim=1)
        self._log_metric("task/accuracy", accuracy)
        self._log_metric("task/unparseable_gold", torch.isnan(correct_all).float().mean().item())
        self._log_metric("hacking/truncated_frac", truncated_all.mean().item())
        if not math.isnan(accuracy):
            self._log_metric("hacking/reward_minus_accuracy", weighted.mean().item() - accuracy)
        outcome_name = getattr(self.outcome_func, "__name__", "")
        bonus_cols = [i for i, name in enumerate(self.reward_func_names) if name != outcome_name]
        if bonus_cols:
            bonus = (rewards_per_func[:, bonus_cols] * weights[bonus_cols].unsqueeze(0)).nansum(dim=1)
            valid = ~torch.isnan(rewards_per_func[:, bonus_cols]).all(dim=1)
            corr = pearson(bonus[valid], lengths_all.to(bonus.device)[valid])
            if corr is not None:
                self._log_metric("hacking/bonus_length_corr", corr)


def pearson(x: torch.Tensor, y: torch.Tensor) -> float | None:
    """Pearson correlation of two 1-D tensors; None when undefined (fewer than 2 points or zero variance)."""
    if x.numel() < 2:
        return None
    x, y = x.double() - x.double().mean(), y.double() - y.double().mean()
    denom = math.sqrt(float((x * x).sum()) * float((y * y).sum()))
    return None if denom == 0.0 else float((x * y).sum()) / denom


def _nanmean(values: torch.Tensor) -> float:
    valid = values[~torch.isnan(values)]
    return float(valid.mean()) if valid.numel() else math.nan

