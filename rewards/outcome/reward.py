"""The outcome reward as a TRL reward function (part of `procrl.rewards.outcome`, docs/architecture.md "Outcome"): 1.0 when
the final answer matches the gold answer, 0.0 otherwise, None when the gold answer cannot be parsed.

Correctness metrics share the trainer's ``task/`` namespace: `procrl.trainers.grpo` logs ``task/accuracy`` and
``task/unparseable_gold`` (over all ranks, from the outcome reward's column or, without one, from its own outcome
check on the rows' ``answer``), the reward logs ``task/no_answer_<mode>``; each key has one producer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from procrl.rewards.outcome import deadline
from procrl.rewards.outcome.extract import _check_extraction, extract_answer
from procrl.rewards.outcome.verify import _answer_matches, _gold_value
from procrl.utils import check_reward_length, completion_to_text

__all__ = ["OutcomeReward", "get_outcome_reward", "outcome_reward"]

_NO_ANSWER_METRIC = "task/no_answer_{mode}"  # one key per extraction mode: modes never mix in one metric


def _outcome_rewards(
    name: str, answer_extraction: str, completions: Sequence[Any] | None, answer: Any, kwargs: dict
) -> list[float | None]:
    """The body of ``outcome_reward`` and ``OutcomeReward``; ``name`` is the reward's name in error messages."""
    if answer is None:
        raise ValueError(
            f"{name} needs the gold answers: the dataset must have an `answer` column "
            "(TRL passes dataset columns to reward functions as keyword arguments)."
        )
    if completions is None:
        raise ValueError(f"{name} needs `completions` (one per gold answer).")
    if isinstance(answer, str) or not isinstance(answer, Sequence):
        raise ValueError(f"{name}: `answer` must be a list with one gold per completion, got {type(answer).__name__}.")
    if len(answer) != len(completions):
        raise ValueError(
            f"{name}: got {len(answer)} gold answers for {len(completions)} completions; "
            "the `answer` column must have exactly one entry per completion."
        )
    timeout_s = deadline._timeout(None)
    gold_ok: dict[str, bool] = {}  # one parse per distinct gold per batch (GRPO repeats each gold G times)
    rewards: list[float | None] = []
    no_answer = 0
    for completion, gold in zip(completions, answer, strict=True):
        extracted = extract_answer(completion_to_text(completion), answer_extraction=answer_extraction)
        no_answer += extracted is None
        value = _gold_value(gold)
        if value is not None and value not in gold_ok:
            status, ok = deadline._bounded("gold_ok", (value,), timeout_s)
            gold_ok[value] = status == "ok" and bool(ok)
        if value is None or not gold_ok[value]:
            rewards.append(None)
        else:
            rewards.append(1.0 if _answer_matches(value, extracted, timeout_s) else 0.0)
    log_metric = kwargs.get("log_metric")
    if callable(log_metric) and rewards:
        log_metric(_NO_ANSWER_METRIC.format(mode=answer_extraction), no_answer / len(rewards))
    return check_reward_length(name, rewards, len(completions))


def outcome_reward(
    prompts: Sequence[Any] | None = None,
    completions: Sequence[Any] | None = None,
    completion_ids: Sequence[Any] | None = None,
    *,
    answer: Sequence[str] | None = None,
    **kwargs: Any,
) -> list[float | None]:
    """TRL reward function: 1.0 when a completion's final answer equals its gold, 0.0 otherwise, None when
    the gold cannot be parsed (so it never earns 1.0). Answers are extracted strictly (``answer_extraction=
    "strict"``: a box, "The answer is ..." or "#### ..."); ``get_outcome_reward("flexible")`` is the lenient one.

    ``answer`` is the dataset's gold column, one string per completion (TRL repeats it per generation).
    When TRL passes ``log_metric``, the fraction of this batch's completions without an extractable answer is
    logged as ``task/no_answer_strict`` (unparseable golds are counted by `ProcessGRPOTrainer` in
    ``task/unparseable_gold``). Each check is limited to ``DEFAULT_TIMEOUT_S`` seconds (a timeout is 0.0) and works
    from any thread. Raises ValueError when ``answer`` is missing or its length differs from the number of
    completions.

    >>> outcome_reward(completions=[r"\\boxed{4}", "The answer is 5", "no idea"], answer=["4", "4", "4"])
    [1.0, 0.0, 0.0]
    """
    return _outcome_rewards("outcome_reward", "strict", completions, answer, kwargs)


class OutcomeReward:
    """``outcome_reward`` for an answer extraction mode (see ``extract_answer``) as a picklable TRL reward function
    whose ``__name__`` is ``outcome_reward_<mode>`` (so TRL logs ``rewards/outcome_reward_flexible/mean``) and whose
    no-answer metric is ``task/no_answer_<mode>``. Prefer ``get_outcome_reward``, which gives ``outcome_reward``
    itself for "strict". ``OutcomeReward("strict")`` (the default) is that same reward: named ``outcome_reward``,
    equal to it and hashed like it, so a trainer that looks up its outcome reward by equality finds either.

    >>> reward = OutcomeReward("flexible")
    >>> reward.__name__, reward(completions=["The total is $9{,}500$.", "no idea"], answer=["#### 9,500", "1"])
    ('outcome_reward_flexible', [1.0, 0.0])
    >>> OutcomeReward() == outcome_reward, OutcomeReward().__name__
    (True, 'outcome_reward')
    """

    def __init__(self, answer_extraction: str = "strict") -> None:
        self.answer_extraction = _check_extraction(answer_extraction)
        self.__name__ = "outcome_reward" if answer_extraction == "strict" else f"outcome_reward_{answer_extraction}"

    def __call__(
        self,
        prompts: Sequence[Any] | None = None,
        completions: Sequence[Any] | None = None,
        completion_ids: Sequence[Any] | None = None,
        *,
        answer: Sequence[str] | None = None,
        **kwargs: Any,
    ) -> list[float | None]:
        return _outcome_rewards(self.__name__, self.answer_extraction, completions, answer, kwargs)

    def __repr__(self) -> str:
        return f"OutcomeReward({self.answer_extraction!r})"

    def __eq__(self, other: object) -> bool:  # stateless: two rewards of one mode are the same reward
        if other is outcome_reward:
            return self.answer_extraction == "strict"
        return isinstance(other, OutcomeReward) and other.answer_extraction == self.answer_extraction

    def __hash__(self) -> int:
        strict = self.answer_extraction == "strict"
        return hash(outcome_reward) if strict else hash((OutcomeReward, self.answer_extraction))


def get_outcome_reward(answer_extraction: str = "strict") -> Callable[..., list[float | None]]:
    """The outcome reward for an answer extraction mode: "strict" gives ``outcome_reward`` itself (same object,
    same name), "flexible" an ``OutcomeReward`` named ``outcome_reward_flexible``. Raises ValueError for another
    mode.

    >>> get_outcome_reward() is outcome_reward, get_outcome_reward("flexible").__name__
    (True, 'outcome_reward_flexible')
    """
    _check_extraction(answer_extraction)
    return outcome_reward if answer_extraction == "strict" else OutcomeReward(answer_extraction)
