"""PUM as a GRPO reward: U(x, y) of a completion, and per-step increments for process advantages.

The Prefix Utility Model U_θ(x, p) ("From Correctness to Utility", arXiv 2606.07190; docs/architecture.md "PUM",
`procrl.rewards.pum`) scores a problem x and a (partial) solution p. Two uses in GRPO:

* `PUMReward` (TRL reward function, `__name__` "pum_utility", "pum_utility_min" or "pum_utility_last"): one raw
  score per completion, never normalised within a group (TRL's `multi_objective_aggregation` does that):

  - `mode="full"`: U(x, y) of the whole completion y (a trailing EOS stripped first: transformers pools at the
    rightmost non-pad token and pad == eos for SmolLM2, docs/architecture.md "Sequence-classification pooling");
  - `mode="last"`: U after the last step, from the one-pass step scoring (equal to "full" within float tolerance);
  - `mode="min"`: min over k of U(x, p_k), the step prefixes p_1..p_K (a weakest-link process reward).
  "last" and "min" reduce the per-step values with `procrl.step_rewards.aggregate_step_values` (NaN if any is).

  A completion that does not fit the PUM's budget (`max_length`; its end was cut, `PrefixUtilityModel.score_steps`
  leaves its last steps unscored) gets None in EVERY mode, never NaN and never a stand-in: the value each mode
  asks for (U of the whole completion, U after its last step, the min over all its steps) was not seen, and
  scoring what was seen (the kept start, the last scored step, the min over the scored steps) would make anything
  written past the budget free. None is TRL's "not applicable" (the completion's other rewards still count; a
  completion left with none gets advantage 0). The fraction is logged as `process/unscored_completions`.

  Recipes (`reward_weights` in the GRPO config):

  - outcome-anchored (default): `reward_funcs = [outcome_reward, PUMReward(path)]`,
    `reward_weights: [1.0, 0.5]`, `multi_objective_aggregation: normalize_then_sum`;
  - process-only: `reward_funcs = [PUMReward(path)]` (or `mode="min"` / `"last"`).

* `PUMStepRewards` (a `procrl.step_rewards.StepRewardFunc`): per-step rewards
  r_k = U(x, p_k) - U(x, p_{k-1}) with U(x, p_0) = U(x, ∅) (the empty prefix), so that Σ_k r_k = U(x, y) - U(x, ∅).
  A step whose end lies beyond the PUM's budget is unscored: r_k = NaN (every later step too), which process
  advantages treat as "no reward" (r~ = 0, left out of the group statistics) and the trainer counts in
  `process/unscored_steps`; the finite increments then sum to U(x, p_last scored) - U(x, ∅).
  Steps and token boundaries come from the SAMPLED completion ids (`procrl.rewards.steps.token_steps`, never
  re-encoding the sampled text); the step texts are scored in one forward pass per trajectory. In process and
  mixed advantage modes, do not also put a PUM reward among TRL's `reward_funcs` (it would be counted twice).

The problem x is the dataset's `question` column (the plain problem text the PUM was trained on). Without it the
last user message of the prompt is used, with a warning: procrl's one-shot prompts hold a worked example before the
problem, which the PUM never saw in training.

Scores are raw head outputs (real numbers, no sigmoid; only differences are meaningful).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from procrl.rewards.pum import PrefixUtilityModel, strip_trailing_eos
from procrl.rewards.steps import token_steps
from procrl.step_rewards import StepRewards, aggregate_step_values
from procrl.utils import check_reward_length, completion_to_text, get_logger, prompt_to_text

logger = get_logger(__name__)

__all__ = [
    "MODES",
    "PUMHolder",
    "PUMReward",
    "PUMStepRewards",
    "get_pum_reward",
    "get_pum_step_rewards",
    "problem_texts",
]

MODES = ("full", "min", "last")


def problem_texts(name: str, prompts: Sequence[Any], question: Sequence[str] | None, n: int) -> list[str]:
    """The PUM's problem text per completion: the `question` column, else the prompt's last user message.

    Raises:
        ValueError: `question` (or, without it, `prompts`) does not have one entry per completion.
    """
    if question is not None:
        if isinstance(question, str) or len(question) != n:
            raise ValueError(
                f"{name}: the `question` column must have one entry per completion ({n}), got "
                f"{1 if isinstance(question, str) else len(question)}."
            )
        return [str(q) for q in question]
    if prompts is None or len(prompts) != n:
        raise ValueError(f"{name}: needs `question` or one prompt per completion ({n}).")
    logger.warning(
        "%s: no `question` column; scoring with the prompt's last user message, which may include few-shot "
        "examples the PUM never saw in training. Add the problem text as a `question` column.",
        name,
    )
    return [prompt_to_text(p) for p in prompts]


class PUMHolder:
    """Shared loading and pickling: a PUM given by path is loaded on first use and reloaded after unpickling."""

    def __init__(self, model: str | Path | PrefixUtilityModel, device: str | None = None, batch_size: int = 16):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if isinstance(model, PrefixUtilityModel):
            self.path, self._pum = None, model
        elif isinstance(model, str | Path):
            self.path, self._pum = str(model), None
        else:
            raise TypeError(f"model must be a PUM checkpoint path or a PrefixUtilityModel, got {type(model).__name__}")
        self.device = device
        self.batch_size = batch_size

    @property
    def pum(self) -> PrefixUtilityModel:
        if self._pum is None:
            self._pum = PrefixUtilityModel.from_pretrained(self.path, device=self.device, batch_size=self.batch_size)
        return self._pum

    def __getstate__(self):
        # A loaded model does not travel: the copy reloads from the path. A model object without a path cannot.
        state = self.__dict__.copy()
        if self.path is None:
            raise TypeError(f"a {type(self).__name__} built from a model object cannot be pickled; pass the PUM path")
        state["_pum"] = None
        return state


class PUMReward(PUMHolder):
    """TRL reward function: the PUM's utility of each completion (see the module docstring for the modes).

    Args:
        model: a PUM checkpoint directory (loaded on first call with `PrefixUtilityModel.from_pretrained`) or a
            loaded `PrefixUtilityModel`.
        mode: "full" (U(x, y)), "last" (U after the last step) or "min" (min over step prefixes).
        device: device for a model loaded from a path (default: CUDA when available).
        batch_size: inputs per PUM forward pass.

    Call: `reward(prompts, completions, completion_ids=None, question=None, **kwargs) -> list[float | None]`,
    one raw score per completion; None for a completion with no text (whitespace only) and for one longer than the
    PUM's `max_length` (see the module docstring; counted in `process/unscored_completions`, the fraction of the
    completions with text, logged through TRL's `log_metric` when given). Never NaN. Raises `ValueError` naming
    the function when a column has the wrong length; a non-finite score raises `FloatingPointError` (from the
    scorer) rather than returning NaN.

    Example (needs a trained PUM, so not a doctest)::

        reward = PUMReward("outputs/pum")
        reward(prompts=[prompt], completions=["2 + 2 = 4.\\n\\nThe answer is 4."], question=["What is 2+2?"])
        # -> [0.83]: a raw head output; only differences between completions mean something
    """

    def __init__(
        self,
        model: str | Path | PrefixUtilityModel,
        mode: str = "full",
        *,
        device: str | None = None,
        batch_size: int = 16,
    ):
        if mode not in MODES:
            raise ValueError(f"PUMReward mode must be one of {MODES}, got {mode!r}")
        super().__init__(model, device=device, batch_size=batch_size)
        self.mode = mode
        self.__name__ = "pum_utility" if mode == "full" else f"pum_utility_{mode}"

    def __call__(self, prompts=None, completions=None, completion_ids=None, question=None, **kwargs):
        if completions is None:
            raise ValueError(f"{self.__name__} needs `completions`.")
        n = len(completions)
        problems = problem_texts(self.__name__, prompts, question, n)
        pum = self.pum
        texts = [strip_trailing_eos(completion_to_text(c), pum.tokenizer) for c in completions]
        with_text = [i for i, t in enumerate(texts) if t.strip()]
        # the whole completion must fit the budget: otherwise its end (and the value every mode needs) is unseen
        keep = [i for i in with_text if pum.render(problems[i], texts[i]).truncated_tokens == 0]
        values: list[float | None] = [None] * n
        if keep:
            if self.mode == "full":
                scores = pum.score([problems[i] for i in keep], [texts[i] for i in keep])
            else:
                per_step = pum.score_steps([problems[i] for i in keep], [texts[i] for i in keep])
                # a fitting completion has every step scored; a NaN left makes the aggregate NaN, so None below
                scores = [aggregate_step_values(row, self.mode) for row in per_step]
                log_extra = kwargs.get("log_extra")  # per-step utilities in TRL's completions table
                if callable(log_extra):
                    column: list[list[float | None] | None] = [None] * n
                    for i, row in zip(keep, per_step, strict=True):
                        column[i] = [float(u) if math.isfinite(u) else None for u in row]
                    log_extra(f"{self.__name__}/step_utilities", column)
            for i, score in zip(keep, scores, strict=True):
                values[i] = float(score) if math.isfinite(score) else None
        log_metric = kwargs.get("log_metric")
        if callable(log_metric) and with_text:
            unscored = sum(values[i] is None for i in with_text)
            log_metric("process/unscored_completions", unscored / len(with_text))
        return check_reward_length(self.__name__, values, n)


class PUMStepRewards(PUMHolder):
    """Step scorer for process advantages: r_k = U(x, p_k) - U(x, p_{k-1}), U(x, p_0) = U(x, ∅).

    Each completion's steps and token boundaries come from its sampled ids with
    `token_steps(completion_ids[i], tokenizer)` (the ids are decoded, never re-encoded; EOS and other tokens after the
    last step's text belong to the last step); the step texts are then scored by the PUM in one pass per trajectory
    (`score_steps(..., include_empty=True)`). Hence Σ_k r_k = U(x, y) - U(x, ∅) exactly when the completion fits
    the PUM's `max_length`. Otherwise the steps whose end was cut get NaN ("no reward" for process advantages,
    counted by the trainer in `process/unscored_steps`, which this scorer does not log itself so the key is not
    logged twice per batch); a completion with every step cut is still a `StepRewards` of NaN values (unscored
    steps, not "not applicable").

    Args:
        model: a PUM checkpoint directory or a loaded `PrefixUtilityModel`.
        tokenizer: the POLICY's tokenizer, used to decode the sampled ids. None: the policy's tokenizer bound by
            `ProcessGRPOTrainer` (`bind_policy`), else the PUM's own tokenizer.
        device, batch_size: as for `PUMReward`.

    Call: `f(prompts, completions, completion_ids, question=None, **kwargs) -> list[StepRewards | None]`; None for a
    completion without ids or text. Raises `ValueError` naming the scorer when `completion_ids` or `question` has
    the wrong length.
    """

    __name__ = "pum_step_increments"

    def __init__(
        self,
        model: str | Path | PrefixUtilityModel,
        tokenizer: Any = None,
        *,
        device: str | None = None,
        batch_size: int = 16,
    ):
        super().__init__(model, device=device, batch_size=batch_size)
        self.tokenizer = tokenizer

    def bind_policy(self, model, tokenizer) -> None:  # noqa: ARG002 - the trainer's binding hook
        """Decode sampled ids with the policy's tokenizer unless one was given."""
        if self.tokenizer is None:
            self.tokenizer = tokenizer

    def __getstate__(self):
        state = super().__getstate__()
        state["tokenizer"] = self.tokenizer  # tokenizers pickle
        return state

    def __call__(self, prompts=None, completions=None, completion_ids=None, question=None, **kwargs):
        if completion_ids is None:
            raise ValueError(f"{self.__name__} needs the sampled `completion_ids` (token boundaries refer to them).")
        n = len(completion_ids)
        if completions is not None and len(completions) != n:
            raise ValueError(f"{self.__name__}: {len(completions)} completions for {n} completion_ids rows.")
        problems = problem_texts(self.__name__, prompts, question, n)
        pum = self.pum
        tokenizer = self.tokenizer if self.tokenizer is not None else pum.tokenizer
        keep, step_texts, boundaries = [], [], []
        for i, ids in enumerate(completion_ids):
            steps, bounds = token_steps([int(t) for t in ids], tokenizer, separator=pum.separator)
            if steps:
                keep.append(i)
                step_texts.append([s.text for s in steps])
                boundaries.append(bounds)
        out: list[StepRewards | None] = [None] * n
        if keep:
            rows = pum.score_steps([problems[i] for i in keep], step_texts, include_empty=True)
            for i, row, bounds in zip(keep, rows, boundaries, strict=True):
                increments = [row[k] - row[k - 1] for k in range(1, len(row))]
                out[i] = StepRewards(values=increments, boundaries=bounds)
        if len(out) != n:  # pragma: no cover - guards refactors
            raise ValueError(f"{self.__name__} produced {len(out)} entries for {n} completions")
        return out


def get_pum_reward(
    model: str | Path | PrefixUtilityModel, mode: str = "full", device: str | None = None, batch_size: int = 16
) -> PUMReward:
    """The PUM reward as a picklable TRL reward function (`pum_utility`, `pum_utility_min`, `pum_utility_last`).

    Outcome-anchored (default recipe): `[outcome_reward, get_pum_reward(path)]` with `reward_weights: [1.0, 0.5]`.
    """
    return PUMReward(model, mode, device=device, batch_size=batch_size)


def get_pum_step_rewards(
    model: str | Path | PrefixUtilityModel, tokenizer: Any = None, device: str | None = None, batch_size: int = 16
) -> PUMStepRewards:
    """The per-step PUM increments as a picklable step scorer (`ProcessGRPOTrainer(step_reward_func=...)`)."""
    return PUMStepRewards(model, tokenizer, device=device, batch_size=batch_size)
