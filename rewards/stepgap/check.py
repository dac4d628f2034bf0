"""The stage A-C judge request of the StepGap verifier (docs/architecture.md "StepGap"; arXiv 2605.24733): the reply schema
`StepCheck` (strict, bounded strings), the per-step schema whose quote is a choice among the step's candidate spans
(`step_check_schema`), and the prompt (`check_messages`). The tree that reads the replies is
`procrl.rewards.stepgap.verifier`.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

from procrl.rewards.stepgap.trace import Passage, TraceStep

__all__ = [
    "StepCheck",
    "step_check_schema",
    "check_messages",
    "CHECK_SYSTEM_PROMPT",
    "CHECK_REPLY_SHAPE",
    "FIELD_MAX_CHARS",
    "JUDGE_MAX_TOKENS",
    "REASON_MAX_CHARS",
    "QUOTE_MAX_CHARS",
]

# Bounds of the free-text fields, in characters: an unbounded one made constrained small judges loop until the token
# limit (issue 15: xgrammar 0/8 valid A-C replies at 160 tokens, 8/8 with maxLength 120 on the free-text field).
# A looping field runs to its bound, at up to one token per character (digits are single tokens: "2022 2022 ..."):
# with 80/120 one of 96 shipped steps looped through entity, value and bridge and was cut at 256 tokens. The longest
# reply is ~130 characters of keys and booleans + a quote (<= 20 words, ~150 characters) + 3 x 48 + 96 = ~520, so
# the commands' reply budgets are 512 tokens (a loop costs time, not a label).
JUDGE_MAX_TOKENS = 512  # the StepGap judge's reply budget when `judge_max_tokens` is null (procrl.judges.JudgeArguments)
FIELD_MAX_CHARS = 48
REASON_MAX_CHARS = 96
QUOTE_MAX_CHARS = 300  # a free quote (constrain_quotes=False): 20 words of up to 15 characters


class StepCheck(BaseModel):
    """The judge's reply for stages A-C of one step, in the field order of the prompt's reply shape.

    Strict (`ConfigDict(strict=True)`): a field of the wrong JSON type is a schema mismatch, never coerced (0/1,
    "true" or 1.0 are not booleans; 3 is not a string); extra keys and strings over their bound are rejected too.
    Required: the four booleans, `quote` (what the tree decides on; "" is the explicit "no quote") and `entity` (stage
    E's premise for an inference step is the earlier evidence that names it; optional, a constrained judge closed the
    object right after the quote on every one of the 96 shipped steps, so stage E never narrowed). Optional with
    default "": `value`, `bridge`, `reason` (descriptive).

    Attributes:
        off_target: A: the step targets another entity, relation or scope than the question needs.
        abstains: B: the step commits to no fact (unknown / cannot be determined / still needs to search).
        abstention_accurate: B: the evidence indeed does not settle the point (only read when `abstains`).
        entity_match: C: the evidence is about the entity the step's claim is about.
        quote: C: 5-20 words copied verbatim from the evidence that bear on the claim; "" for none (at most
            `QUOTE_MAX_CHARS` characters; `step_check_schema` narrows it to the step's candidate spans).
        entity: the entity the claim is about ("" if none; at most `FIELD_MAX_CHARS` characters).
        value: the value the claim asserts ("" if none; at most `FIELD_MAX_CHARS` characters).
        bridge: an intermediate entity the claim relies on that the evidence does not cover ("" if none; at most
            `FIELD_MAX_CHARS` characters).
        reason: a short justification (at most `REASON_MAX_CHARS` characters).
    """

    model_config = ConfigDict(strict=True, extra="forbid")

    off_target: bool
    abstains: bool
    abstention_accurate: bool
    entity_match: bool
    quote: str = Field(max_length=QUOTE_MAX_CHARS)
    entity: str = Field(max_length=FIELD_MAX_CHARS)
    value: str = Field("", max_length=FIELD_MAX_CHARS)
    bridge: str = Field("", max_length=FIELD_MAX_CHARS)
    reason: str = Field("", max_length=REASON_MAX_CHARS)


@functools.lru_cache(maxsize=4096)
def step_check_schema(candidates: tuple[str, ...]) -> type[StepCheck]:
    """The `StepCheck` of one step whose `quote` is a `Literal` of `candidates` plus "" (a JSON-schema enum); same
    model name, fields and order, so the prompt's shape still describes it. Cached per candidate tuple.

    Raises:
        ValueError: `candidates` is not a tuple of non-empty strings.
    """
    if not isinstance(candidates, tuple) or not all(isinstance(c, str) and c for c in candidates):
        raise ValueError(f"step_check_schema: candidates must be a tuple of non-empty strings, got {candidates!r}")
    choices = (*candidates, "")
    return create_model("StepCheck", __base__=StepCheck, __module__=__name__, quote=(Literal[choices], ...))


CHECK_SYSTEM_PROMPT = """You audit one step of a trace in which a model answers a multi-hop question by searching.
You get the QUESTION, the EVIDENCE passages the model had read before the step, and the STEP itself (the model's
claim, followed by its next search query or its final answer). Judge the claim only against the evidence.

Return one JSON object with exactly these keys:
"off_target": true if the step pursues a different entity, relation or scope than the question asks for;
"abstains": true if the step asserts no fact (it says the answer is unknown, cannot be determined, or must be searched);
"abstention_accurate": if abstains is true, true when the evidence really does not settle the point, false when it
does; false if abstains is false;
"entity_match": true if the evidence is about the same entity as the step's claim, false if it is about other things
or there is no evidence;
"quote": 5 to 20 consecutive words copied exactly from the evidence that are most relevant to the claim, or "";
"entity": the entity the claim is about;
"value": the value (name, date, place, number) the claim asserts, or "";
"bridge": an intermediate entity the claim depends on that the evidence does not mention, or "";
"reason": one short sentence.
Reply with the JSON object only."""


# The reply template repeated at the end of the request: small judges copy a shape they have just read.
CHECK_REPLY_SHAPE = (
    '{"off_target": false, "abstains": false, "abstention_accurate": false, "entity_match": true, '
    '"quote": "<5-20 words copied from the evidence>", "entity": "<entity>", "value": "<value>", "bridge": "", '
    '"reason": "<one sentence>"}'
)


def check_messages(question: str, evidence: Sequence[Passage], step: TraceStep, *, max_passage_chars: int = 1500):
    """The chat request for stages A-C of one step (system prompt `CHECK_SYSTEM_PROMPT` + one user message)."""
    if evidence:
        lines = [f"[{i}] {p.title}: {_clip(p.text, max_passage_chars)}" for i, p in enumerate(evidence, 1)]
        evidence_text = "\n".join(lines)
    else:
        evidence_text = "(no evidence retrieved yet)"
    user = (
        f"QUESTION: {question}\n\nEVIDENCE:\n{evidence_text}\n\n"
        f"STEP ({'final answer' if step.kind == 'conclusion' else 'search step'}):\n{step.text.strip()}\n\n"
        f"Reply with only the JSON object, in this shape:\n{CHECK_REPLY_SHAPE}"
    )
    return [{"role": "system", "content": CHECK_SYSTEM_PROMPT}, {"role": "user", "content": user}]


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit].rstrip() + " ..."
