"""FRS step 3 (part of `procrl.rewards.frs`): the judge's rubric and request, and the reasoning score.

An LLM judge (`procrl.judges`) gives faithfulness, utility, coherence and factuality, integers 1-5, given the
problem, the trace, the gold answer and {"final_correct": bool}; the rubric is ours (`RUBRIC`).
RS = (sum - 4) / 16 * 100, in [0, 100].
"""

from __future__ import annotations

import json

from pydantic import BaseModel, Field

__all__ = ["DIMENSIONS", "REPLY_FORMAT", "RUBRIC", "ReasoningJudgement", "judge_messages", "reasoning_score"]

DIMENSIONS = ("faithfulness", "utility", "coherence", "factuality")


class ReasoningJudgement(BaseModel):
    """What the judge returns for one trace: four integer scores, 1 (very poor) to 5 (excellent)."""

    faithfulness: int = Field(ge=1, le=5, description="steps follow from the problem and each other")
    utility: int = Field(ge=1, le=5, description="steps advance the solution; calculations are right")
    coherence: int = Field(ge=1, le=5, description="one connected, ordered argument")
    factuality: int = Field(ge=1, le=5, description="uses the problem's facts and numbers correctly")


RUBRIC = """You grade the written reasoning of a student who solved a problem. Grade the process, not only the \
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

The reference answer and the correctness check of the student's final answer are there to help you check the \
work; do not penalise a valid method that differs from the usual one.
Reply with only a JSON object of this form, nothing else:
{"faithfulness": <1-5>, "utility": <1-5>, "coherence": <1-5>, "factuality": <1-5>}"""


# Repeated at the end of the user message. Probed once with the 135M default judge on traces of a GRPO run: the rubric
# alone gave no valid JSON reply on the 4 traces tried (it answered in prose); with this closing line, 4 of 12 traces
# got valid JSON. A small judge stays unreliable: FRS drops and counts the unscored traces.
REPLY_FORMAT = (
    "Reply with only this JSON object, filled in with integers from 1 to 5:\n"
    '{"faithfulness": _, "utility": _, "coherence": _, "factuality": _}'
)


def judge_messages(
    problem: str, trace: str, gold: str | None, final_correct: bool | None, *, max_trace_chars: int = 8000
) -> list[dict[str, str]]:
    """The chat request for one trace: `RUBRIC` as the system message; problem, reference answer,
    `{"final_correct": ...}` (null when the gold cannot be parsed), the trace and `REPLY_FORMAT` as the user message.

    A GSM8K gold solution is shown as its final value (the text after the last "####"), so the judge does not
    grade against one reference method. Traces longer than `max_trace_chars` characters keep their head and
    tail around a marked cut.
    """
    if len(trace) > max_trace_chars:
        half = max_trace_chars // 2
        trace = f"{trace[:half]}\n[... {len(trace) - 2 * half} characters cut ...]\n{trace[-half:]}"
    user = (
        f"Problem:\n{problem.strip()}\n\n"
        f"Reference final answer: {_gold_text(gold)}\n\n"
        f"Correctness check of the student's final answer: {json.dumps({'final_correct': final_correct})}\n\n"
        f"Student's reasoning:\n<<<\n{trace.strip()}\n>>>\n\n{REPLY_FORMAT}"
    )
    return [{"role": "system", "content": RUBRIC}, {"role": "user", "content": user}]


def _gold_text(gold: str | None) -> str:
    if gold is None or not str(gold).strip():
        return "(not available)"
    text = str(gold)
    if "####" in text:
        text = text.rsplit("####", 1)[1]
    return text.strip()[:500]


def reasoning_score(judgement: ReasoningJudgement) -> float:
    """RS = (faithfulness + utility + coherence + factuality - 4) / 16 * 100, in [0, 100]."""
    total = sum(getattr(judgement, name) for name in DIMENSIONS)
    return (total - 4) * 100 / 16
