"""Exact match for open-domain / multi-hop QA (docs/architecture.md "Outcome checking"; SQuAD v1.1's official metric).

`normalize_answer` is SQuAD's normalisation: lower case, punctuation removed, the articles "a", "an", "the"
removed as words, whitespace collapsed. `exact_match(prediction, golds)` is 1.0 when the normalised prediction
equals the normalised form of ANY gold alias (max over aliases), else 0.0. SQuAD's normalisation erases a gold that
is only an article ("A", "The": multiple-choice letters, one-word titles); for such a gold the prediction and the
gold are compared without dropping articles (case-folded, punctuation removed, whitespace collapsed), so "a" matches
"A" and "B" does not. A gold that is empty even then ("", "...") never matches anything, and an empty prediction
never matches, so a degenerate gold cannot hand out reward.

`em_reward` is the TRL reward function for search rollouts: the prediction is the `<answer>…</answer>` of the
completion, parsed by `procrl.rewards.stepgap.trace.parse_trace` (so a `<search>` inside the answer, an
unclosed answer or no answer give 0.0); the prompt is never searched, so an example answer in the instruction
can never be credited.

    >>> exact_match("Black.", ["black"])
    1.0
    >>> exact_match("not Mark Twain", ["Mark Twain"])
    0.0
    >>> exact_match("(A)", ["A"]), exact_match("B", ["A"])
    (1.0, 0.0)
    >>> em_reward(prompts=["q"], completions=["<answer> The Beatles </answer>"], completion_ids=[[1]],
    ...           golden_answers=[["Beatles", "Fab Four"]])
    [1.0]
"""

from __future__ import annotations

import re
import string
from collections.abc import Sequence
from typing import Any

from procrl.rewards.stepgap.trace import parse_trace
from procrl.utils import completion_to_text

__all__ = ["GOLD_COLUMN", "em_reward", "exact_match", "gold_list", "normalize_answer"]

GOLD_COLUMN = "golden_answers"  # the dataset column em_reward reads (procrl.data_builders.search_qa.load_qa_questions)

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = set(string.punctuation)


def normalize_answer(text: str) -> str:
    """SQuAD normalisation: lower case, drop punctuation, drop the articles a/an/the, collapse whitespace.

    >>> normalize_answer("  The  Eiffel-Tower! ")
    'eiffeltower'
    """
    return " ".join(_ARTICLES.sub(" ", _fold(text)).split())


def _fold(text: str) -> str:
    """Lower case, punctuation removed (SQuAD's steps before dropping articles)."""
    return "".join(ch for ch in str(text).lower() if ch not in _PUNCTUATION)


def _fold_spaces(text: str) -> str:
    """Case-folded, punctuation removed, whitespace collapsed; articles kept (for golds that are only articles)."""
    return " ".join(_fold(text).casefold().split())


def gold_list(golds: Any) -> list[str]:
    """A gold column value -> list of aliases: a string, a list/tuple of strings, or None (-> [])."""
    if golds is None:
        return []
    if isinstance(golds, str):
        return [golds]
    if isinstance(golds, Sequence):
        return [str(g) for g in golds if g is not None]
    return [str(golds)]


def exact_match(prediction: str | None, golds: Any) -> float:
    """1.0 if normalize(prediction) equals normalize(g) for some alias g with a non-empty normal form, else 0.0.

    A gold whose SQuAD normal form is empty ("A", "The") is compared without dropping articles instead: case-folded,
    punctuation removed, whitespace collapsed ("(a)" matches "A"; "B" does not). Nothing ever matches a gold that is
    empty even then, and an empty prediction never matches.

    Args:
        prediction: the predicted answer text; None (no answer) gives 0.0.
        golds: one gold string or a list of aliases.
    """
    if prediction is None:
        return 0.0
    pred = normalize_answer(prediction)
    for gold in gold_list(golds):
        norm = normalize_answer(gold)
        if norm:
            if norm == pred:
                return 1.0
        elif (folded := _fold_spaces(gold)) and folded == _fold_spaces(prediction):
            return 1.0
    return 0.0


def em_reward(prompts, completions, completion_ids=None, *, golden_answers=None, **kwargs) -> list[float | None]:
    """TRL reward: exact match of the completion's `<answer>` against the column `golden_answers`.

    Args:
        prompts: unused (the answer is never read from the prompt).
        completions: strings or message lists (TRL); only the completion is parsed.
        completion_ids: unused.
        golden_answers: the dataset column, one gold string or list of aliases per completion. When the rollout
            returned `search_trace` (a `Trace` per completion), its parsed answer is used; otherwise the completion
            text is parsed.

    Returns:
        1.0 / 0.0 per completion; None where the gold list is empty or missing (not applicable).

    Raises:
        ValueError: `golden_answers` missing entirely, or of the wrong length.
    """
    if golden_answers is None:
        raise ValueError(f"em_reward needs the dataset column '{GOLD_COLUMN}' (list of gold aliases per question).")
    if len(golden_answers) != len(completions):
        raise ValueError(f"em_reward: {len(golden_answers)} gold entries for {len(completions)} completions.")
    traces = kwargs.get("search_trace")
    rewards: list[float | None] = []
    for i, (completion, golds) in enumerate(zip(completions, golden_answers, strict=True)):
        if not gold_list(golds):
            rewards.append(None)
            continue
        trace = traces[i] if traces is not None else None
        answer = trace.answer if trace is not None else parse_trace("", completion_to_text(completion)).answer
        rewards.append(exact_match(answer, golds))
    return rewards
