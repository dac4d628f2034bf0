"""`ProcessGRPOTrainer`: TRL's GRPOTrainer with procrl's generation hook and reward-hacking telemetry.

What it adds to `trl.GRPOTrainer` (TRL pinned to 1.16.*):

- `rollout_func` defaults to `ProcessRollout`, which returns the sampler's raw per-token log-probs as the extra
  field `completion_logps` for every reward function (docs/architecture.md "Generation hook").
- Reward functions that need the live policy (they have a `bind_policy(model, tokenizer)` method, e.g. the
  PiCSAR bonus) are bound to it.
- Metrics, logged with TRL's own metric machinery next to `rewards/<name>/mean`:
  `task/accuracy` (the outcome check, computed here independently of the reward functions and their weights),
  `task/unparseable_gold`, `hacking/reward_minus_accuracy` (mean weighted reward minus accuracy),
  `hacking/bonus_length_corr` (Pearson correlation, over the batch, between the weighted sum of the
  non-outcome rewards and the completion length in tokens) and `hacking/truncated_frac` (completions that hit
  `max_completion_length` without EOS); and the monitors of `procrl.trainers.monitoring`: `hacking/repetition_rate`,
  `hacking/length_corr/<reward name>` (within-group), `hacking/reward_accuracy_corr` (rolling, with a collapse
  warning), per-step scores in the completions table and `<output_dir>/completions.jsonl`, and one console line
  per logging step (`procrl.trainers.monitoring`).

- Process advantages (`advantage_mode: process | mixed`, DeepSeekMath §4.1.3, `procrl.trainers.advantages`): a
  step scorer (`step_reward_func`, returning one `StepRewards` or None per completion) gives per-step rewards;
  they are gathered from all ranks, normalised over all steps of each prompt's G completions, and turned into
  per-token advantages `(B, T)` (suffix sums). `process` uses them alone; `mixed` adds TRL's outcome advantage
  times `process_alpha`. The step scorer is never one of TRL's `reward_funcs`, so it is not also counted in the
  scalar reward; `reward_funcs` still give TRL's `reward` metrics (and, in mixed mode, the outcome advantage).
  Metrics: `process/not_applicable`, `process/steps_per_completion`, `process/step_reward_mean`,
  `process/unscored_steps`, and the per-token advantages that reach the loss, over the completion tokens of all
  ranks: `process/advantage_mean`, `process/advantage_std` (sample std), `process/advantage_min`,
  `process/advantage_max`. TRL's completions table keeps TRL's own (outcome) advantage per completion.
  The process part always normalises per group (scale_rewards does not apply to it). With one outcome step per
  completion it equals TRL's outcome advantage under `multi_objective_aggregation: sum_then_normalize`; procrl's
  default `normalize_then_sum` also standardises TRL's summed advantage over the whole batch (:2798-2799), so there
  the two differ by that batch-wide affine map.

Three overrides, with TRL pinned to 1.16.* (line numbers of trl/trainer/grpo_trainer.py in TRL 1.16.0;
`import procrl.trainers` refuses another TRL minor version):
- `_calculate_rewards` (:1579, called once per generation batch from `_generate_and_score_completions` at :2753)
  computes the metrics above and runs the step scorer, where the prompts, completion texts and sampled ids of this
  rank are at hand; it gathers across ranks like TRL does (:1681). Each completion's step rewards travel with its
  row of the batch (`inputs[i][STEP_REWARDS_KEY]`), as TRL merges the rollout's extra fields into the rows
  (:2741-2747); no trainer attribute carries them between the two methods.
- `_generate_and_score_completions` (:2324) calls TRL's and, in process/mixed mode, takes the step rewards out of
  the rows, gathers them and replaces TRL's `advantages` (B,) (:2818, :2903) with the (B, T) tensor aligned with
  `completion_mask` (right-padded completion ids, :2454-2463); TRL's loss accepts (B, T) advantages (:3055-3059).
- `log` (:3302) gives the monitors the metrics of the logging step before TRL averages them
  (`TrainingMonitor.on_log`).
Tests `tests/trainers/test_grpo.py::test_calculate_rewards_override_is_called` and
`tests/trainers/test_advantages.py::test_generate_and_score_override_is_called` spy on the two methods and fail if
TRL stops calling them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import NamedTuple

import torch
from trl import GRPOConfig, GRPOTrainer

from procrl.generation import EngineArguments
from procrl.generation.runtime import BF16_HELP, resolve_config_bf16
from procrl.rewards.outcome import outcome_reward
from procrl.step_rewards import StepRewards
from procrl.trainers.advantages import (
    check_step_reward_func,
    check_step_rewards,
    func_name,
    normalize_step_rewards,
    pad_step_rewards,
    token_advantages,
)
from procrl.trainers.monitoring import (
    MonitorArguments,
    TrainingMonitor,
    correlation,
    install_console_line,
    log_batch_monitors,
    repetition_rate,
    step_reward_columns,
)
from procrl.trainers.rollout import ProcessRollout, resolve_importance_sampling
from procrl.trainers.vllm_colocate import finish_vllm_setup, resolve_generation_backend, trl_llm_overrides
from procrl.utils import get_logger

logger = get_logger(__name__)


ADVANTAGE_MODES = ("outcome", "process", "mixed")
# The row key under which `_calculate_rewards` leaves each completion's step rewards for
# `_generate_and_score_completions` (process/mixed mode), next to the fields TRL merged into the row.
STEP_REWARDS_KEY = "procrl_step_rewards"


class RowSteps(NamedTuple):
    """One completion's step scorer output and its length in sampled tokens (its advantage row's extent)."""

    step_rewards: StepRewards | None
    num_tokens: int


@dataclass
class ProcessGRPOConfig(GRPOConfig, EngineArguments, MonitorArguments):
    """`GRPOConfig` with defaults that work on a CPU-only machine and procrl's reward aggregation.

    Differences from TRL's defaults:
    - `bf16`: "auto" = bf16 autocast where the hardware computes bf16 natively, else fp32
      (`procrl.generation.runtime.resolve_bf16`); TRL's None means True, which raises on a CPU-only machine.
    - `vllm_importance_sampling_correction`: None = auto, off where the sampler is the policy (`procrl.trainers.rollout`).
    - `multi_objective_aggregation`: "normalize_then_sum", so a bonus cannot dominate groups whose outcome
      rewards are all equal (docs/architecture.md "Reward functions").

    procrl's own fields: `advantage_mode` and `process_alpha` (process advantages, docs/architecture.md "Process advantages"); the engine fields of
    `procrl.generation.EngineArguments` (`generation_backend`: "auto" = vLLM where it runs; it sets `use_vllm`;
    `vllm_kv_cache_gib`, `vllm_dtype`; resolved by `procrl.trainers.vllm_colocate.resolve_generation_backend`);
    `hacking_window`, `completions_jsonl`, `completions_jsonl_per_step` and `console_line`
    (`procrl.trainers.monitoring`).

    Raises:
        ValueError, ImportError: see the fields' checks (`resolve_generation_backend`).
    """

    bf16: str = field(default="auto", metadata={"help": BF16_HELP})
    vllm_importance_sampling_correction: bool | None = field(
        default=None,
        metadata={
            "help": "TRL's importance-sampling correction of vLLM samples (an extra no-grad policy forward a step). null "
            "(default) = auto: off where the sampler is the policy (colocated fp32 CPU engine, temperature only) or a "
            "grammar constrains it, on elsewhere (bf16, GPU or server engines, top-p/k, penalties). true/false forces it."
        },
    )
    multi_objective_aggregation: str = field(
        default="normalize_then_sum",
        metadata={
            "help": "How several reward functions combine (TRL): 'normalize_then_sum' (procrl default: each reward "
            "is normalised within its group, then weighted by reward_weights and summed) or 'sum_then_normalize'."
        },
    )

    advantage_mode: str = field(
        default="outcome",
        metadata={
            "help": "Which advantages drive the update. 'outcome' (default): TRL's sequence-level GRPO advantage "
            "from reward_funcs. 'process': per-token advantages from the trainer's step_reward_func (DeepSeekMath "
            "§4.1.3: step rewards normalised over all steps of a prompt's completions, summed over the steps at or "
            "after each token); reward_funcs then only feed the reward metrics. 'mixed': process + process_alpha × "
            "outcome advantage. process and mixed need ProcessGRPOTrainer(step_reward_func=...)."
        },
    )
    process_alpha: float = field(
        default=1.0,
        metadata={
            "help": "mixed mode only: weight α of TRL's outcome advantage added to the per-token process advantage "
            "(advantage = process + α × outcome). Finite and >= 0."
        },
    )

    def __post_init__(self):
        if self.advantage_mode not in ADVANTAGE_MODES:
            raise ValueError(
                f"advantage_mode={self.advantage_mode!r} is not one of {ADVANTAGE_MODES}; set advantage_mode: outcome "
                "(TRL's GRPO), process or mixed (these two also need a step_reward_func)."
            )
        if not (math.isfinite(self.process_alpha) and self.process_alpha >= 0):
            raise ValueError(f"process_alpha={self.process_alpha} must be finite and >= 0 (e.g. process_alpha: 1.0).")
        resolve_generation_backend(self)
        self.check_monitor_arguments()
        resolve_config_bf16(self)
        resolve_importance_sampling(self)  # auto: refined by ProcessGRPOTrainer, which knows the policy's dtype
        super().__post_init__()


class ProcessGRPOTrainer(GRPOTrainer):
    """GRPO with process rewards; see the module docstring for what it adds.

    Args:
        outcome_func: the outcome check behind `task/accuracy` (TRL reward signature, 1.0 / 0.0 / None);
            defaults to `procrl.rewards.outcome.outcome_reward`, which reads the dataset column `answer`.
        rollout_func: defaults to `ProcessRollout()`.
        step_reward_func: the step scorer behind process advantages (`procrl.trainers.advantages.StepRewardFunc`:
            `f(prompts, completions, completion_ids, **kwargs) -> list[StepRewards | None]`); required when
            `args.advantage_mode` is 'process' or 'mixed', refused in 'outcome' mode, and never also one of
            `reward_funcs` (it would be counted twice).
        All other arguments are `trl.GRPOTrainer`'s.

    Raises:
        ValueError: a missing, superfluous or double-counted step scorer (see `step_reward_func`).
    """

    def __init__(self, *args, outcome_func=outcome_reward, rollout_func=None, step_reward_func=None, **kwargs):
        args_obj = kwargs.get("args", args[2] if len(args) > 2 else None)
        self.advantage_mode = getattr(args_obj, "advantage_mode", "outcome")
        self.process_alpha = getattr(args_obj, "process_alpha", 1.0)
        check_step_reward_func(
            self.advantage_mode, step_reward_func, kwargs.get("reward_funcs", args[1] if len(args) > 1 else None)
        )
        if rollout_func is None:
            if kwargs.get("tools") or kwargs.get("environment_factory"):
                raise ValueError(
                    "tools/environment_factory run TRL's tool loop, which would misalign procrl's completion_logps; "
                    "use them with a plain GRPOTrainer or pass your own rollout_func."
                )
            rollout_func = ProcessRollout()
        model = kwargs.get("model", args[0] if args else None)
        resolve_importance_sampling(args_obj, model)  # auto: off where the sampler is the policy
        with trl_llm_overrides(args_obj, model):  # CPU build: eager engine, explicit KV cache (vllm_colocate)
            super().__init__(*args, rollout_func=rollout_func, **kwargs)
        finish_vllm_setup(self)  # re-seed after TRL's LLM(seed=...); CPU weight sync through reload_weights
        self.outcome_func = outcome_func
        self.step_reward_func = step_reward_func
        self.monitor = TrainingMonitor.attach(self)  # + the completions.jsonl reset at train begin
        if getattr(self.args, "console_line", True):
            install_console_line(self)
        if step_reward_func is not None and self.args.scale_rewards != "group":
            logger.warning(
                "scale_rewards=%r applies to the outcome advantage only; process advantages always divide by the "
                "group's step-reward std (docs/architecture.md 'Process advantages').",
                self.args.scale_rewards,
            )
        # The one place the policy meets the rewards that need it (PiCSAR's answer term, the PUM step scorer's
        # tokenizer); `bind_policy` keeps an explicitly given model.
        for reward_func in [*self.reward_funcs, step_reward_func]:
            if hasattr(reward_func, "bind_policy"):
                reward_func.bind_policy(self.model, self._tokenizer)

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self.monitor.batches += 1
        # Every rank must reach the same gathers, so a failure only blanks this rank's rows (NaN), never skips them.
        try:
            local = self._local_process_stats(inputs, prompts, completions, completion_ids_list, rewards_per_func)
        except Exception:  # telemetry must never stop training
            logger.exception("procrl metrics failed for this batch on this rank; training continues")
            local = torch.full((len(prompts), 4), math.nan)
        # Gather in process order, like TRL gathers `rewards_per_func`, so rows line up across tensors.
        gathered = self.accelerator.gather(local.to(self.accelerator.device)).cpu()
        self._log_process_metrics(gathered, rewards_per_func.cpu())
        if self.step_reward_func is not None:
            step_rewards = self._score_steps(inputs, prompts, completions, completion_ids_list)
            for column, values in step_reward_columns(step_rewards).items():  # the completions table's columns
                self._log_completion_extra(column, values)
            # a fresh dict per row (the list is TRL's, shared with the caller): rows that alias one dict (a plain
            # list dataset repeated by the sampler) cannot overwrite each other's step rewards
            for i, (steps, ids) in enumerate(zip(step_rewards, completion_ids_list, strict=True)):
                inputs[i] = {**inputs[i], STEP_REWARDS_KEY: RowSteps(steps, len(ids))}
        return rewards_per_func

    def _score_steps(self, inputs, prompts, completions, completion_ids_list) -> list[StepRewards | None]:
        """Run the step scorer on this rank's completions with the keywords TRL gives reward functions (dataset
        columns, rollout fields, `trainer_state`, `log_extra`, `log_metric`); checked against the sampled ids."""
        keys = [k for k in inputs[0] if k not in ("prompt", "completion", "completion_ids")]  # as TRL (:1584)
        kwargs = {k: [x[k] for x in inputs] for k in keys}
        kwargs.update(trainer_state=self.state, log_extra=self._log_completion_extra, log_metric=self._log_metric)
        step_rewards = self.step_reward_func(
            prompts=prompts, completions=completions, completion_ids=completion_ids_list, **kwargs
        )
        return check_step_rewards(func_name(self.step_reward_func), step_rewards, completion_ids_list)

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        if self.advantage_mode == "outcome":
            return output
        rows = [row.pop(STEP_REWARDS_KEY, None) for row in inputs]
        if any(row is None for row in rows):
            raise RuntimeError(
                "No step rewards for this batch: TRL did not call _calculate_rewards from "
                "_generate_and_score_completions (procrl supports trl==1.16.*)."
            )
        mode = "train" if self.model.training else "eval"
        lengths = torch.tensor([row.num_tokens for row in rows], dtype=torch.long)  # (B,)
        all_values, ends = self._gather_step_rewards([row.step_rewards for row in rows], mode)
        num_generations = self.num_generations if mode == "train" else self.num_generations_eval
        normalized = normalize_step_rewards(all_values, num_generations)  # (N, S), all ranks
        start = self.accelerator.process_index * len(lengths)
        local = normalized[start : start + len(lengths)]  # this rank's rows, as TRL slices (:2813-2818)
        outcome = output["advantages"]  # (B,)
        num_tokens = output["completion_ids"].size(1)
        advantages = token_advantages(local, ends, num_tokens).to(outcome.device)  # (B, T)
        in_completion = torch.arange(num_tokens).unsqueeze(0) < lengths.unsqueeze(1)  # (B, T); padding stays 0
        if self.advantage_mode == "mixed":
            advantages = advantages + self.process_alpha * outcome.unsqueeze(1) * in_completion.to(outcome.device)
        output["advantages"] = advantages
        self._log_advantage_stats(advantages, in_completion, mode)
        return output

    def _gather_step_rewards(self, step_rewards: list[StepRewards | None], mode: str):
        """Gather the step rewards of all ranks and log `process/*` (global values, so straight into the metrics).

        Returns (values `(N, S)` NaN-padded, all ranks in process order; ends `(B, S)` of this rank's completions).
        Step counts differ between ranks, so rows are NaN-padded to the largest count first.
        """
        device = self.accelerator.device
        local_steps = torch.tensor([max((len(s.values) for s in step_rewards if s is not None), default=0)])
        num_steps = int(self.accelerator.gather(local_steps.to(device)).max())
        values, ends = pad_step_rewards(step_rewards, num_steps)  # (B, S)
        # one gather: [not applicable, number of steps, step rewards...] per completion
        meta = torch.tensor([[float(s is None), 0.0 if s is None else len(s.values)] for s in step_rewards])
        gathered = self.accelerator.gather(torch.cat([meta.reshape(-1, 2), values], dim=1).to(device)).cpu()
        not_applicable, steps, all_values = gathered[:, 0].bool(), gathered[:, 1], gathered[:, 2:]
        metrics = self._metrics[mode]
        metrics["process/not_applicable"].append(not_applicable.float().mean().item())
        if (~not_applicable).any():
            metrics["process/steps_per_completion"].append(steps[~not_applicable].mean().item())
            real = torch.arange(all_values.shape[1]).unsqueeze(0) < steps.unsqueeze(1)  # (N, S): not padding
            scored = all_values[real]
            finite = torch.isfinite(scored)
            metrics["process/unscored_steps"].append((~finite).float().mean().item())
            if finite.any():
                metrics["process/step_reward_mean"].append(scored[finite].mean().item())
        return all_values, ends

    def _log_advantage_stats(self, advantages: torch.Tensor, in_completion: torch.Tensor, mode: str) -> None:
        """`process/advantage_{mean,std,min,max}` over the completion tokens `(B, T)` mask of all ranks."""
        tokens = advantages.detach()[in_completion.to(advantages.device)].float()
        empty = tokens.numel() == 0
        local = torch.stack(
            [
                torch.tensor(float(tokens.numel())),
                tokens.sum().cpu(),
                (tokens * tokens).sum().cpu(),
                torch.tensor(math.inf) if empty else tokens.min().cpu(),
                torch.tensor(-math.inf) if empty else tokens.max().cpu(),
            ]
        )
        stats = self.accelerator.gather(local.unsqueeze(0).to(self.accelerator.device)).cpu().double()  # (ranks, 5)
        count, total, squares = (float(v) for v in stats[:, :3].sum(dim=0))
        if count == 0:
            return
        mean = total / count
        metrics = self._metrics[mode]
        metrics["process/advantage_mean"].append(mean)
        if count > 1:
            metrics["process/advantage_std"].append(math.sqrt(max(0.0, (squares - total * mean) / (count - 1))))
        metrics["process/advantage_min"].append(float(stats[:, 3].min()))
        metrics["process/advantage_max"].append(float(stats[:, 4].max()))

    def _local_process_stats(self, inputs, prompts, completions, completion_ids_list, rewards_per_func):
        """`(B_local, 4)`: correctness (1/0/NaN), length in tokens, truncated (1/0), repetition rate (NaN: < 4)."""
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
        rows = []
        for c, ids in zip(correct, completion_ids_list, strict=True):
            truncated = not ids or ids[-1] not in self.eos_token_ids
            repetition = repetition_rate(ids if truncated else ids[:-1])  # the text's tokens: trailing EOS dropped
            rows.append(
                [
                    math.nan if c is None else float(c),
                    len(ids),
                    float(truncated),
                    math.nan if repetition is None else repetition,
                ]
            )
        return torch.tensor(rows, dtype=torch.float32).reshape(len(prompts), 4)

    def _outcome_column(self) -> int | None:
        for i, func in enumerate(self.reward_funcs):
            if func is self.outcome_func or func == self.outcome_func:  # OutcomeReward("strict") == outcome_reward
                return i
        return None

    def _log_process_metrics(self, gathered: torch.Tensor, rewards_per_func: torch.Tensor) -> None:
        correct_all, lengths_all, truncated_all, repetition_all = gathered.unbind(dim=1)
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
        group_size = self.num_generations if self.model.training else self.num_generations_eval
        bonus_rewards = {self.reward_func_names[i]: rewards_per_func[:, i].tolist() for i in bonus_cols}
        log_batch_monitors(self._log_metric, repetition_all.tolist(), lengths_all.tolist(), bonus_rewards, group_size)

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        mode = "train" if self.model.training else "eval"
        self.monitor.on_log(self._metrics[mode], self._logs, self.state.global_step, mode)
        super().log(logs, start_time)


def pearson(x: torch.Tensor, y: torch.Tensor) -> float | None:
    """Pearson correlation of two 1-D tensors; None when undefined (fewer than 2 points or a constant one)."""
    return correlation(x.double().tolist(), y.double().tolist())


def _nanmean(values: torch.Tensor) -> float:
    valid = values[~torch.isnan(values)]
    return float(valid.mean()) if valid.numel() else math.nan
