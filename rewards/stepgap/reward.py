"""StepGap's typed process reward (arXiv 2605.24733; docs/architecture.md "StepGap reward").

For a trace with steps s_1..s_n (searches, then the answer) labelled τ_i by the verifier,

    R = EM + λ · Σ_i [ base(τ_i) + shape(a_{i+1} | τ_i) ]

- base *(defaults)*: NONE +0.20, IE -0.10, MB -0.05, CC +0.05, ERROR 0, FORMAT -0.10.
- FORMAT: a malformed step (`TraceStep.malformed`: an unclosed `<search>`, e.g. at truncation; an empty query; an
  action tag inside the answer; an action after the answer, which marks the conclusion) is a format violation.
  It is labelled FORMAT without asking the verifier (`label_steps`; the verifier never judges it) and gets
  `base_format` (default -0.10, must be <= 0; keep it at or below the lowest well-formed base, IE -0.10, so a
  violation never earns more base than a well-formed step). With shaping, an ignored gap costs its base plus the
  -0.10 ignored penalty (IE: -0.20, MB: -0.15), more than one violation at the default: set `base_format` <= -0.20
  when a violation must never beat an ignored gap. `step_rewards` treats a malformed step as FORMAT whatever
  label it is given, so the no-gap bonus can never pay a violation. Metrics: `stepgap/label_FORMAT` and
  `stepgap/format_violations` (FORMAT steps per completion).
- shape(a_{i+1} | τ_i), the action of the NEXT step given this step's label; the last step gets 0:
  * correct repair +0.10, ignored gap -0.10 (only after a gap: CC, IE, MB). A malformed next step never repairs
    a gap (it is an ignored gap, -0.10): it did not run (an unclosed or empty search) or broke the answer;
  * after a FORMAT step: no repair term, neither bonus nor penalty. FORMAT is not a gap that the next step can
    repair, and a "repair" bonus would hand back the violation's cost (+0.10 against -0.10);
  * near-duplicate query -0.05: the next step is a search whose query has token Jaccard >= 0.8 with any earlier
    query (any label, FORMAT included, added to the repair term).
- Repairs, operationally (docs/architecture.md "StepGap reward"; the verifier's `StepLabel` fields say what to look for):
  * after CC: the next step does not restate the contradicted `entity` / `value` (normalised substring test of
    the step text), or it says it retracts ("retract", "was wrong", "incorrect", "mistake", "not correct",
    "correction", "i was mistaken"). Without `entity` and `value` only a retraction phrase counts;
  * after IE: the next step is a search naming a different entity or relation, i.e. its query is not a
    near-duplicate of this step's query (same entity with a new relation counts, so `entity` is not required);
  * after MB: the next step is a search whose query names the `bridge` entity (when the label has none: any
    search that is not a near-duplicate of an earlier query).

Token Jaccard: |A ∩ B| / |A ∪ B| over the sets of normalised word tokens (`procrl.rewards.qa.normalize_answer`).

Per-step rewards for process advantages (`StepGapStepRewards`): step i gets λ·(base_i + shape_i), and EM is added
to the last step, so the step values sum to R; each value sits on the tokens of the turn that produced it.

    >>> from procrl.rewards.stepgap.trace import StepLabel, parse_trace
    >>> t = parse_trace("q", "<search> a b </search><information>Doc 1 (Title: A) x</information><answer> y </answer>")
    >>> stepgap_total(t, [StepLabel("MB", bridge="c"), StepLabel("NONE")], em=1.0)  # 1 + (-0.05 - 0.10) + 0.20
    1.05
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from procrl.rewards.qa import em_reward, exact_match, gold_list, normalize_answer
from procrl.rewards.stepgap.trace import LABELS, StepLabel, Trace, TraceStep, parse_trace, question_from_prompt
from procrl.step_rewards import StepRewards, aggregate_step_values
from procrl.utils import completion_to_text, get_logger

logger = get_logger(__name__)

__all__ = [
    "StepGapReward",
    "StepGapRewardConfig",
    "StepGapStepRewards",
    "is_repair",
    "label_steps",
    "step_rewards",
    "stepgap_total",
    "token_jaccard",
]

RETRACTION = re.compile(r"\b(retract\w*|was wrong|incorrect|mistake\w*|not correct|correction|i was mistaken)\b", re.I)


@dataclass
class StepGapRewardConfig:
    """Magnitudes of the StepGap reward (docs/architecture.md "StepGap reward" defaults). Controls: zero-CC (`base_cc: 0.0`), shaping-off
    (`shaping: false`)."""

    lam: float = field(default=1.0, metadata={"help": "λ, weight of the typed process terms added to EM."})
    base_none: float = field(default=0.20, metadata={"help": "base reward of a step labelled NONE (no gap)."})
    base_cc: float = field(default=0.05, metadata={"help": "base reward of a CC step (contradiction detected)."})
    base_ie: float = field(default=-0.10, metadata={"help": "base reward of an IE step (irrelevant evidence)."})
    base_mb: float = field(default=-0.05, metadata={"help": "base reward of an MB step (missing bridge)."})
    base_error: float = field(default=0.0, metadata={"help": "base reward of an unscorable (ERROR) step."})
    base_format: float = field(
        default=-0.10,
        metadata={
            "help": "base reward of a malformed step (FORMAT: unclosed or empty search, an action tag inside or "
            "after the answer); must be <= 0, never the no-gap bonus."
        },
    )
    shaping: bool = field(default=True, metadata={"help": "add shape(a_{i+1} | τ_i); false = the shaping-off control."})
    repair_bonus: float = field(default=0.10, metadata={"help": "shaping when the next step repairs the gap."})
    ignored_penalty: float = field(default=-0.10, metadata={"help": "shaping when the next step ignores the gap."})
    duplicate_penalty: float = field(
        default=-0.05, metadata={"help": "shaping when the next query near-duplicates an earlier query."}
    )
    duplicate_jaccard: float = field(
        default=0.8, metadata={"help": "token Jaccard at or above which two queries are near-duplicates (0-1]."}
    )

    def __post_init__(self) -> None:
        values = [getattr(self, f) for f in self.__dataclass_fields__ if f != "shaping"]
        if not all(isinstance(v, int | float) and math.isfinite(v) for v in values):
            raise ValueError(f"StepGapRewardConfig values must be finite numbers, got {self}.")
        if not 0.0 < self.duplicate_jaccard <= 1.0:
            raise ValueError(f"duplicate_jaccard={self.duplicate_jaccard} must be in (0, 1], e.g. 0.8.")
        if self.base_format > 0:
            raise ValueError(f"base_format={self.base_format} must be <= 0: a format violation must never pay.")

    def base(self, label: str) -> float:
        return {
            "NONE": self.base_none,
            "CC": self.base_cc,
            "IE": self.base_ie,
            "MB": self.base_mb,
            "ERROR": self.base_error,
            "FORMAT": self.base_format,
        }[label]


def token_jaccard(a: str | None, b: str | None) -> float:
    """|A ∩ B| / |A ∪ B| of the normalised word-token sets; 0.0 when either is empty.

    >>> token_jaccard("The mother of Lothair II?", "mother of lothair II")  # articles, case, punctuation go
    1.0
    >>> round(token_jaccard("Who is the mother of Lothair II", "mother of Lothair II"), 4)  # 4 shared / 6
    0.6667
    """
    x, y = set(normalize_answer(a or "").split()), set(normalize_answer(b or "").split())
    return len(x & y) / len(x | y) if x and y else 0.0


_TAGS = re.compile(r"</?[a-z]+>")


def _mentions(text: str, needle: str | None) -> bool:
    """Whole-word, normalised substring test; tags become spaces first ("<think>Waldrada" mentions "Waldrada")."""
    norm = normalize_answer(needle or "")
    return bool(norm) and f" {norm} " in f" {normalize_answer(_TAGS.sub(' ', text))} "


def is_repair(label, step: TraceStep, nxt: TraceStep, jaccard: float = 0.8) -> bool:
    """Whether `nxt` repairs the gap `label` found at `step` (rules in the module docstring)."""
    kind = label.label
    if kind == "CC":
        if RETRACTION.search(nxt.text or ""):
            return True
        claims = [v for v in (label.entity, label.value) if v and normalize_answer(v)]
        return bool(claims) and not any(_mentions(nxt.text or "", v) for v in claims)
    if nxt.kind != "inference" or not nxt.query:
        return False
    if kind == "IE":  # a different entity OR relation: the query's words changed (not a near-duplicate)
        return token_jaccard(nxt.query, step.query) < jaccard if step.query else True
    if kind == "MB":
        if label.bridge and normalize_answer(label.bridge):
            return _mentions(nxt.query, label.bridge)
        return True  # no bridge named: any search that is not a near-duplicate (penalised separately) counts
    return False


def step_rewards(trace: Trace, labels: Sequence, config: StepGapRewardConfig | None = None) -> list[float]:
    """λ·(base(τ_i) + shape(a_{i+1} | τ_i)) for every step i (EM not included).

    Raises:
        ValueError: a different number of labels than steps.
    """
    config = config or StepGapRewardConfig()
    steps = trace.steps
    if len(labels) != len(steps):
        raise ValueError(f"stepgap reward: {len(labels)} labels for {len(steps)} steps; the verifier must label each.")
    values = []
    for i, (step, label) in enumerate(zip(steps, labels, strict=True)):
        kind = "FORMAT" if step.malformed else label.label  # a malformed step is FORMAT, whatever it was labelled
        value = config.base(kind)
        if config.shaping and i + 1 < len(steps):
            nxt = steps[i + 1]
            if kind in ("CC", "IE", "MB"):  # FORMAT is no gap: no repair term after it
                repaired = not nxt.malformed and is_repair(label, step, nxt, config.duplicate_jaccard)
                value += config.repair_bonus if repaired else config.ignored_penalty
            if nxt.kind == "inference" and nxt.query:
                earlier = [s.query for s in steps[: i + 1] if s.kind == "inference" and s.query]
                if any(token_jaccard(nxt.query, q) >= config.duplicate_jaccard for q in earlier):
                    value += config.duplicate_penalty
        values.append(config.lam * value)
    return values


def stepgap_total(trace: Trace, labels: Sequence, em: float, config: StepGapRewardConfig | None = None) -> float:
    """R = EM + λ Σ_i [base(τ_i) + shape(a_{i+1} | τ_i)], rounded to 10 decimals (exact table values).

    The Σ is `procrl.step_rewards.aggregate_step_values(values, "sum")` of the per-step values (`step_rewards`); a
    trace without steps gets R = EM.
    """
    values = step_rewards(trace, labels, config)
    return round(em + (aggregate_step_values(values, "sum") if values else 0.0), 10)


def label_steps(verifier, traces: Sequence[Trace]) -> list[list[StepLabel]]:
    """One label per step: FORMAT for a malformed step, the verifier's label for every other step.

    The verifier is asked about the well-formed steps only (one `verify_many` call on copies of the traces
    without their malformed steps; each step keeps its own evidence, so dropping steps changes nothing else).

    Raises:
        ValueError: the verifier returned a different number of labels than well-formed steps.
    """
    kept = [replace(t, steps=[s for s in t.steps if not s.malformed]) for t in traces]
    judged = verifier.verify_many(kept) if any(t.steps for t in kept) else [[] for _ in kept]
    if len(judged) != len(kept) or any(len(row) != len(t.steps) for row, t in zip(judged, kept, strict=True)):
        raise ValueError("stepgap reward: the verifier must return one label per well-formed step of each trace.")
    out = []
    for trace, row in zip(traces, judged, strict=True):
        verdicts = iter(row)
        out.append(
            [
                StepLabel("FORMAT", reason="malformed step (format violation)") if s.malformed else next(verdicts)
                for s in trace.steps
            ]
        )
    return out


def _traces(prompts, completions, search_trace) -> list[Trace]:
    if search_trace is not None:
        return list(search_trace)
    return [
        parse_trace(question_from_prompt(p), completion_to_text(c)) for p, c in zip(prompts, completions, strict=True)
    ]


class _StepGapBase:
    def __init__(self, verifier, config: StepGapRewardConfig | None = None):
        self.verifier = verifier
        self.config = config or StepGapRewardConfig()

    def _score(self, prompts, completions, golden_answers, search_trace, log_metric=None):
        if golden_answers is None:
            raise ValueError(f"{self.__name__} needs the dataset column 'golden_answers'.")
        traces = _traces(prompts, completions, search_trace)
        labels = label_steps(self.verifier, traces)
        ems = [exact_match(t.answer, g) if gold_list(g) else None for t, g in zip(traces, golden_answers, strict=True)]
        if log_metric is not None:
            counts = Counter(lab.label for row in labels for lab in row)
            total = sum(counts.values())
            log_metric("stepgap/steps_per_completion", total / max(len(traces), 1))
            if total:  # label shares of the labelled steps; none logged for a batch without steps (not 0, not NaN)
                for name in LABELS:
                    log_metric(f"stepgap/label_{name}", counts.get(name, 0) / total)
            log_metric("stepgap/format_violations", counts.get("FORMAT", 0) / max(len(traces), 1))
            log_metric("stepgap/searches_per_completion", sum(t.num_searches for t in traces) / max(len(traces), 1))
            log_metric(
                "stepgap/format_violation_frac", sum(bool(t.format_violations) for t in traces) / max(len(traces), 1)
            )
        return traces, labels, ems


class StepGapReward(_StepGapBase):
    """TRL reward function: R = EM + λ Σ [base + shaping] per completion (None where the gold is missing).

    Args:
        verifier: has `verify_many(traces) -> list[list[StepLabel]]` (`procrl.rewards.stepgap.verifier.StepGapVerifier`).
        config: `StepGapRewardConfig` (defaults from docs/architecture.md "StepGap reward").

    Reads the dataset column `golden_answers` and the rollout's `search_trace` (parses the completion text when
    absent). Logs `stepgap/label_<L>` (label shares; not logged for a batch without labelled steps),
    `stepgap/steps_per_completion`, `stepgap/searches_per_completion`, `stepgap/format_violations` (malformed,
    FORMAT-labelled steps per completion) and `stepgap/format_violation_frac` (completions with any format
    violation, `no_answer` included) through TRL's `log_metric`. Malformed steps are never sent to the verifier.
    """

    __name__ = "stepgap_reward"

    def __call__(self, prompts, completions, completion_ids=None, *, golden_answers=None, search_trace=None, **kwargs):
        traces, labels, ems = self._score(prompts, completions, golden_answers, search_trace, kwargs.get("log_metric"))
        log_extra = kwargs.get("log_extra")  # TRL's per-completion table column (procrl.trainers.monitoring)
        if callable(log_extra):  # here only, not in _score: two StepGap functions would log the column twice
            log_extra("stepgap/step_labels", [[lab.label for lab in row] for row in labels])
        return [
            None if em is None else stepgap_total(t, lab, em, self.config)
            for t, lab, em in zip(traces, labels, ems, strict=True)
        ]


class StepGapStepRewards(_StepGapBase):
    """Step scorer for `advantage_mode: process | mixed` (`procrl.step_rewards.StepRewardFunc`).

    Step i's value λ·(base_i + shape_i) sits on the tokens of its turn: boundaries are the ends of the steps'
    `token_span`s (environment tokens after a step belong to the next step; they are masked out of the loss
    anyway), the last boundary is the completion length, and EM is added to the last step. Steps without a token
    span, or ending no later than the previous boundary, are merged into the next step. None when the gold is
    missing or the trace has no steps.
    """

    __name__ = "stepgap_step_rewards"

    def __call__(self, prompts, completions, completion_ids, *, golden_answers=None, search_trace=None, **kwargs):
        traces, labels, ems = self._score(prompts, completions, golden_answers, search_trace, kwargs.get("log_metric"))
        out: list[StepRewards | None] = []
        for trace, lab, em, ids in zip(traces, labels, ems, completion_ids, strict=True):
            if em is None or not trace.steps or not ids:
                out.append(None)
                continue
            values, bounds, carry = [], [], 0.0
            per_step = step_rewards(trace, lab, self.config)
            for step, value in zip(trace.steps[:-1], per_step[:-1], strict=True):
                end = step.token_span[1] if step.token_span is not None else None
                if end is None or end <= (bounds[-1] if bounds else 0) or end >= len(ids):
                    carry += value  # no tokens of its own: merged into the next step
                    continue
                values.append(value + carry)
                bounds.append(end)
                carry = 0.0
            values.append(carry + per_step[-1] + em)  # the last step runs to the end of the completion (EOS)
            bounds.append(len(ids))
            out.append(StepRewards(values=values, boundaries=bounds))
        return out


__all__ += ["em_reward"]  # re-exported: the outcome half of R as its own TRL reward (task metric)
