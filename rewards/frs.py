"""FRS, the Filtered Reasoning Score: reasoning quality on a model's most confident traces (arXiv 2604.11996;
DESIGN §4 "FRS").

The computation, in the order it happens:

1. **Tail confidence of a trace** (no labels needed). With p_t the probability of the t-th chosen completion token
   under the RAW model distribution (temperature 1, no top-p/top-k), and L the number of completion tokens
   (EOS included when it was generated):

       n_low = max(1, floor(0.1 * L))          confidence = mean of the n_low smallest p_t

   Inputs are natural-log probabilities (procrl's `completion_logps`, taken from the sampler's own logits); they
   are masked (a trace's own length) before `exp`. An empty trace (L = 0) has no confidence: it is left out of
   the ranking and counted (`n_no_confidence`), never given a made-up value.
2. **Pooled top-K% filter.** All traces of one (model, benchmark) are ranked together (not per problem) by
   confidence, highest first; equal confidences keep their input order (a stable sort on (-confidence, index)).
   The top floor(K% * N) traces are kept, at least one. FRS@K is reported for K in {10, 20, 30, 40, 50}; FRS is
   FRS@10 *(default)*.
3. **Reasoning score** from an LLM judge (`procrl.rewards.judges`): faithfulness, utility, coherence and factuality,
   integers 1-5, given the problem, the trace, the gold answer and {"final_correct": bool}; the rubric is ours
   (`RUBRIC`). RS = (sum - 4) / 16 * 100, in [0, 100]. A trace whose judgement fails is dropped from every mean and
   counted by reason (`unscored`).
4. **FRS@K** = mean RS over the kept traces that have a score.

Also reported: accuracy over all traces, accuracy of the kept traces (both need no judge), and the selection gain:
the mean, over questions with >= 2 ranked traces, of RS(most confident trace) - RS(random trace).

Cost: only the traces that are used are judged. Top-K estimator: the top floor(max(K%) * N) traces (400 of 800 for
K up to 50%), plus what the selection gain needs: with `random_baseline="sample"` *(default)* the most confident and
one seeded random trace of each question (<= 2 per question, often fewer since the top traces overlap), with
`random_baseline="mean"` every trace of every question with >= 2 traces (all N). The paper's bin estimator
(`estimator="bins"`) bounds the cost for large N: equal-count confidence bins, at most `max_per_bin` (50) judged
per bin, drawn deterministically from a hash seed, and only the bins that overlap the top max(K)%.

    >>> tail_confidence([0.9] * 27 + [0.1, 0.2, 0.3])   # L = 30 -> n_low = 3: mean(0.1, 0.2, 0.3)
    0.2
    >>> tail_size(19), tail_size(30)
    (1, 3)
    >>> reasoning_score(ReasoningJudgement(faithfulness=5, utility=4, coherence=5, factuality=4))
    87.5
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from procrl.utils import get_logger

if TYPE_CHECKING:  # the judge client is only needed when something is judged
    from procrl.rewards.judges import Judge, JudgeResult

logger = get_logger(__name__)

__all__ = [
    "DEFAULT_K_VALUES",
    "DIMENSIONS",
    "REPLY_FORMAT",
    "RUBRIC",
    "FRSConfig",
    "FRSReport",
    "ReasoningJudgement",
    "Trace",
    "compute_frs",
    "judge_messages",
    "judge_traces",
    "kept_count",
    "plan_judging",
    "rank_by_confidence",
    "reasoning_score",
    "summarize",
    "tail_confidence",
    "tail_confidence_from_logps",
    "tail_size",
]

DIMENSIONS = ("faithfulness", "utility", "coherence", "factuality")
DEFAULT_K_VALUES = (10, 20, 30, 40, 50)
# Log-probabilities a little above 0 are float error of log_softmax; beyond this they are not log-probabilities.
_LOGP_TOLERANCE = 1e-5

# --------------------------------------------------------------------------------------------------------------------
# 1. Tail confidence of one trace
# --------------------------------------------------------------------------------------------------------------------


def tail_size(num_tokens: int, tail_fraction: float = 0.1) -> int:
    """n_low = max(1, floor(tail_fraction * L)) for a trace of L tokens (exact rational arithmetic, so 0.1 * 30 is 3,
    not 3.0000000000000004 rounded by luck).

    >>> [tail_size(n) for n in (1, 9, 10, 19, 20, 30)]
    [1, 1, 1, 1, 2, 3]
    """
    if num_tokens < 0:
        raise ValueError(f"a trace cannot have {num_tokens} tokens")
    return max(1, math.floor(Fraction(str(tail_fraction)) * num_tokens))


def tail_confidence(probs: Sequence[float], tail_fraction: float = 0.1) -> float | None:
    """Mean of the n_low smallest chosen-token probabilities of one trace (FRS tail confidence).

    Args:
        probs: probability of each completion token, `(L,)`, raw model distribution (temperature 1); L counts the
            EOS token when it was generated.
        tail_fraction: share of the tokens in the tail (0.1 in the paper).

    Returns:
        The correctly rounded mean of the `tail_size(L)` smallest values (in [0, 1]); None for an empty trace.

    Raises:
        ValueError: a value is NaN or outside [0, 1].

    >>> tail_confidence([0.95] * 18 + [0.2, 0.2]) < tail_confidence([0.6] * 20)   # L = 20 -> n_low = 2
    True
    """
    values = [float(p) for p in probs]
    if not values:
        return None
    for p in values:
        if not 0.0 <= p <= 1.0:  # also catches NaN
            raise ValueError(f"token probabilities must lie in [0, 1], got {p}")
    tail = sorted(values)[: tail_size(len(values), tail_fraction)]
    return float(sum(map(Fraction, tail), Fraction(0)) / len(tail))


def tail_confidence_from_logps(logps: Sequence[float], tail_fraction: float = 0.1) -> float | None:
    """`tail_confidence` of a trace given as natural-log probabilities (procrl's `completion_logps`, raw, T = 1).

    The list holds exactly the trace's own tokens (a padded row must be cut to its length first: the mask comes
    before `exp`). -inf is a probability of 0.

    Raises:
        ValueError: a log-probability is NaN or above 0 (beyond float error): not a log-probability.

    >>> round(tail_confidence_from_logps([math.log(0.5), 0.0]), 12)
    0.5
    """
    probs = []
    for logp in logps:
        logp = float(logp)
        if math.isnan(logp) or logp > _LOGP_TOLERANCE:
            raise ValueError(f"expected natural-log probabilities (<= 0), got {logp}")
        probs.append(math.exp(min(logp, 0.0)))
    return tail_confidence(probs, tail_fraction)


def rank_by_confidence(confidences: Sequence[float | None]) -> list[int]:
    """Indices of the traces that have a confidence, most confident first; ties keep their input order.

    >>> rank_by_confidence([0.2, None, 0.5, 0.2])
    [2, 0, 3]
    """
    valid = [i for i, c in enumerate(confidences) if c is not None]
    return sorted(valid, key=lambda i: (-confidences[i], i))


def kept_count(num_ranked: int, k_percent: float) -> int:
    """floor(K% * N) traces kept by the top-K% filter, at least 1 (0 only when there is nothing to keep).

    >>> kept_count(800, 10), kept_count(5, 10), kept_count(0, 10)
    (80, 1, 0)
    """
    if num_ranked <= 0:
        return 0
    return max(1, math.floor(Fraction(str(k_percent)) * num_ranked / 100))


# --------------------------------------------------------------------------------------------------------------------
# 2. The judge: rubric, request, reasoning score
# --------------------------------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------------------------------
# 3. Traces, configuration, and the FRS computation
# --------------------------------------------------------------------------------------------------------------------


@dataclass
class Trace:
    """One sampled reasoning trace of one problem.

    Attributes:
        problem_id: groups the traces of one question (selection gain).
        problem: the problem text shown to the judge.
        completion: the trace text (special tokens removed).
        gold: the gold answer as the data set gives it (None when unknown).
        correct: the final answer verified against the gold (`procrl.rewards.outcome.is_correct`); None when the
            gold cannot be parsed.
        confidence: tail confidence (probability, in [0, 1]); None for an empty trace.
        num_tokens: L, completion tokens including EOS.
        scores: the judge's scores once judged and valid, else None.
        unscored: why the judgement failed (the judge client's reason), else None.
    """

    problem_id: str
    problem: str
    completion: str
    gold: str | None
    correct: bool | None
    confidence: float | None
    num_tokens: int
    scores: dict[str, int] | None = None
    unscored: str | None = None

    @property
    def rs(self) -> float | None:
        """Reasoning score in [0, 100], None when not (validly) judged."""
        return None if self.scores is None else reasoning_score(ReasoningJudgement(**self.scores))

    def to_dict(self) -> dict[str, Any]:
        return dict(asdict(self), rs=self.rs)


@dataclass
class FRSConfig:
    """How FRS is computed. Defaults follow DESIGN §4 "FRS"; the paper is silent where marked *(default)*."""

    k_percent: float = field(default=10, metadata={"help": "K of the headline FRS: keep the top K% most confident."})
    k_values: tuple[float, ...] = field(
        default=DEFAULT_K_VALUES, metadata={"help": "K values (percent) of the FRS@K curve; k_percent is added."}
    )
    tail_fraction: float = field(default=0.1, metadata={"help": "Share of lowest-probability tokens in the tail."})
    estimator: str = field(
        default="topk",
        metadata={
            "help": "'topk': judge every kept trace (exact). 'bins': the paper's estimator, equal-count confidence "
            "bins with at most max_per_bin judged per bin; FRS@K = bin means weighted by their overlap with the top K%."
        },
    )
    n_bins: int = field(
        default=10, metadata={"help": "Equal-count confidence bins of the 'bins' estimator *(default)*."}
    )
    max_per_bin: int = field(default=50, metadata={"help": "At most this many traces are judged per bin ('bins')."})
    selection_gain: bool = field(default=True, metadata={"help": "Judge what the selection gain needs and report it."})
    random_baseline: str = field(
        default="sample",
        metadata={
            "help": "Selection gain's RS(random): 'sample' = RS of one seeded random trace of the question (<= 2 "
            "judgements per question); 'mean' = the mean RS of the question's traces, the exact expectation "
            "(noise-free, but every trace of the question is judged)."
        },
    )
    seed: int = field(default=0, metadata={"help": "Seed of the hash-based random choices (bins, random trace)."})
    max_trace_chars: int = field(default=8000, metadata={"help": "Longer traces are cut in the middle for the judge."})

    def __post_init__(self):
        self.k_values = tuple(sorted({*(float(k) for k in self.k_values), float(self.k_percent)}))
        self.k_values = tuple(int(k) if float(k).is_integer() else k for k in self.k_values)
        if float(self.k_percent).is_integer():
            self.k_percent = int(self.k_percent)
        for k in self.k_values:
            if not 0 < k <= 100:
                raise ValueError(f"K values are percentages in (0, 100], got {k}; e.g. k_values: [10, 20, 30, 40, 50]")
        if not 0 < self.tail_fraction <= 1:
            raise ValueError(f"tail_fraction must be in (0, 1], got {self.tail_fraction} (the paper uses 0.1)")
        if self.estimator not in ("topk", "bins"):
            raise ValueError(f"estimator must be 'topk' or 'bins', got {self.estimator!r}")
        if self.n_bins < 1 or self.max_per_bin < 1:
            raise ValueError(f"n_bins and max_per_bin must be >= 1, got {self.n_bins} and {self.max_per_bin}")
        if self.random_baseline not in ("sample", "mean"):
            raise ValueError(f"random_baseline must be 'sample' or 'mean', got {self.random_baseline!r}")
        if self.max_trace_chars < 100:
            raise ValueError(f"max_trace_chars must be >= 100, got {self.max_trace_chars}")


@dataclass
class FRSReport:
    """FRS of one set of traces (one model on one benchmark). Scores are RS units (0-100); None = nothing scored.

    Attributes:
        score: FRS@k_percent.
        at_k: FRS@K for every K of the curve.
        accuracy: fraction of traces whose final answer is correct (traces with an unparseable gold left out and
            counted in `n_unparseable_gold`).
        accuracy_kept: the same over the top k_percent% (exact set, whatever the estimator).
        accuracy_at_k: accuracy of the kept traces for every K.
        selection_gain: mean over questions of RS(most confident) - RS(random); see `FRSConfig.random_baseline`.
        selection_gain_questions: questions that entered the mean; `selection_gain_dropped`: questions with >= 2
            ranked traces left out because a needed judgement failed.
        kept_at_k: traces kept for every K; `dropped_at_k`: kept traces without a score (judge failed).
        n_judged: judgements requested; `n_scored`: valid ones; `unscored`: failures by reason.
        n_no_confidence: empty traces, left out of the ranking.
        judge: the judge client's counters (`JudgeStats.as_dict()`, over the client's whole life, so a judge reused
            by the training callback accumulates them; None without a judge).
    """

    k_percent: float
    score: float | None
    at_k: dict[float, float | None]
    accuracy: float | None
    accuracy_kept: float | None
    accuracy_at_k: dict[float, float | None]
    selection_gain: float | None
    selection_gain_questions: int
    selection_gain_dropped: int
    n_problems: int
    n_traces: int
    n_ranked: int
    n_no_confidence: int
    n_unparseable_gold: int
    kept_at_k: dict[float, int]
    dropped_at_k: dict[float, int]
    n_judged: int
    n_scored: int
    unscored: dict[str, int]
    mean_confidence: float | None
    estimator: str
    random_baseline: str
    judge: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def metrics(self, prefix: str = "frs/") -> dict[str, float]:
        """Scalars for a tracker: score, at_k/<K>, accuracy, accuracy_kept, selection_gain, unscored, judged.
        Metrics without a value (None) are left out rather than logged as NaN."""
        values: dict[str, float | None] = {
            "score": self.score,
            **{f"at_k/{k}": v for k, v in self.at_k.items()},
            "accuracy": self.accuracy,
            "accuracy_kept": self.accuracy_kept,
            "selection_gain": self.selection_gain,
            "unscored": float(sum(self.unscored.values())),
            "judged": float(self.n_judged),
            "mean_confidence": self.mean_confidence,
        }
        return {f"{prefix}{k}": float(v) for k, v in values.items() if v is not None}


def compute_frs(
    traces: Sequence[Trace], judge: Judge | None, config: FRSConfig | None = None, *, progress: bool = True
) -> FRSReport:
    """Judge the traces FRS needs (see `plan_judging`) and summarise them.

    Args:
        traces: every trace of one (model, benchmark); their `scores`/`unscored` fields are filled in place.
        judge: a `procrl.rewards.judges.Judge`; None computes only what needs no judge (accuracies, confidences).
        config: `FRSConfig()` when None.
        progress: show the judge's progress bar.
    """
    config = config or FRSConfig()
    if judge is not None:
        judge_traces(traces, plan_judging(traces, config), judge, config, progress=progress)
    stats = getattr(judge, "stats", None)
    return summarize(traces, config, judge_stats=stats.as_dict() if hasattr(stats, "as_dict") else None)


def plan_judging(traces: Sequence[Trace], config: FRSConfig) -> list[int]:
    """Indices (ascending) of the traces that must be judged: the FRS@K sets up to max(K), and the traces the
    selection gain compares. Nothing else is judged."""
    ranked = rank_by_confidence([t.confidence for t in traces])
    needed: set[int] = set()
    if config.estimator == "topk":
        needed.update(ranked[: kept_count(len(ranked), max(config.k_values))])
    else:
        for members in _bins(ranked, config):
            needed.update(members)
    if config.selection_gain:
        for group in _question_groups(traces, ranked).values():
            if len(group) < 2:
                continue
            if config.random_baseline == "mean":
                needed.update(group)
            else:
                needed.update({group[0], _random_member(traces, group, config.seed)})
    return sorted(needed)


def judge_traces(
    traces: Sequence[Trace], indices: Sequence[int], judge: Judge, config: FRSConfig, *, progress: bool = True
) -> None:
    """Judge `traces[i]` for every i in `indices` (one batched call, so the client's concurrency applies) and
    store each result in the trace: `scores` when valid, else `unscored` with the reason."""
    if not indices:
        return
    requests = [
        judge_messages(
            traces[i].problem,
            traces[i].completion,
            traces[i].gold,
            traces[i].correct,
            max_trace_chars=config.max_trace_chars,
        )
        for i in indices
    ]
    results = judge.judge(requests, ReasoningJudgement, desc="FRS judge", progress=progress)
    if len(results) != len(indices):
        raise RuntimeError(f"the judge returned {len(results)} results for {len(indices)} requests")
    for i, result in zip(indices, results, strict=True):
        traces[i].scores, traces[i].unscored = _scores_of(result)


def _scores_of(result: JudgeResult) -> tuple[dict[str, int] | None, str | None]:
    if result.value is None:
        return None, result.unscored or "unscored"
    try:
        value = result.value
        judgement = value if isinstance(value, ReasoningJudgement) else ReasoningJudgement.model_validate(value)
    except Exception:  # a judge that returned something else than the schema: a typed failure, not a crash
        return None, "schema"
    return judgement.model_dump(), None


def summarize(traces: Sequence[Trace], config: FRSConfig, judge_stats: dict[str, Any] | None = None) -> FRSReport:
    """FRS@K, accuracies and selection gain from traces whose judged ones carry `scores` (see `compute_frs`)."""
    ranked = rank_by_confidence([t.confidence for t in traces])
    n = len(ranked)
    kept_at_k = {k: kept_count(n, k) for k in config.k_values}
    at_k: dict[float, float | None] = {}
    dropped_at_k: dict[float, int] = {}
    accuracy_at_k: dict[float, float | None] = {}
    bins = _bins(ranked, config) if config.estimator == "bins" else None
    for k, keep in kept_at_k.items():
        kept = ranked[:keep]
        accuracy_at_k[k] = _accuracy(traces[i] for i in kept)
        if bins is None:
            scores = [traces[i].rs for i in kept]
            valid = [s for s in scores if s is not None]
            at_k[k] = _mean(valid)
            dropped_at_k[k] = len(scores) - len(valid)
        else:
            at_k[k], dropped_at_k[k] = _bin_estimate(traces, ranked, bins, keep)
    judged = [t for t in traces if t.scores is not None or t.unscored is not None]
    gain, questions, dropped = None, 0, 0
    if config.selection_gain and judged:  # without any judgement there is nothing to compare
        gain, questions, dropped = _selection_gain(traces, ranked, config)
    confidences = [t.confidence for t in traces if t.confidence is not None]
    return FRSReport(
        k_percent=config.k_percent,
        score=at_k.get(config.k_percent),
        at_k=at_k,
        accuracy=_accuracy(traces),
        accuracy_kept=accuracy_at_k.get(config.k_percent),
        accuracy_at_k=accuracy_at_k,
        selection_gain=gain,
        selection_gain_questions=questions,
        selection_gain_dropped=dropped,
        n_problems=len({t.problem_id for t in traces}),
        n_traces=len(traces),
        n_ranked=n,
        n_no_confidence=len(traces) - n,
        n_unparseable_gold=sum(t.correct is None for t in traces),
        kept_at_k=kept_at_k,
        dropped_at_k=dropped_at_k,
        n_judged=len(judged),
        n_scored=sum(t.scores is not None for t in traces),
        unscored=dict(Counter(t.unscored for t in judged if t.unscored is not None)),
        mean_confidence=_mean(confidences),
        estimator=config.estimator,
        random_baseline=config.random_baseline,
        judge=judge_stats,
    )


# -- helpers --------------------------------------------------------------------------------------------------------


def _mean(values: Sequence[float]) -> float | None:
    return math.fsum(values) / len(values) if values else None


def _accuracy(traces) -> float | None:
    known = [t.correct for t in traces if t.correct is not None]
    return sum(known) / len(known) if known else None


def _hash_int(*parts: object) -> int:
    """A process-independent hash (Python's `hash` is salted per process)."""
    return int.from_bytes(hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()[:8], "big")


def _question_groups(traces: Sequence[Trace], ranked: Sequence[int]) -> dict[str, list[int]]:
    """Ranked traces of each question, most confident first."""
    groups: dict[str, list[int]] = defaultdict(list)
    for i in ranked:
        groups[traces[i].problem_id].append(i)
    return groups


def _random_member(traces: Sequence[Trace], group: Sequence[int], seed: int) -> int:
    """One trace of the question, uniform over its ranked traces (the most confident included), fixed by the seed."""
    members = sorted(group)
    return members[_hash_int(seed, "random", traces[members[0]].problem_id) % len(members)]


def _selection_gain(traces: Sequence[Trace], ranked: Sequence[int], config: FRSConfig) -> tuple[float | None, int, int]:
    gains, dropped = [], 0
    for group in _question_groups(traces, ranked).values():
        if len(group) < 2:
            continue
        if config.random_baseline == "mean":
            scored = [i for i in group if traces[i].rs is not None]  # "valid traces": ranked and scored
            if len(scored) < 2:
                dropped += 1
                continue
            gains.append(traces[scored[0]].rs - _mean([traces[i].rs for i in scored]))
        else:
            top, pick = traces[group[0]].rs, traces[_random_member(traces, group, config.seed)].rs
            if top is None or pick is None:
                dropped += 1
                continue
            gains.append(top - pick)
    return _mean(gains), len(gains), dropped


def _bins(ranked: Sequence[int], config: FRSConfig) -> list[list[int]]:
    """The judged sample of each equal-count confidence bin that overlaps the top max(K)% (ranked order).

    Bin b holds ranked positions [floor(b N / B), floor((b + 1) N / B)); its sample is the `max_per_bin` members
    with the smallest seeded hash (all of them when the bin is small). Bins past the top max(K)% are empty lists.
    """
    n, n_bins = len(ranked), config.n_bins
    reach = kept_count(n, max(config.k_values))
    position = {i: r for r, i in enumerate(ranked)}
    bins = []
    for b in range(n_bins):
        lo, hi = b * n // n_bins, (b + 1) * n // n_bins
        if lo >= reach:
            bins.append([])
            continue
        members = list(ranked[lo:hi])
        members.sort(key=lambda i: _hash_int(config.seed, "bin", i))
        bins.append(sorted(members[: config.max_per_bin], key=position.__getitem__))
    return bins


def _bin_estimate(
    traces: Sequence[Trace], ranked: Sequence[int], bins: Sequence[Sequence[int]], keep: int
) -> tuple[float | None, int]:
    """FRS@K by the bin estimator: sum over bins of w_b * mean RS of the bin's judged sample, w_b = the bin's share
    of the top `keep` ranked positions; bins without any score are left out and the weights renormalised.
    Returns (estimate, number of sampled traces in overlapping bins without a score)."""
    n, n_bins = len(ranked), len(bins)
    weighted, weight_total, dropped = 0.0, 0.0, 0
    for b, sample in enumerate(bins):
        lo, hi = b * n // n_bins, (b + 1) * n // n_bins
        overlap = max(0, min(hi, keep) - lo)
        if overlap == 0 or not sample:
            continue
        scores = [traces[i].rs for i in sample]
        valid = [s for s in scores if s is not None]
        dropped += len(scores) - len(valid)
        if valid:
            weighted += overlap * _mean(valid)
            weight_total += overlap
    return (weighted / weight_total if weight_total else None), dropped
