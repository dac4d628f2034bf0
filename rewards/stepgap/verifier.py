"""The StepGap step verifier: typed evidence-gap labels for the steps of a search trace (docs/architecture.md "StepGap";
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
    C  evidence about another entity (or no evidence) -> IE; else the judge's quote of 5-20 words, "" for none
       (a choice among the step's candidate quotes; a reply that did not go through that schema has its quote kept
       only if it occurs in the evidence, case and whitespace normalised); otherwise the step has no quote
    D  step with a quote: NLI(quote => claim): entailment -> NONE, neutral -> MB, contradiction -> CC
    E  conclusion without a quote: NLI(all prior evidence => claim): entailment -> NONE, else IE
       inference step without a quote: NLI(earlier evidence that names the step's entity => claim):
       entailment -> NONE, else IE (no such evidence -> IE)
    NLI unscored                                    -> ERROR

Stages A-C are ONE judge call per step with a strict JSON schema (`StepCheck`: strict types, never coerced, bounded
strings; `procrl.rewards.stepgap.check`); D-E are NLI calls (`procrl.rewards.stepgap.nli`). "An inference step
with a quote is no gap" (docs/architecture.md "StepGap") is read as: stage E never re-checks an inference step that has a verified quote;
stage D still checks that quote against the claim, as the paper does for every quoted step.
`inference_quote_nli=False` gives the other reading (an inference step with a verified quote is NONE without NLI).

Verbatim quotes by construction: each step's schema (`step_check_schema`) makes `quote` a `Literal` of that step's
candidate spans (`procrl.rewards.stepgap.quotes.quote_candidates`: 5-20-word chunks of the evidence sentences as
the prompt shows them, at most 64) plus "", so a backend that enforces the schema (vLLM structured outputs, a
grammar-constrained local judge) can only return a verbatim quote or none. A backend that ignores the schema (its
reply does not validate against the step's schema) is read against the plain `StepCheck` instead, so a paraphrased
or placeholder quote such as "<entity>" means "no quote" (filtered by `find_quote`), never a label of its own.
`constrain_quotes=False` sends the plain `StepCheck` (free quote, filtered by `find_quote`).

Stage D/E decisions read NLI probabilities (`nli.predict_proba`, or one-hots of `nli.predict` for a backend that only
gives labels) through `nli_thresholds` (`procrl.rewards.stepgap.nli_rule.NLIThresholds`): by default the argmax;
with `entail_min` a step counts as entailed only when P(entailment) >= entail_min, with `contradict_min` as
contradicted only when P(contradiction) >= contradict_min (else neutral: MB in D, IE in E). The label's reason
records the three probabilities.

Ablations (`stages=`): removing a stage skips its check and the step continues down the tree as if that check had
passed: without A drift is ignored; without B abstentions are checked as ordinary claims; without C the entity
check is skipped and no quote is used; without D a verified quote is accepted (NONE); without E steps without a
quote are accepted (NONE).

`verify_many` issues ALL judge requests of all traces in one `judge.judge` call (one schema per request; concurrent
on an OpenAI-compatible server) and ALL NLI pairs in one NLI call (batched); `verify` is the one-trace case.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from procrl.judges import parse_judgement
from procrl.rewards.stepgap.check import StepCheck, check_messages, step_check_schema
from procrl.rewards.stepgap.nli_rule import ARGMAX, NLIThresholds, nli_probabilities
from procrl.rewards.stepgap.quotes import find_quote, norm_text, passages_text, quote_candidates, step_claim
from procrl.rewards.stepgap.trace import StepLabel, Trace, TraceStep
from procrl.utils import get_logger

logger = get_logger(__name__)

LABELS = ("NONE", "CC", "IE", "MB", "ERROR")
GAP_LABELS = ("CC", "IE", "MB")
TYPED_LABELS = ("NONE", "CC", "IE", "MB")  # the labels an annotated step can carry (ERROR is never gold)
STAGES = ("A", "B", "C", "D", "E")

__all__ = [
    "LABELS",
    "GAP_LABELS",
    "STAGES",
    "StepCheck",
    "step_check_schema",
    "StepGapVerifier",
    "step_claim",
    "find_quote",
    "check_messages",
]


def _probs_text(dist: dict[str, float]) -> str:
    return "P(e/n/c) " + "/".join(f"{dist[k]:.2f}" for k in ("entailment", "neutral", "contradiction"))


# --------------------------------------------------------------------------------------------------------------------
# The verifier
# --------------------------------------------------------------------------------------------------------------------

_D_LABELS = {"entailment": "NONE", "neutral": "MB", "contradiction": "CC"}


def _field_text(text: str) -> str | None:
    """A free-text field of the check, or None when empty or a copied placeholder of the reply shape ("<entity>"):
    a placeholder names nothing, so it must not narrow stage E's premise (an inference step would become IE)."""
    text = text.strip()
    if not text or (text.startswith("<") and text.endswith(">")):
        return None
    return text


def _free_quote_fallback(result: Any) -> Any:
    """A reply that failed the step's schema only through its quote (a backend that ignored the schema and
    paraphrased) is validated against the plain `StepCheck`; its quote is then filtered by `find_quote` in stage C."""
    if getattr(result, "unscored", None) != "schema_mismatch" or not getattr(result, "raw", None):
        return result
    value, reason = parse_judgement(result.raw, StepCheck)
    if value is None:
        return result
    return dataclasses.replace(result, value=value, unscored=reason, followed_schema=False)


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
        judge: a `procrl.judges.Judge` (an OpenAI-compatible server such as the local vLLM judge, which enforces
            each step's schema; `transformers serve`, which ignores it; an in-process model, constrained or not).
        nli: an NLI backend with `predict_proba(pairs)` (`CrossEncoderNLI`, `JudgeNLI`, `CachedNLI`), or any object
            with `predict(pairs) -> list[str | None]` (read as one-hot probabilities).
        stages: the stages to run (ablations drop some); default all of "ABCDE".
        min_quote_words, max_quote_words: the accepted quote length in words (docs/architecture.md "StepGap": 5-20).
        inference_quote_nli: stage D also checks inference steps that have a quote (default; see module docstring).
        max_passage_chars: each passage is cut to this many characters in the judge prompt, and the candidate
            quotes come from that part (NLI premises and the quote check use the full text).
        constrain_quotes: send each step's `step_check_schema` (quote = a choice among its candidate spans);
            False sends the plain `StepCheck` (free quote, filtered by `find_quote`).
        max_quote_candidates: at most this many candidate quotes per step (in evidence order).
        nli_thresholds: the stage D/E decision rule (`NLIThresholds`; default argmax).
        progress: show tqdm bars for the judge calls.

    Raises:
        ValueError: an unknown stage, a bad quote-length range, `max_passage_chars` or `max_quote_candidates` < 1,
            or `nli_thresholds` that is not an `NLIThresholds`.
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
        constrain_quotes: bool = True,
        max_quote_candidates: int = 64,
        nli_thresholds: NLIThresholds | None = None,
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
        if max_quote_candidates < 1:
            raise ValueError(f"StepGapVerifier: max_quote_candidates must be >= 1, got {max_quote_candidates}")
        if nli_thresholds is not None and not isinstance(nli_thresholds, NLIThresholds):
            raise ValueError(f"StepGapVerifier: nli_thresholds must be an NLIThresholds, got {nli_thresholds!r}")
        self.judge = judge
        self.nli = nli
        self.stages = stages
        self.min_quote_words = min_quote_words
        self.max_quote_words = max_quote_words
        self.inference_quote_nli = inference_quote_nli
        self.max_passage_chars = max_passage_chars
        self.constrain_quotes = constrain_quotes
        self.max_quote_candidates = max_quote_candidates
        self.nli_thresholds = nli_thresholds or ARGMAX
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

    def step_schema(self, step: TraceStep) -> type[StepCheck]:
        """The reply schema of one step's A-C request: `step_check_schema` of its candidate quotes (a step without
        evidence can only answer quote ""), or `StepCheck` when `constrain_quotes` is off."""
        if not self.constrain_quotes:
            return StepCheck
        candidates = quote_candidates(
            step.evidence,
            min_words=self.min_quote_words,
            max_words=self.max_quote_words,
            max_chars=self.max_passage_chars,
            cap=self.max_quote_candidates,
        )
        return step_check_schema(candidates)

    def check_steps(self, traces: Sequence[Trace]) -> list[list[Any]]:
        """Stages A-C: one `JudgeResult[StepCheck]` per step, from ONE `judge.judge` call over all steps, each
        request with its own schema (`step_schema`)."""
        steps = [(trace, step) for trace in traces for step in trace.steps]
        requests = [
            check_messages(trace.question, step.evidence, step, max_passage_chars=self.max_passage_chars)
            for trace, step in steps
        ]
        schemas = [self.step_schema(step) for _, step in steps]
        flat = self.judge.judge(requests, schemas, desc="StepGap A-C", progress=self.progress) if requests else []
        flat = [_free_quote_fallback(result) for result in flat]
        out, k = [], 0
        for trace in traces:
            out.append(list(flat[k : k + len(trace.steps)]))
            k += len(trace.steps)
        return out

    def route(
        self, traces: Sequence[Trace], checks: Sequence[Sequence[Any]], *, stages: Iterable[str] | None = None
    ) -> list[list[StepLabel]]:
        """Route judged steps through the tree (stages D-E by ONE batched NLI call, decided by `nli_thresholds`).

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
        answers = nli_probabilities(self.nli, [(p.premise, p.hypothesis) for p in pending]) if pending else []
        by_id = {id(p): a for p, a in zip(pending, answers, strict=True)}
        return [[self._finish(p, by_id.get(id(p))) for p in row] for row in planned]

    # -- the tree --------------------------------------------------------------------------------------------------

    def _plan(self, trace: Trace, step: TraceStep, result: Any, stages: frozenset) -> StepLabel | _Pending:
        check: StepCheck | None = getattr(result, "value", None)
        if check is None:
            return StepLabel("ERROR", reason=f"judge unscored: {getattr(result, 'unscored', None)}")
        fields = {name: _field_text(getattr(check, name)) for name in ("entity", "value", "bridge")}
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
                [p for p in step.evidence if norm_text(entity) in norm_text(f"{p.title} {p.text}")]
                if entity
                else list(step.evidence)
            )
        if not premise_passages:
            return StepLabel("IE", reason="E: no evidence about the claim's entity", **fields)
        return _Pending("E", passages_text(premise_passages), claim, fields)

    def _finish(self, planned: StepLabel | _Pending, dist: dict[str, float] | None) -> StepLabel:
        if isinstance(planned, StepLabel):
            return planned
        nli_label = self.nli_thresholds.decide(dist)
        if nli_label not in _D_LABELS:
            return StepLabel("ERROR", reason=f"{planned.stage}: NLI unscored", **planned.fields)
        probs = _probs_text(dist)
        if planned.stage == "D":
            return StepLabel(_D_LABELS[nli_label], reason=f"D: quote {nli_label} ({probs})", **planned.fields)
        label = "NONE" if nli_label == "entailment" else "IE"
        return StepLabel(label, reason=f"E: evidence {nli_label} ({probs})", **planned.fields)

    def __repr__(self) -> str:
        return (
            f"StepGapVerifier(judge={self.judge!r}, nli={self.nli!r}, stages={''.join(sorted(self.stages))}, "
            f"nli_thresholds={self.nli_thresholds})"
        )
