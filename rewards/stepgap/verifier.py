"""The StepGap step verifier: typed evidence-gap labels for the steps of a search trace (DESIGN §4 "StepGap";
StepGap, arXiv 2605.24733).

A trace (`procrl.rewards.stepgap.trace.Trace`) has one inference step per search turn and a conclusion step (the
answer); each step carries the evidence retrieved BEFORE it. Every step gets one label:

    NONE   no gap
    CC     contradicted claim (repair: retract)
    IE     irrelevant evidence: it does not address the entity/relation the step needs (repair: search again)
    MB     missing bridge: relevant evidence that does not yet imply the claim (repair: search for the bridge)
    ERROR  unscorable: the judge or the NLI model gave no usable answer

Decision tree, in order (the first stage that decides wins):

    judge unscored                                  -> ERROR
    A  off-target (entity / relation / scope drift) -> CC
    B  abstains ("cannot be determined", "need to search"): accurate -> NONE, inaccurate -> CC
    (a step with no claim text left after stripping tags, e.g. a bare search, has nothing to check -> NONE)
    C  evidence about another entity (or no evidence) -> IE; else the judge's verbatim quote of 5-20 words is kept
       only if it occurs in the evidence (case and whitespace normalised); otherwise the step has no quote
    D  step with a quote: NLI(quote => claim): entailment -> NONE, neutral -> MB, contradiction -> CC
    E  conclusion without a quote: NLI(all prior evidence => claim): entailment -> NONE, else IE
       inference step without a quote: NLI(earlier evidence that names the step's entity => claim):
       entailment -> NONE, else IE (no such evidence -> IE)
    NLI unscored                                    -> ERROR

Stages A-C are ONE judge call per step with a strict JSON schema (`StepCheck`); D-E are NLI calls
(`procrl.rewards.stepgap.nli`). "An inference step with a quote is no gap" (DESIGN §4) is read as: stage E never
re-checks an inference step that has a verified quote; stage D still checks that quote against the claim, as the
paper does for every quoted step. `inference_quote_nli=False` gives the other reading (an inference step with a
verified quote is NONE without NLI).

Ablations (`stages=`): removing a stage skips its check and the step continues down the tree as if that check had
passed: without A drift is ignored; without B abstentions are checked as ordinary claims; without C the entity
check is skipped and no quote is used; without D a verified quote is accepted (NONE); without E steps without a
quote are accepted (NONE).

`verify_many` issues ALL judge requests of all traces in one `judge.judge` call (concurrent on an
OpenAI-compatible server) and ALL NLI pairs in one `nli.predict` call (batched); `verify` is the one-trace case.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict

from procrl.rewards.stepgap.trace import Passage, StepLabel, Trace, TraceStep
from procrl.utils import get_logger

logger = get_logger(__name__)

LABELS = ("NONE", "CC", "IE", "MB", "ERROR")
GAP_LABELS = ("CC", "IE", "MB")
STAGES = ("A", "B", "C", "D", "E")

__all__ = [
    "LABELS",
    "GAP_LABELS",
    "STAGES",
    "StepCheck",
    "StepGapVerifier",
    "step_claim",
    "find_quote",
    "check_messages",
]


class StepCheck(BaseModel):
    """The judge's reply for stages A-C of one step (extra keys are rejected; the four booleans are required).

    Attributes:
        off_target: A: the step targets another entity, relation or scope than the question needs.
        abstains: B: the step commits to no fact (unknown / cannot be determined / still needs to search).
        abstention_accurate: B: the evidence indeed does not settle the point (only read when `abstains`).
        entity_match: C: the evidence is about the entity the step's claim is about.
        quote: C: 5-20 words copied verbatim from the evidence that bear on the claim; "" for none.
        entity: the entity the claim is about ("" if none).
        value: the value the claim asserts ("" if none).
        bridge: an intermediate entity the claim relies on that the evidence does not cover ("" if none).
        reason: a short free-text justification.
    """

    model_config = ConfigDict(extra="forbid")

    off_target: bool
    abstains: bool
    abstention_accurate: bool = False
    entity_match: bool
    quote: str | None = ""
    entity: str | None = ""
    value: str | None = ""
    bridge: str | None = ""
    reason: str | None = ""


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


# --------------------------------------------------------------------------------------------------------------------
# Claims and quotes
# --------------------------------------------------------------------------------------------------------------------

_BLOCK_TAGS = re.compile(r"<(search|answer|information)>.*?(</\1>|$)", re.DOTALL)
_ANY_TAG = re.compile(r"</?\s*(think|search|answer|information)\s*>")


def step_claim(step: TraceStep) -> str:
    """The claim a step makes: its text without the search query, the answer block and the tags.

    A conclusion whose remaining text does not already contain its answer gets "The answer is <answer>." appended
    (a bare `<answer>X</answer>` thus claims "The answer is X.").

    >>> from procrl.rewards.stepgap.trace import TraceStep
    >>> step_claim(TraceStep(kind="inference", text="<think>Lyon is in France.</think><search>Lyon</search>",
    ...                      query="Lyon", answer=None, evidence=[], retrieved=[]))
    'Lyon is in France.'
    """
    text = _ANY_TAG.sub(" ", _BLOCK_TAGS.sub(" ", step.text))
    claim = " ".join(text.split())
    if step.kind == "conclusion" and step.answer and _norm(step.answer) not in _norm(claim):
        claim = f"{claim} The answer is {step.answer.strip()}.".strip()
    return claim


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


_QUOTE_EDGES = "\"'“”‘’`«» "


def find_quote(
    quote: str | None, evidence: Iterable[Passage], *, min_words: int = 5, max_words: int = 20
) -> str | None:
    """The judge's quote if it is 5-20 words and occurs verbatim in one evidence passage (title or text), comparing
    lower-cased text with runs of whitespace collapsed; surrounding quote marks and a trailing "..." are ignored.
    None otherwise (the step is then treated as having no quote).

    >>> from procrl.rewards.stepgap.trace import Passage
    >>> ev = [Passage(title="Lyon", text="Lyon is the third-largest city  of France.")]
    >>> find_quote('"lyon is the third-largest city of"', ev)
    'lyon is the third-largest city of'
    >>> find_quote("Lyon is the largest city of France", ev) is None
    True
    """
    if not quote:
        return None
    cleaned = quote.strip().removesuffix("...").removesuffix("…").strip(_QUOTE_EDGES)
    words = cleaned.split()
    if not (min_words <= len(words) <= max_words):
        return None
    needle = _norm(cleaned)
    for passage in evidence:
        if needle in _norm(passage.text) or needle in _norm(passage.title):
            return cleaned
    return None


def _passages_text(passages: Sequence[Passage]) -> str:
    return "\n".join(f"{p.title}: {p.text}" for p in passages)


# --------------------------------------------------------------------------------------------------------------------
# The verifier
# --------------------------------------------------------------------------------------------------------------------

_D_LABELS = {"entailment": "NONE", "neutral": "MB", "contradiction": "CC"}


@dataclass
class _Pending:
    """A step waiting for one NLI answer: `premise => hypothesis`, decided by stage D or E."""

    stage: str
    premise: str
    hypothesis: str
    fields: dict


class StepGapVerifier:
    """Typed step labels (NONE/CC/IE/MB/ERROR) for search traces; see the module docstring for the tree.

    Args:
        judge: a `procrl.judges.Judge` (OpenAI-compatible server, `transformers serve`, in-process model).
        nli: an NLI backend with `predict(pairs) -> list[str | None]` (`CrossEncoderNLI`, `JudgeNLI`).
        stages: the stages to run (ablations drop some); default all of "ABCDE".
        min_quote_words, max_quote_words: the accepted quote length in words (DESIGN: 5-20).
        inference_quote_nli: stage D also checks inference steps that have a quote (default; see module docstring).
        max_passage_chars: each passage is cut to this many characters in the judge prompt (NLI premises and
            the quote check use the full text).
        progress: show tqdm bars for the judge calls.

    Raises:
        ValueError: an unknown stage or a bad quote-length range.
    """

    def __init__(
        self,
        judge: Any,
        nli: Any,
        *,
        stages: Iterable[str] = STAGES,
        min_quote_words: int = 5,
        max_quote_words: int = 20,
        inference_quote_nli: bool = True,
        max_passage_chars: int = 1500,
        progress: bool = True,
    ):
        stages = frozenset(stages)
        if not stages <= set(STAGES):
            raise ValueError(f"StepGapVerifier: unknown stages {sorted(stages - set(STAGES))}; choose from {STAGES}")
        if not (1 <= min_quote_words <= max_quote_words):
            raise ValueError(
                f"StepGapVerifier: need 1 <= min_quote_words <= max_quote_words, got {min_quote_words}, {max_quote_words}"
            )
        if max_passage_chars < 1:
            raise ValueError(f"StepGapVerifier: max_passage_chars must be >= 1, got {max_passage_chars}")
        self.judge = judge
        self.nli = nli
        self.stages = stages
        self.min_quote_words = min_quote_words
        self.max_quote_words = max_quote_words
        self.inference_quote_nli = inference_quote_nli
        self.max_passage_chars = max_passage_chars
        self.progress = progress

    # -- public API ----------------------------------------------------------------------------------------------

    def verify(self, trace: Trace) -> list[StepLabel]:
        """One label per step of `trace`, in order."""
        return self.verify_many([trace])[0]

    def verify_many(self, traces: Sequence[Trace], *, stages: Iterable[str] | None = None) -> list[list[StepLabel]]:
        """Labels for every step of every trace: one judge call over all steps, then one NLI call over all pairs.

        Args:
            traces: the traces; a trace without steps gets [].
            stages: override `self.stages` for this call (ablations).

        Returns:
            `labels[t][i]` for step i of trace t.
        """
        checks = self.check_steps(traces)
        return self.route(traces, checks, stages=stages)

    def check_steps(self, traces: Sequence[Trace]) -> list[list[Any]]:
        """Stages A-C: one `JudgeResult[StepCheck]` per step, from ONE `judge.judge` call over all steps."""
        requests = [
            check_messages(trace.question, step.evidence, step, max_passage_chars=self.max_passage_chars)
            for trace in traces
            for step in trace.steps
        ]
        flat = self.judge.judge(requests, StepCheck, desc="StepGap A-C", progress=self.progress) if requests else []
        out, k = [], 0
        for trace in traces:
            out.append(list(flat[k : k + len(trace.steps)]))
            k += len(trace.steps)
        return out

    def route(
        self, traces: Sequence[Trace], checks: Sequence[Sequence[Any]], *, stages: Iterable[str] | None = None
    ) -> list[list[StepLabel]]:
        """Route judged steps through the tree (stages D-E by ONE batched `nli.predict` call).

        Args:
            traces: the traces.
            checks: `checks[t][i]` is the `JudgeResult[StepCheck]` of step i of trace t (from `check_steps`); the
                same checks can be routed again with other `stages` (ablations cost no judge calls).
            stages: the stages to run; default `self.stages`.
        """
        stages = self.stages if stages is None else frozenset(stages)
        if len(checks) != len(traces) or any(len(c) != len(t.steps) for c, t in zip(checks, traces, strict=True)):
            raise ValueError("route: checks must hold one judge result per step of each trace")
        planned = [
            [self._plan(trace, step, result, stages) for step, result in zip(trace.steps, row, strict=True)]
            for trace, row in zip(traces, checks, strict=True)
        ]
        pending = [p for row in planned for p in row if isinstance(p, _Pending)]
        answers = self.nli.predict([(p.premise, p.hypothesis) for p in pending]) if pending else []
        if len(answers) != len(pending):
            raise RuntimeError(f"NLI backend returned {len(answers)} labels for {len(pending)} pairs")
        by_id = {id(p): a for p, a in zip(pending, answers, strict=True)}
        return [[self._finish(p, by_id.get(id(p))) for p in row] for row in planned]

    # -- the tree --------------------------------------------------------------------------------------------------

    def _plan(self, trace: Trace, step: TraceStep, result: Any, stages: frozenset) -> StepLabel | _Pending:
        check: StepCheck | None = getattr(result, "value", None)
        if check is None:
            return StepLabel("ERROR", reason=f"judge unscored: {getattr(result, 'unscored', None)}")
        fields = {
            "entity": (check.entity or "").strip() or None,
            "value": (check.value or "").strip() or None,
            "bridge": (check.bridge or "").strip() or None,
        }
        if "A" in stages and check.off_target:
            return StepLabel("CC", reason="A: off-target", **fields)
        if "B" in stages and check.abstains:
            if check.abstention_accurate:
                return StepLabel("NONE", reason="B: accurate abstention", **fields)
            return StepLabel("CC", reason="B: inaccurate abstention", **fields)
        claim = step_claim(step)
        if not claim:  # e.g. a bare <search> with no reasoning: nothing to check against evidence
            return StepLabel("NONE", reason="no claim to check", **fields)
        quote = None
        if "C" in stages:
            if not step.evidence:
                return StepLabel("IE", reason="C: no evidence", **fields)
            if not check.entity_match:
                return StepLabel("IE", reason="C: evidence about another entity", **fields)
            quote = find_quote(
                check.quote, step.evidence, min_words=self.min_quote_words, max_words=self.max_quote_words
            )
        if quote is not None:
            if "D" not in stages:
                return StepLabel("NONE", reason="quote accepted (D off)", **fields)
            if step.kind != "conclusion" and not self.inference_quote_nli:
                return StepLabel("NONE", reason="inference step with a quote", **fields)
            return _Pending("D", quote, claim, fields)
        if "E" not in stages:
            return StepLabel("NONE", reason="no quote, E off", **fields)
        if step.kind == "conclusion":
            premise_passages = list(step.evidence)
        else:  # inference: only earlier evidence that names the step's entity
            entity = fields["entity"]
            premise_passages = (
                [p for p in step.evidence if _norm(entity) in _norm(f"{p.title} {p.text}")]
                if entity
                else list(step.evidence)
            )
        if not premise_passages:
            return StepLabel("IE", reason="E: no evidence about the claim's entity", **fields)
        return _Pending("E", _passages_text(premise_passages), claim, fields)

    @staticmethod
    def _finish(planned: StepLabel | _Pending, nli_label: str | None) -> StepLabel:
        if isinstance(planned, StepLabel):
            return planned
        if nli_label not in _D_LABELS:
            return StepLabel("ERROR", reason=f"{planned.stage}: NLI unscored", **planned.fields)
        if planned.stage == "D":
            return StepLabel(_D_LABELS[nli_label], reason=f"D: quote {nli_label}", **planned.fields)
        label = "NONE" if nli_label == "entailment" else "IE"
        return StepLabel(label, reason=f"E: evidence {nli_label}", **planned.fields)

    def __repr__(self) -> str:
        return f"StepGapVerifier(judge={self.judge!r}, nli={self.nli!r}, stages={''.join(sorted(self.stages))})"
