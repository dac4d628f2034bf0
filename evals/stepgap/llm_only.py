"""An LLM-only StepGap verifier and its prompt ablations: the baseline the hybrid tree is compared with (StepGap, arXiv
2605.24733, "decomposability": removing any stage of the hybrid verifier hurts, while removing three of the four
components of the LLM-only baseline improves it; docs/architecture.md "StepGap").

ONE judge call per step labels it directly with one of the typed labels NONE / CC / IE / MB (the label set of
`procrl.rewards.stepgap.verifier`, with definitions that restate its decision tree in words: `LABEL_DEFINITIONS`).
The reply schema is `LLMOnlyLabel` (strict, `label` a closed choice), so a backend that enforces it (vLLM structured
outputs, a constrained in-process judge) always returns a parseable label. A reply that still fails (timeout, invalid
JSON, a label outside the four) becomes ERROR, the verifier's neutral label ("no gap flagged" in
`procrl.evals.stepgap.evaluate.compute_metrics`, which counts it), with the judge's unscored reason; never a crash.

The prompt has four named parts (`PARTS`), which the ablations drop one at a time (`VARIANTS`):

    definitions  the label definitions (without them the prompt names the four labels only)
    evidence     the passages retrieved before the step
    history      the earlier steps of the trace (their text: reasoning and queries)
    question     the multi-hop question

The task line, the step itself and the reply instruction are always there. `LLMOnlyVerifier.judge_variants` sends
the requests of every step of every variant in ONE `judge.judge` call (concurrent on an OpenAI-compatible judge).
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from procrl.rewards.stepgap.trace import Passage, StepLabel, Trace, TraceStep
from procrl.utils import get_logger

logger = get_logger(__name__)

__all__ = [
    "PARTS",
    "VARIANTS",
    "LABEL_DEFINITIONS",
    "LLMOnlyLabel",
    "LLMOnlyVerifier",
    "llm_only_messages",
    "prompt_parts",
    "variant_parts",
]

PARTS = ("definitions", "evidence", "history", "question")


def variant_parts(ablation: bool = True) -> dict[str, tuple[str, ...]]:
    """The LLM-only variants: {"LLM-only": all `PARTS`} and, with `ablation`, "LLM-only -<part>" for each part
    (that part dropped), in `PARTS` order."""
    out = {"LLM-only": PARTS}
    if ablation:
        out |= {f"LLM-only -{part}": tuple(p for p in PARTS if p != part) for part in PARTS}
    return out


VARIANTS = variant_parts()


class LLMOnlyLabel(BaseModel):
    """The LLM-only judge's reply: exactly {"label": "NONE" | "CC" | "IE" | "MB"}; strict (no other spelling, no
    extra key), so an enforcing backend can only produce one of the four strings."""

    model_config = ConfigDict(strict=True, extra="forbid")
    label: Literal["NONE", "CC", "IE", "MB"]


TASK_PROMPT = (
    "You audit one step of a trace in which a model answers a multi-hop question by searching. The step is the "
    "model's claim, followed by its next search query or its final answer. Give the step exactly one label: NONE, CC, "
    "IE or MB."
)

# The hybrid tree's outcomes in words (procrl.rewards.stepgap.verifier): A/B -> CC, C -> IE, D neutral -> MB,
# D contradiction -> CC, E failure -> IE, entailment or an accurate abstention -> NONE.
LABEL_DEFINITIONS = """Label definitions:
- NONE (no gap): the evidence supports the step's claim, or the step rightly says that the evidence does not settle
  the point yet.
- CC (contradicted claim; the repair is to retract it): the evidence contradicts the claim, or the step pursues a
  different entity, relation or scope than the question asks for, or it says the point cannot be determined although
  the evidence settles it.
- IE (irrelevant evidence; the repair is to search again): the evidence does not address the entity or relation the
  claim is about (it is about other things, or there is no evidence).
- MB (missing bridge; the repair is to search for the bridge): the evidence is about the right entity but does not
  yet imply the claim; an intermediate fact is missing."""

REPLY_INSTRUCTION = (
    'Reply with one JSON object and nothing else: {"label": "NONE"} or {"label": "CC"} or {"label": "IE"} or '
    '{"label": "MB"}.'
)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit].rstrip() + " ..."


def prompt_parts(
    question: str, step: TraceStep, history: Sequence[TraceStep], *, max_passage_chars: int = 1500
) -> dict[str, str]:
    """The text of each named part of one step's prompt, keyed by `PARTS`.

    Args:
        question: the trace's question.
        step: the step to label; its `evidence` (the passages retrieved before it) is the evidence part.
        history: the trace's steps before `step`, in order (their `text`).
        max_passage_chars: each passage is cut to this many characters (as in the hybrid's A-C prompt).
    """
    evidence: Sequence[Passage] = step.evidence
    if evidence:
        passages = "\n".join(f"[{i}] {p.title}: {_clip(p.text, max_passage_chars)}" for i, p in enumerate(evidence, 1))
    else:
        passages = "(no evidence retrieved yet)"
    if history:
        earlier = "\n".join(f"[step {i}] {s.text.strip()}" for i, s in enumerate(history, 1))
    else:
        earlier = "(none: this is the first step)"
    return {
        "definitions": LABEL_DEFINITIONS,
        "evidence": f"EVIDENCE:\n{passages}",
        "history": f"EARLIER STEPS:\n{earlier}",
        "question": f"QUESTION: {question}",
    }


def llm_only_messages(
    question: str,
    step: TraceStep,
    history: Sequence[TraceStep],
    *,
    parts: Iterable[str] = PARTS,
    max_passage_chars: int = 1500,
) -> list[dict]:
    """The chat request for one step: a system message (the task line, then the definitions when kept, then the reply
    instruction) and a user message (question, evidence, earlier steps, as kept, then the step).

    Raises:
        ValueError: a part not in `PARTS`.
    """
    parts = frozenset(parts)
    if bad := parts - set(PARTS):
        raise ValueError(f"llm_only_messages: unknown prompt parts {sorted(bad)}; choose from {PARTS}")
    text = prompt_parts(question, step, history, max_passage_chars=max_passage_chars)
    system = [TASK_PROMPT, *([text["definitions"]] if "definitions" in parts else []), REPLY_INSTRUCTION]
    blocks = [text[name] for name in ("question", "evidence", "history") if name in parts]
    kind = "final answer" if step.kind == "conclusion" else "search step"
    blocks.append(f"STEP ({kind}):\n{step.text.strip()}\n\n{REPLY_INSTRUCTION}")
    return [{"role": "system", "content": "\n\n".join(system)}, {"role": "user", "content": "\n\n".join(blocks)}]


class LLMOnlyVerifier:
    """Typed step labels (NONE/CC/IE/MB, ERROR when unscored) from one judge call per step; module docstring.

    Args:
        judge: a `procrl.judges.Judge` (the same judge as the hybrid verifier's stages A-C).
        max_passage_chars: each passage is cut to this many characters in the prompt.
        progress: show the judge's tqdm bar.

    Raises:
        ValueError: `max_passage_chars` < 1.
    """

    def __init__(self, judge: Any, *, max_passage_chars: int = 1500, progress: bool = True):
        if max_passage_chars < 1:
            raise ValueError(f"LLMOnlyVerifier: max_passage_chars must be >= 1, got {max_passage_chars}")
        self.judge = judge
        self.max_passage_chars = max_passage_chars
        self.progress = progress

    def requests(self, trace: Trace, parts: Iterable[str] = PARTS) -> list[list[dict]]:
        """One chat request per step of `trace` (`llm_only_messages` with the steps before it as history)."""
        parts = tuple(parts)
        return [
            llm_only_messages(
                trace.question, step, trace.steps[:i], parts=parts, max_passage_chars=self.max_passage_chars
            )
            for i, step in enumerate(trace.steps)
        ]

    def judge_variants(
        self, traces: Sequence[Trace], variants: Mapping[str, Iterable[str]] | None = None
    ) -> dict[str, list[list[Any]]]:
        """The judge results of every variant, `{variant: results[trace][step]}`, from ONE `judge.judge` call over
        all steps of all variants (default variants: `VARIANTS`).

        Raises:
            ValueError: a variant with a part not in `PARTS`.
        """
        variants = VARIANTS if variants is None else variants
        requests, layout = [], []
        for name, parts in variants.items():
            parts = tuple(parts)
            for t, trace in enumerate(traces):
                for j, messages in enumerate(self.requests(trace, parts)):
                    requests.append(messages)
                    layout.append((name, t, j))
        flat = (
            self.judge.judge(requests, LLMOnlyLabel, desc="StepGap LLM-only", progress=self.progress)
            if requests
            else []
        )
        out: dict[str, list[list[Any]]] = {name: [[None] * len(t.steps) for t in traces] for name in variants}
        for (name, t, j), result in zip(layout, flat, strict=True):
            out[name][t][j] = result
        return out

    @staticmethod
    def labels(results: Sequence[Sequence[Any]]) -> list[list[StepLabel]]:
        """The `StepLabel` of each judge result `[trace][step]`: the reply's label, or ERROR ("judge unscored:
        <reason>") for an unscored result (or one whose value is not an `LLMOnlyLabel`)."""
        out = []
        for row in results:
            labels = []
            for result in row:
                value = getattr(result, "value", None)
                if isinstance(value, LLMOnlyLabel):
                    labels.append(StepLabel(value.label, reason="LLM-only"))
                else:
                    reason = getattr(result, "unscored", None) or "no label"
                    labels.append(StepLabel("ERROR", reason=f"judge unscored: {reason}"))
            out.append(labels)
        return out

    @staticmethod
    def unscored(results: Sequence[Sequence[Any]]) -> dict[str, int]:
        """{reason: count} of the results `labels` turns into ERROR."""
        counts = collections.Counter(
            getattr(r, "unscored", None) or "no label"
            for row in results
            for r in row
            if not isinstance(getattr(r, "value", None), LLMOnlyLabel)
        )
        return dict(counts)

    def verify_many(self, traces: Sequence[Trace], *, parts: Iterable[str] = PARTS) -> list[list[StepLabel]]:
        """Labels for every step of every trace with the prompt `parts` (one judge call)."""
        return self.labels(self.judge_variants(traces, {"run": tuple(parts)})["run"])

    def __repr__(self) -> str:
        return f"LLMOnlyVerifier(judge={self.judge!r})"
