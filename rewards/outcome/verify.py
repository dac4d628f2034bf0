"""Gold parsing, answer checking and the outcome reward (part of `procrl.rewards.outcome`, docs/architecture.md
"Outcome"): ``parse_gold``, ``is_correct``, and the TRL reward functions built on the same check (``outcome_reward``,
``OutcomeReward``, ``get_outcome_reward``): 1.0 when the final answer matches the gold answer, 0.0 otherwise, None
when the gold answer cannot be parsed.

``parse_gold`` reads a gold answer: GSM8K solutions (``#### N``, ``<<48/2=24>>`` annotations ignored), plain
numbers, MATH-style LaTeX. Prose golds ("see figure", "N/A") are unparseable, never reward 1.0. ``is_correct``
extracts the completion's answer (`procrl.rewards.outcome.extract`) and compares it with math-verify
(`procrl.rewards.outcome.compare`), within a time limit (`procrl.rewards.outcome.deadline`).

Correctness metrics share the trainer's ``task/`` namespace: `procrl.trainers.grpo` logs ``task/accuracy`` and
``task/unparseable_gold`` (over all ranks, from the outcome reward's column or, without one, from its own outcome
check on the rows' ``answer``), the reward logs ``task/no_answer_<mode>``; each key has one producer.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from procrl.rewards.outcome import deadline
from procrl.rewards.outcome.extract import _check_extraction, _clean, _is_prose, _last_box, _value, extract_answer
from procrl.utils import check_reward_length, completion_to_text

__all__ = ["OutcomeReward", "get_outcome_reward", "is_correct", "outcome_reward", "parse_gold"]

_CALCULATOR = re.compile(r"<<[^<>\n]*>>")
_NO_ANSWER_METRIC = "task/no_answer_{mode}"  # one key per extraction mode: modes never mix in one metric


def _gold_value(gold: Any) -> str | None:
    """The gold answer as the string handed to math-verify, or None when it is not a usable answer."""
    if not isinstance(gold, str):
        return None
    text = _CALCULATOR.sub("", _clean(gold)).strip()
    if not text:
        return None
    if "####" in text:  # GSM8K: solution text, then "#### N"
        value = text.rsplit("####", 1)[1].strip()
        value = value.split("\n", 1)[0] if value else value
        return _checked_gold(_value(value, loose=True))
    found, content, braced = _last_box(text)
    if found:  # MATH-style full solution
        return _checked_gold(_value(content, loose=not braced))
    return _checked_gold(_value(text, loose=False))


def _checked_gold(value: str | None) -> str | None:
    if value is None or _is_prose(value):
        return None
    return value


def parse_gold(gold: str | None, *, timeout_s: float | None = None) -> list | None:
    """Parse a gold answer; return math-verify's parse result list, or None when it cannot be parsed.

    Accepts GSM8K solutions (text ending in ``#### N``; calculator annotations ``<<48/2=24>>`` are
    ignored, the sign is kept, ``$`` and 3-digit-group thousands separators are dropped, text after the
    number is ignored), plain numbers ("27", "27.0"), and MATH-style LaTeX (``\\frac{1}{2}``, ``50\\%``,
    ``\\dfrac{\\pi}{2}``, ``\\text{13}``, or a full solution whose last ``\\boxed{}`` holds the answer; MATH's
    brace-less ``$\\boxed 2$`` reads as ``\\boxed{2}``).
    Unparseable: None, "", prose ("see figure", "N/A"), a value longer than ``MAX_ANSWER_CHARS``
    characters, anything math-verify turns into no sympy object, and a parse that takes longer than
    ``timeout_s`` seconds (default ``DEFAULT_TIMEOUT_S``). Never raises for bad input.

    >>> parse_gold("Half of 48 is <<48/2=24>>24.\\n#### 24")
    [24, '24']
    >>> parse_gold(r"\\dfrac{\\pi}{2}")[0]
    pi/2
    >>> parse_gold("see figure") is None
    True
    """
    value = _gold_value(gold)
    if value is None:
        return None
    status, parsed = deadline._bounded("parse_gold", (value,), deadline._timeout(timeout_s))
    return parsed if status == "ok" else None


def is_correct(
    completion: Any, gold: str | None, *, timeout_s: float | None = None, answer_extraction: str = "strict"
) -> bool | None:
    """Whether the final answer of ``completion`` equals ``gold``; None iff the gold cannot be parsed.

    ``completion`` is a string or a TRL message list (anything else counts as an empty completion); its answer
    comes from ``extract_answer(..., answer_extraction=answer_extraction)`` ("strict" by default) and is compared
    with math-verify, so expressions compare as mathematics (``\\pi/2`` equals ``\\dfrac{\\pi}{2}``, ``x = 5``
    equals 5). When both sides are numbers (or tuples, finite sets or intervals of numbers) they are compared here,
    never with an absolute tolerance:

    * both rational (integers, fractions, decimals, which are the rational numbers they write): exactly equal.
      "0.5" equals ``\\frac{1}{2}``; ``\\frac{1}{2^{98}}`` does not equal ``\\frac{1}{2^{99}}``, nor 2e-30 1e-30, nor
      0.333333 ``\\frac{1}{3}`` (a rational gold can be written exactly, so an approximation is wrong);
    * a decimal against an irrational (exact) value: equal when the decimal is that value correctly rounded to the
      decimal's written number of decimal places, and the decimal has at least 5 significant digits. Against
      ``\\pi`` = 3.14159265...: "3.14159", "3.1416" and "-3.14159" (for ``-\\pi``) match; "3.14" (3 digits), "3.1415"
      (truncated), "3.1417" and "3.14160" (5 places, where pi rounds to 3.14159) do not; "1.41421" matches
      ``\\sqrt{2}``, "3141.59" and "3141.6" match ``1000\\pi``. Scientific notation counts the places of the value it
      writes ("3.14159e3" has 2); an expression with a decimal in it (``2.5\\pi``) is the exact value it writes;
    * two exact expressions with an irrational value: equal at 50 significant digits (relative 1e-30), so
      ``\\sqrt{8}`` equals ``2\\sqrt{2}`` but ``\\frac{355}{113}`` is not ``\\pi`` and ``e^{-101}`` is not ``e^{-100}``.

    X\\% also equals a bare X (as in math-verify: ``50\\%`` equals both 50 and 0.5). A completion without an answer,
    or a comparison that takes longer than ``timeout_s`` seconds (default ``DEFAULT_TIMEOUT_S``), is False. Safe to
    call from any thread; never raises for bad input (ValueError for an unknown ``answer_extraction``).

    >>> is_correct(r"Half of one is \\boxed{\\frac{1}{2}}", "0.5")
    True
    >>> is_correct([{"role": "assistant", "content": "The answer is 3."}], "#### -3")
    False
    >>> is_correct("The answer is 3.", "see figure") is None
    True
    >>> is_correct(r"\\boxed{\\frac{1}{2^{98}}}", r"\\frac{1}{2^{99}}"), is_correct(r"\\boxed{3.1416}", r"\\pi")
    (False, True)
    >>> is_correct(r"\\boxed{3.14}", r"\\pi"), is_correct(r"\\boxed{3.1415}", r"\\pi")
    (False, False)
    >>> is_correct("The total is 12.", "12"), is_correct("The total is 12.", "12", answer_extraction="flexible")
    (False, True)
    """
    _check_extraction(answer_extraction)
    timeout_s = deadline._timeout(timeout_s)
    value = _gold_value(gold)
    if value is None:
        return None
    status, ok = deadline._bounded("gold_ok", (value,), timeout_s)
    if status != "ok" or not ok:
        return None
    return _answer_matches(
        value, extract_answer(completion_to_text(completion), answer_extraction=answer_extraction), timeout_s
    )


def _answer_matches(gold_value: str, answer: str | None, timeout_s: float) -> bool:
    if answer is None:
        return False
    status, ok = deadline._bounded("verify", (gold_value, answer), timeout_s)
    return status == "ok" and ok is True


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
