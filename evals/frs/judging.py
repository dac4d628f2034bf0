"""FRS step 3 (part of `procrl.evals.frs`): the judge's rubric and request, and the reasoning scores.

An LLM judge (`procrl.judges`) gives faithfulness, utility, coherence and factuality, integers 1-5, given the
problem, the trace, the gold answer and (unless `show_final_correct=False`, the flag ablation) {"final_correct":
bool}; the rubric is ours (`RUBRIC`). The reply is validated strictly (`ReasoningJudgement`: `true`, `"3"`, `3.0`,
`0`, `6`, a missing or an extra key are all `schema_mismatch`, never coerced into a score; a repeated key is
`duplicate_key`, never scored by key order).

Two reasoning scores, both in [0, 100]:

- RS = (sum of the four validated scores - 4) / 16 * 100: the scores the judge wrote (with greedy decoding, the
  argmax of each score's distribution).
- RS_expected = (sum of the four expected scores - 4) / 16 * 100, where a dimension's expected score is
  sum_v p(v) * v over its values 1-5 (G-Eval), p the judge's probabilities at the token where the reply chose that
  score (`JudgeResult.probs`, read by `procrl.judges.choices`; a probability, not a log-probability). It exists only
  when the backend returned log-probs for all four dimensions (`expected_scores` returns None otherwise).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from procrl.judges.choices import expected_value

__all__ = [
    "DIMENSIONS",
    "JUDGE_MAX_TOKENS",
    "REPLY_FORMAT",
    "RUBRIC",
    "RUBRIC_WITHOUT_CORRECTNESS",
    "ReasoningJudgement",
    "expected_scores",
    "judge_messages",
    "reasoning_score",
]

DIMENSIONS = ("faithfulness", "utility", "coherence", "factuality")
# the FRS judge's reply budget when `judge_max_tokens` is null (procrl.judges.JudgeArguments): the JSON of the four
# scores is ~30 tokens, so 96 leaves room without letting a looping judge run long
JUDGE_MAX_TOKENS = 96

# A score: a JSON integer from 1 to 5, nothing else (strict: no bool, no numeric string, no float such as 3.0).
Score = Annotated[int, Field(strict=True, ge=1, le=5)]


class ReasoningJudgement(BaseModel):
    """What the judge returns for one trace: four integer scores, 1 (very poor) to 5 (excellent).

    Strict (`strict=True, extra="forbid"`), in Python mode (`model_validate`, used by
    `procrl.judges.parse.parse_judgement` on the decoded JSON) and in JSON mode (`model_validate_json`, the
    constrained backends' path) alike: a boolean, a numeric string, a float (even 3.0), a value outside 1-5, a
    missing or an extra key raise `pydantic.ValidationError` (the judge clients report it as `schema_mismatch`). The
    JSON schema sent to the judge has integer fields with minimum 1 / maximum 5 and `additionalProperties: false`.
    """

    model_config = ConfigDict(strict=True, extra="forbid")

    faithfulness: Score = Field(description="steps follow from the problem and each other")
    utility: Score = Field(description="steps advance the solution; calculations are right")
    coherence: Score = Field(description="one connected, ordered argument")
    factuality: Score = Field(description="uses the problem's facts and numbers correctly")


_RUBRIC_HEAD = """You grade the written reasoning of a student who solved a problem. Grade the process, not only the \
final answer: a right answer reached through broken reasoning gets low scores, and one small slip in otherwise \
sound work gets middle scores.

Give four integer scores from 1 (very poor) to 5 (excellent):
- faithfulness: every step follows from the problem and from the earlier steps; no unexplained jumps, no result \
that appears from nowhere, and the final answer is what the written steps actually produce.
- utility: every step moves the solution forward and its calculations are right; no filler, detours, repeated \
text or loops.
- coherence: the steps come in a sensible order and read as one connected argument, without contradictions or \
sudden changes of subject.
- factuality: the numbers, conditions and facts used are the ones the problem gives (or common knowledge); \
nothing is invented or misread.

"""
_RUBRIC_TAIL = """ there to help you check the work; do not penalise a valid method that differs from the usual one.
Reply with only a JSON object of this form, nothing else:
{"faithfulness": <1-5>, "utility": <1-5>, "coherence": <1-5>, "factuality": <1-5>}"""

# The system message; `RUBRIC_WITHOUT_CORRECTNESS` is the same without the mention of the correctness check (the
# request built with `show_final_correct=False` does not hold one).
RUBRIC = (
    _RUBRIC_HEAD + "The reference answer and the correctness check of the student's final answer are" + _RUBRIC_TAIL
)
RUBRIC_WITHOUT_CORRECTNESS = _RUBRIC_HEAD + "The reference answer is" + _RUBRIC_TAIL


# Repeated at the end of the user message. Probed once with the 135M default judge on traces of a GRPO run: the rubric
# alone gave no valid JSON reply on the 4 traces tried (it answered in prose); with this closing line, 4 of 12 traces
# got valid JSON. A small judge stays unreliable: FRS drops and counts the unscored traces.
REPLY_FORMAT = (
    "Reply with only this JSON object, filled in with integers from 1 to 5:\n"
    '{"faithfulness": _, "utility": _, "coherence": _, "factuality": _}'
)


def judge_messages(
    problem: str,
    trace: str,
    gold: str | None,
    final_correct: bool | None,
    *,
    max_trace_chars: int = 8000,
    show_final_correct: bool = True,
) -> list[dict[str, str]]:
    """The chat request for one trace: `RUBRIC` as the system message; problem, reference answer,
    `{"final_correct": ...}` (null when the gold cannot be parsed), the trace and `REPLY_FORMAT` as the user message.

    With `show_final_correct=False` (the ablation "does the judge use more than the flag?") the correctness line is
    left out and the system message is `RUBRIC_WITHOUT_CORRECTNESS`; everything else is the same.

    A GSM8K gold solution is shown as its final value (the text after the last "####"), so the judge does not
    grade against one reference method. Traces longer than `max_trace_chars` characters keep their head and
    tail around a marked cut.
    """
    if len(trace) > max_trace_chars:
        half = max_trace_chars // 2
        trace = f"{trace[:half]}\n[... {len(trace) - 2 * half} characters cut ...]\n{trace[-half:]}"
    check = ""
    if show_final_correct:
        check = f"Correctness check of the student's final answer: {json.dumps({'final_correct': final_correct})}\n\n"
    user = (
        f"Problem:\n{problem.strip()}\n\n"
        f"Reference final answer: {_gold_text(gold)}\n\n"
        f"{check}"
        f"Student's reasoning:\n<<<\n{trace.strip()}\n>>>\n\n{REPLY_FORMAT}"
    )
    system = RUBRIC if show_final_correct else RUBRIC_WITHOUT_CORRECTNESS
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def _gold_text(gold: str | None) -> str:
    if gold is None or not str(gold).strip():
        return "(not available)"
    text = str(gold)
    if "####" in text:
        text = text.rsplit("####", 1)[1]
    return text.strip()[:500]


def reasoning_score(scores: ReasoningJudgement | Mapping[str, float]) -> float:
    """RS = (faithfulness + utility + coherence + factuality - 4) / 16 * 100, in [0, 100].

    Args:
        scores: a validated judgement (RS), or the four scores by name, e.g. the expected scores of
            `expected_scores` (RS_expected; floats in [1, 5]).

    Raises:
        KeyError: a mapping without one of the four `DIMENSIONS`.
    """
    if isinstance(scores, ReasoningJudgement):
        scores = scores.model_dump()
    total = math.fsum(scores[name] for name in DIMENSIONS)
    return (total - 4) * 100 / 16


# The score keys `procrl.judges.choices` gives a 1-5 integer field (`value_key(v)` = `json.dumps(v)`).
_SCORE_KEYS = frozenset(json.dumps(v) for v in range(1, 6))


def expected_scores(probs: Mapping[str, Mapping[str, float]] | None) -> dict[str, float] | None:
    """The expected score of each dimension, sum_v p(v) * v (G-Eval), from a judgement's choice probabilities.

    Args:
        probs: `JudgeResult.probs`: `{dimension: {"1": p, ..., "5": p}}`, probabilities (not log-probabilities)
            over the values the backend's top log-probs covered, renormalised to sum to 1
            (`procrl.judges.choices.choice_probabilities`); None when the backend gave no log-probs.

    Returns:
        `{dimension: expected score in [1, 5]}` for the four `DIMENSIONS`, or None (no made-up value) when `probs`
        is None, a dimension is missing or empty, a key is not one of "1".."5", or a probability is negative or
        not finite.
    """
    if not probs:
        return None
    out = {}
    for name in DIMENSIONS:
        dist = probs.get(name)
        if not dist or not set(dist) <= _SCORE_KEYS:
            return None
        if not all(isinstance(p, (int, float)) and math.isfinite(p) and p >= 0 for p in dist.values()):
            return None
        total = math.fsum(dist.values())
        if total <= 0:
            return None
        value = expected_value({key: p / total for key, p in dist.items()})  # renormalised (a no-op if it already is)
        if not 1.0 - 1e-9 <= value <= 5.0 + 1e-9:  # renormalised probabilities over 1..5 cannot leave [1, 5]
            return None
        out[name] = min(5.0, max(1.0, value))
    return out
