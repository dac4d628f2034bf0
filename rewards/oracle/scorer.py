"""The step oracle as GRPO rewards: ProcessAcc per completion and a bounded per-step scorer (docs/architecture.md
"Step oracle").

* `oracle_process_reward` (TRL reward, registry name `oracle_process`): ProcessAcc ∈ [0, 1] per completion.
* `OracleReward(penalty)` (TRL reward, the scalar of registry name `oracle`): Φ_K = ProcessAcc − penalty·[an error].
* `OracleStepRewards(penalty)` (step scorer, registry name `oracle` as `step_reward_func`): value_k = Φ_k − Φ_{k−1}
  with Φ_k = ProcessAcc over written steps 1..k − penalty·[an error among steps 1..k] and Φ_0 = 0. The values sum
  to Φ_K ∈ [−penalty, 1] whatever the number of steps: a scorer that paid each correct step would be hacked by
  repeating steps; this one pays each gold result once (`procrl.rewards.oracle.labels`).

All three read the dataset's `gold_steps` column (`procrl.data_builders.arithmetic`) and `question` column, and
raise a `ValueError` when the batch has no `gold_steps`. A row whose gold steps do not parse (or are empty) gets
None ("does not apply"), counted in one warning per batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from procrl.rewards.oracle.gold import GOLD_STEPS_COLUMN, GoldStep, gold_steps_from_json
from procrl.rewards.oracle.labels import OracleLabels, oracle_labels
from procrl.rewards.steps import Step, token_steps
from procrl.step_rewards import StepRewards
from procrl.utils import check_reward_length, completion_to_text, get_logger, prompt_to_text

logger = get_logger(__name__)

__all__ = [
    "DEFAULT_ERROR_PENALTY",
    "OracleReward",
    "OracleStepRewards",
    "batch_gold_and_questions",
    "get_oracle_reward",
    "get_oracle_step_rewards",
    "oracle_process_reward",
    "step_chunks",
]

DEFAULT_ERROR_PENALTY = 0.5
_NO_GOLD = (
    "the step oracle needs problems with gold steps (procrl.data_builders.arithmetic): the batch has no `{column}` "
    "column. Train on a step-checkable task, or use another reward ({name})."
)


def _check_penalty(penalty: float) -> float:
    if isinstance(penalty, bool) or not isinstance(penalty, int | float) or not penalty >= 0:
        raise ValueError(f"the oracle's error penalty must be a number >= 0, got {penalty!r}")
    return float(penalty)


def batch_gold_and_questions(
    name: str, n: int, gold_steps: Sequence[Any] | None, question: Sequence[Any] | None, prompts: Sequence[Any] | None
) -> tuple[list[list[GoldStep] | None], list[str]]:
    """Per completion: its gold steps (None where the column value does not parse or holds no step) and its problem
    text (the `question` column, else the prompt's last user message with a warning).

    Raises:
        ValueError: no `gold_steps` column, or a column without one entry per completion.
    """
    if gold_steps is None:
        raise ValueError(_NO_GOLD.format(column=GOLD_STEPS_COLUMN, name=name))
    if isinstance(gold_steps, str) or len(gold_steps) != n:
        raise ValueError(f"{name}: the `{GOLD_STEPS_COLUMN}` column must have one entry per completion ({n}).")
    gold: list[list[GoldStep] | None] = []
    for value in gold_steps:
        if isinstance(value, list) and value and all(isinstance(s, GoldStep) for s in value):
            gold.append(value)  # already parsed (evaluation code)
            continue
        try:
            gold.append(gold_steps_from_json(value) or None)
        except ValueError:
            gold.append(None)
    unusable = sum(g is None for g in gold)
    if unusable:
        logger.warning("%s: %d of %d rows have no usable gold steps; their reward is None.", name, unusable, n)
    if question is not None:
        if isinstance(question, str) or len(question) != n:
            raise ValueError(f"{name}: the `question` column must have one entry per completion ({n}).")
        return gold, [str(q) for q in question]
    if prompts is None or len(prompts) != n:
        raise ValueError(f"{name}: needs a `question` column or one prompt per completion ({n}).")
    logger.warning(
        "%s: no `question` column; the numbers of the whole prompt count as the problem's (more lenient grounding).",
        name,
    )
    return gold, [prompt_to_text(p) for p in prompts]


def oracle_process_reward(
    prompts=None, completions=None, completion_ids=None, question=None, gold_steps=None, **kwargs
) -> list[float | None]:
    """TRL reward: ProcessAcc of each completion, the share of gold step results it produced with valid, grounded
    steps, in [0, 1] (`procrl.rewards.oracle.labels`); None where the row's gold steps do not parse.

    Raises:
        ValueError: no `gold_steps` column, or a column of the wrong length.

    >>> oracle_process_reward(completions=["14 + 7 = 21. 21 - 9 = 12.", "14 + 7 = 21. 2 + 2 = 4. 2 + 2 = 4."],
    ...                       question=["14, 7, 9, 2"] * 2, gold_steps=['[[14,"+",7,21],[21,"-",9,12]]'] * 2)
    [1.0, 0.5]
    """
    if completions is None:
        raise ValueError("oracle_process_reward needs `completions`.")
    n = len(completions)
    gold, problems = batch_gold_and_questions("oracle_process_reward", n, gold_steps, question, prompts)
    values = [
        None if g is None else oracle_labels(completion_to_text(c), q, g).process_acc
        for c, q, g in zip(completions, problems, gold, strict=True)
    ]
    return check_reward_length("oracle_process_reward", values, n)


class OracleReward:
    """TRL reward: Φ_K = ProcessAcc − penalty·[the completion has an error] ∈ [−penalty, 1], the total of
    `OracleStepRewards`; None where the row's gold steps do not parse. `__name__` "oracle_reward".

    Args:
        penalty: the error penalty (>= 0; default `DEFAULT_ERROR_PENALTY`).

    Raises:
        ValueError: a negative penalty; at call time, no `gold_steps` column.
    """

    __name__ = "oracle_reward"

    def __init__(self, penalty: float = DEFAULT_ERROR_PENALTY):
        self.penalty = _check_penalty(penalty)

    def __call__(self, prompts=None, completions=None, completion_ids=None, question=None, gold_steps=None, **kwargs):
        if completions is None:
            raise ValueError(f"{self.__name__} needs `completions`.")
        n = len(completions)
        gold, problems = batch_gold_and_questions(self.__name__, n, gold_steps, question, prompts)
        values = [
            None if g is None else oracle_labels(completion_to_text(c), q, g).score(self.penalty)
            for c, q, g in zip(completions, problems, gold, strict=True)
        ]
        return check_reward_length(self.__name__, values, n)


def step_chunks(text: str, labels: OracleLabels) -> list[Step]:
    """The text cut into one chunk per written step: chunk k ends where step k's span ends, chunk 0 starts at 0 and
    the last chunk runs to the end of the text, so the chunks tile the text (`procrl.rewards.steps` conventions).

    Raises:
        ValueError: a completion without steps (it has no chunks).
    """
    if not labels.steps:
        raise ValueError("step_chunks: the completion has no written step")
    ends = [s.span[1] for s in labels.steps[:-1]] + [len(text)]
    starts = [0, *ends[:-1]]
    return [Step(text=text[a:b], start=a, end=b) for a, b in zip(starts, ends, strict=True)]


class OracleStepRewards:
    """Step scorer (`procrl.step_rewards.StepRewardFunc`): value_k = Φ_k − Φ_{k−1}, the bounded oracle potential
    (module docstring), one value per written step.

    Token alignment: the decoded completion (`tokenizer.decode(ids, skip_special_tokens=True)`, as TRL decodes it) is
    cut into one chunk per written step, each ending where the step's result ends (`step_chunks`; text before the
    first step belongs to it, text after the last step, EOS included, to the last), and the chunks are mapped to
    token boundaries by `procrl.rewards.steps.token_steps` (the sampled ids are never re-encoded). Where one token
    straddles a whole chunk, `token_steps` merges it into the previous one and its value is added to that step's,
    so the values still sum to Φ_K. A completion is truncated when its last id is neither EOS nor pad (TRL's test,
    trl/trainer/grpo_trainer.py:2489-2490); then a result at the very end of its text is not a step (it may be cut).

    Returns per completion: a `StepRewards` whose values sum to Φ_K ∈ [−penalty, 1]; a completion with ids but no
    written step gets one step of value 0.0 (no step, ProcessAcc 0, no error); None for empty ids and for a row
    whose gold steps do not parse.

    Args:
        penalty: the error penalty (>= 0; default `DEFAULT_ERROR_PENALTY`).
        tokenizer: the policy's tokenizer; None: the one `ProcessGRPOTrainer` binds (`bind_policy`).

    Raises:
        ValueError: a negative penalty; at call time, no `gold_steps` column, no tokenizer, or columns of the wrong
            length.
    """

    __name__ = "oracle_step_rewards"

    def __init__(self, penalty: float = DEFAULT_ERROR_PENALTY, tokenizer: Any = None):
        self.penalty = _check_penalty(penalty)
        self.tokenizer = tokenizer

    def bind_policy(self, model, tokenizer) -> None:  # noqa: ARG002 - the trainer's binding hook
        """Decode sampled ids with the policy's tokenizer unless one was given."""
        if self.tokenizer is None:
            self.tokenizer = tokenizer

    def __call__(self, prompts=None, completions=None, completion_ids=None, question=None, gold_steps=None, **kwargs):
        if completion_ids is None:
            raise ValueError(f"{self.__name__} needs the sampled `completion_ids` (token boundaries refer to them).")
        n = len(completion_ids)
        if completions is not None and len(completions) != n:
            raise ValueError(f"{self.__name__}: {len(completions)} completions for {n} completion_ids rows.")
        gold, problems = batch_gold_and_questions(self.__name__, n, gold_steps, question, prompts)
        if self.tokenizer is None:
            raise ValueError(
                f"{self.__name__} needs a tokenizer to align steps with tokens: pass tokenizer=..., or let "
                "ProcessGRPOTrainer bind the policy's (bind_policy)."
            )
        return [
            self._score([int(t) for t in ids], q, g) for ids, q, g in zip(completion_ids, problems, gold, strict=True)
        ]

    def _score(self, ids: list[int], question: str, gold: list[GoldStep] | None) -> StepRewards | None:
        if not ids or gold is None:
            return None
        tok = self.tokenizer
        stops = {getattr(tok, "eos_token_id", None), getattr(tok, "pad_token_id", None)} - {None}
        text = tok.decode(ids, skip_special_tokens=True)
        labels = oracle_labels(text, question, gold, truncated=bool(stops) and ids[-1] not in stops)
        if not labels.steps:
            return StepRewards(values=[0.0], boundaries=[len(ids)])
        phi = labels.potentials(self.penalty)
        increments = [phi[k] - phi[k - 1] for k in range(1, len(phi))]
        chunks = step_chunks(text, labels)
        kept, boundaries = token_steps(ids, tok, chunks)
        # merged chunks: each kept step starts where its first chunk does; its value sums the chunks it absorbed
        starts = [s.start for s in kept]
        values = [0.0] * len(kept)
        group = -1
        for chunk, value in zip(chunks, increments, strict=True):
            while group + 1 < len(starts) and starts[group + 1] <= chunk.start:
                group += 1
            values[max(group, 0)] += value
        return StepRewards(values=values, boundaries=boundaries)


def get_oracle_step_rewards(penalty: float = DEFAULT_ERROR_PENALTY, tokenizer: Any = None) -> OracleStepRewards:
    """The bounded oracle step scorer (`ProcessGRPOTrainer(step_reward_func=...)`; registry name `oracle`)."""
    return OracleStepRewards(penalty, tokenizer)


def get_oracle_reward(penalty: float = DEFAULT_ERROR_PENALTY) -> OracleReward:
    """Φ_K as a TRL reward (`reward_funcs: [oracle]`), the scalar twin of `get_oracle_step_rewards`."""
    return OracleReward(penalty)
