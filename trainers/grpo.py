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
import os
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
    - `bf16`: None resolves to True only when a CUDA GPU supports bf16 (and neither `fp16` nor `use_cpu` is set),
      else False; TRL resolves None to True, which raises on a CPU-only machine. An explicit value is left to
      transformers' own validation.
    - `multi_objective_aggregation`: "normalize_then_sum", so a bonus cannot dominate groups whose outcome
      rewards are all equal (DESIGN §3).
    """

    bf16: bool | None = field(
        default=None,
        metadata={
            "help": "bf16 mixed precision. None (default): on when a CUDA GPU supports bf16 and neither fp16 nor "
            "use_cpu is set, off otherwise (CPU)."
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
        if self.bf16 is None:
            use_cpu = self.use_cpu or os.environ.get("ACCELERATE_USE_CPU", "").lower() in ("1", "true", "yes")
            gpu_bf16 = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
            self.bf16 = bool(gpu_bf16 and not self.fp16 and not use_cpu)
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
        if rollout_func is None:
            args_obj = kwargs.get("args", args[2] if len(args) > 2 else None)
            if getattr(args_obj, "use_vllm", False):
                raise NotImplementedError(
                    "procrl's rollout_func does not drive vLLM yet: set use_vllm: false (transformers generation)."
                )
            if kwargs.get("tools") or kwargs.get("environment_factory"):
                raise ValueError(
                    "tools/environment_factory run TRL's tool loop, which would misalign procrl's completion_logps; "
                    "use them with a plain GRPOTrainer or pass your own rollout_func."
                )
            rollout_func = ProcessRollout()
        super().__init__(*args, rollout_func=rollout_func, **kwargs)
        self.outcome_func = outcome_func
        self.calculate_rewards_calls = 0  # read by the test that guards the private override
        for reward_func in self.reward_funcs:
            if hasattr(reward_func, "bind_policy"):
                reward_func.bind_policy(self.model, self._tokenizer)

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self.calculate_rewards_calls += 1
        # Every rank must reach the same gathers, so a failure only blanks this rank's rows (NaN), never skips them.
        try:
            local = self._local_process_stats(inputs, prompts, completions, completion_ids_list, rewards_per_func)
        except Exception:  # telemetry must never stop training
            logger.exception("procrl metrics failed for this batch on this rank; training continues")
            local = torch.full((len(prompts), 3), math.nan)
        # Gather in process order, like TRL gathers `rewards_per_func`, so rows line up across tensors.
        gathered = self.accelerator.gather(local.to(self.accelerator.device)).cpu()
        self._log_process_metrics(gathered, rewards_per_func.cpu())
        return rewards_per_func

    def _local_process_stats(self, inputs, prompts, completions, completion_ids_list, rewards_per_func):
        """`(B_local, 3)`: correctness (1/0/NaN), completion length in tokens, truncated (1/0)."""
        outcome_col = self._outcome_column()
        if outcome_col is not None:  # the outcome reward already ran: reuse its local rows
            start = self.accelerator.process_index * len(prompts)
            correct = rewards_per_func[start : start + len(prompts), outcome_col].tolist()
        elif all(x.get("answer") is not None for x in inputs):
            correct = self.outcome_func(
                prompts=prompts,
                completions=completions,
                completion_ids=completion_ids_list,
                answer=[x["answer"] for x in inputs],
            )
        else:
            correct = [None] * len(prompts)
        rows = [
            [math.nan if c is None else float(c), float(len(ids)), float(not ids or ids[-1] not in self.eos_token_ids)]
            for c, ids in zip(correct, completion_ids_list, strict=True)
        ]
        return torch.tensor(rows, dtype=torch.float32).reshape(len(prompts), 3)

    def _outcome_column(self) -> int | None:
        for i, func in enumerate(self.reward_funcs):
            if func is self.outcome_func:
                return i
        return None

    def _log_process_metrics(self, gathered: torch.Tensor, rewards_per_func: torch.Tensor) -> None:
        correct_all, lengths_all, truncated_all = gathered.unbind(dim=1)
        accuracy = _nanmean(correct_all)
        weights = self.reward_weights.cpu()
        scorable = ~torch.isnan(rewards_per_func).all(dim=1)  # TRL leaves rows no reward applies to out of `reward`
        weighted = (rewards_per_func * weights.unsqueeze(0)).nansum(dim=1)
        self._log_metric("task/accuracy", accuracy)
        self._log_metric("task/unparseable_gold", torch.isnan(correct_all).float().mean().item())
        self._log_metric("hacking/truncated_frac", _nanmean(truncated_all))
        if not math.isnan(accuracy) and scorable.any():
            self._log_metric("hacking/reward_minus_accuracy", weighted[scorable].mean().item() - accuracy)
        outcome_col = self._outcome_column()
        bonus_cols = [i for i in range(len(self.reward_funcs)) if i != outcome_col]
        if bonus_cols:
            bonus = (rewards_per_func[:, bonus_cols] * weights[bonus_cols].unsqueeze(0)).nansum(dim=1)
            valid = ~torch.isnan(rewards_per_func[:, bonus_cols]).all(dim=1) & ~torch.isnan(lengths_all)
            corr = pearson(bonus[valid], lengths_all[valid])
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

