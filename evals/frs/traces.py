"""FRS data (part of `procrl.evals.frs`): one judged `Trace`, the `FRSConfig` of the computation and the
`FRSReport` it gives.

A judged trace keeps two readings of the judge: `scores`, the four validated integer scores (RS, `Trace.rs`), and
`expected_scores`, the four G-Eval expected scores from the judge's probabilities (RS_expected,
`Trace.rs_expected`; only with a backend that returns log-probs). The report carries both: `at_k` / `score` /
`selection_gain` / `rs_auc` from RS, and `at_k_expected` / `score_expected` / `selection_gain_expected` /
`rs_expected_auc` from RS_expected (None unless every scored trace has expected scores; `n_scored_without_probs`
counts those that do not).

`write_traces` / `read_traces` keep judged traces in a JSONL file, one `Trace.to_dict()` per line (`procrl frs`'s
`judged_traces.jsonl`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from procrl.evals.frs.judging import reasoning_score
from procrl.utils import json_safe

__all__ = ["FRSReport", "Trace", "read_traces", "trace_table", "write_traces"]


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
        scores: the judge's scores once judged and valid (integers 1-5 by dimension, the validated reply: the
            argmax of each score's distribution under greedy decoding), else None.
        unscored: why the judgement failed (the judge client's reason), else None.
        expected_scores: the expected score of each dimension, sum_v p(v) * v over 1-5 (floats in [1, 5], G-Eval;
            `procrl.evals.frs.judging.expected_scores`), when the judge returned probabilities for all four;
            else None.
        gold_steps: the problem's `gold_steps` column (JSON, `procrl.rewards.oracle.gold`) when the data set has one
            (step-checkable problems); what the oracle judge (`judge: oracle`) labels the trace against. None
            otherwise.
        truncated: the trace was cut by the token budget (no EOS); None when unknown. The oracle judge then does not
            take a result at the very end of the text as a step (it may be cut mid-number).
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
    expected_scores: dict[str, float] | None = None
    gold_steps: str | None = None
    truncated: bool | None = None

    @property
    def rs(self) -> float | None:
        """Reasoning score in [0, 100] from `scores`, None when not (validly) judged."""
        return None if self.scores is None else reasoning_score(self.scores)

    @property
    def rs_expected(self) -> float | None:
        """Reasoning score in [0, 100] from `expected_scores` (G-Eval), None without them."""
        return None if self.expected_scores is None else reasoning_score(self.expected_scores)

    def to_dict(self) -> dict[str, Any]:
        """The fields, plus `rs`, plus `rs_expected` when the trace has expected scores.

        `rs_expected` is left out otherwise so that a trace written before judging (`traces.jsonl`) reads back with
        `Trace(**row)` once `rs` is dropped (`procrl.evals.frs.sampling`); `from_dict` drops both."""
        out = dict(asdict(self), rs=self.rs)
        if self.expected_scores is not None:
            out["rs_expected"] = self.rs_expected
        return out

    @classmethod
    def from_dict(cls, row: dict[str, Any]) -> Trace:
        """The inverse of `to_dict` (the derived `rs` and `rs_expected` are dropped).

        Raises:
            TypeError: a key that is neither a field nor a derived value, or a missing field."""
        return cls(**{k: v for k, v in row.items() if k not in ("rs", "rs_expected")})


@dataclass
class FRSReport:
    """FRS of one set of traces (one model on one benchmark). Scores are RS units (0-100); None = nothing scored.

    Attributes:
        score: FRS@k_percent (from RS, the validated scores).
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
        score_expected, at_k_expected, selection_gain_expected: the same from RS_expected (G-Eval expected scores);
            None (every K) unless every scored trace has expected scores.
        n_scored_without_probs: scored traces without expected scores (the backend gave no log-probs for them).
        rs_auc: AUC of RS separating correct from incorrect final answers over the scored traces with a parseable
            gold (Mann-Whitney: P(RS of a correct trace > RS of an incorrect one), ties count 1/2); 0.5 = RS carries
            no information about correctness. None when either class is empty. The scored traces are the judged ones
            (the most confident half plus the selection gain's picks), not a random sample.
        rs_expected_auc: the same for RS_expected (None as `score_expected`).
        auc_n_correct, auc_n_incorrect: the traces of each class behind the AUCs.
        judge_sees_correctness: whether the judge was shown the final-answer check (`FRSConfig`).
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
    score_expected: float | None = None
    at_k_expected: dict[float, float | None] = field(default_factory=dict)
    selection_gain_expected: float | None = None
    n_scored_without_probs: int = 0
    rs_auc: float | None = None
    rs_expected_auc: float | None = None
    auc_n_correct: int = 0
    auc_n_incorrect: int = 0
    judge_sees_correctness: bool = True

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def metrics(self, prefix: str = "frs/") -> dict[str, float]:
        """Scalars for a tracker: score, at_k/<K>, accuracy, accuracy_kept, selection_gain, unscored, judged,
        mean_confidence, rs_auc, and their RS_expected twins (score_expected, at_k_expected/<K>,
        selection_gain_expected, rs_expected_auc). Metrics without a value (None) are left out rather than logged as
        NaN."""
        values: dict[str, float | None] = {
            "score": self.score,
            **{f"at_k/{k}": v for k, v in self.at_k.items()},
            "score_expected": self.score_expected,
            **{f"at_k_expected/{k}": v for k, v in self.at_k_expected.items()},
            "accuracy": self.accuracy,
            "accuracy_kept": self.accuracy_kept,
            "selection_gain": self.selection_gain,
            "selection_gain_expected": self.selection_gain_expected,
            "rs_auc": self.rs_auc,
            "rs_expected_auc": self.rs_expected_auc,
            "unscored": float(sum(self.unscored.values())),
            "judged": float(self.n_judged),
            "mean_confidence": self.mean_confidence,
        }
        return {f"{prefix}{k}": float(v) for k, v in values.items() if v is not None}


def write_traces(path: str | Path, traces: Iterable[Trace]) -> Path:
    """Write `traces` to `path` as JSONL, one `Trace.to_dict()` per line (NaN / inf as null); returns the path."""
    path = Path(path)
    path.write_text("".join(json.dumps(json_safe(t.to_dict())) + "\n" for t in traces))
    return path


def read_traces(path: str | Path) -> list[Trace]:
    """The traces `write_traces` wrote (blank lines skipped).

    Raises:
        FileNotFoundError: no such file.
        ValueError: a line that is not JSON or not a trace (the message names the file and the line).
    """
    traces = []
    for number, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            traces.append(Trace.from_dict(json.loads(line)))
        except (ValueError, TypeError, AttributeError) as error:
            raise ValueError(f"{path}:{number} is not an FRS trace ({type(error).__name__}: {error})") from None
    return traces


def trace_table(traces: Iterable[Trace]) -> tuple[list[str], list[list[Any]]]:
    """(columns, rows) of the judged traces, one row each (problem, trace, confidence, the four scores, RS, RS from the
    G-Eval expected scores (None without the judge's probabilities), correctness); traces never judged are left
    out. The FRS callback's wandb table `frs/traces`.

    >>> judged = Trace("p", "q", "c", "7", True, 0.5, 3, scores={"faithfulness": 5, "utility": 5, "coherence": 5,
    ...     "factuality": 5})
    >>> trace_table([judged, Trace("p", "q", "d", "7", False, 0.2, 3)])[1]   # the second was never judged
    [['p', 'q', 'c', 0.5, 5, 5, 5, 5, 100.0, None, True]]
    """
    columns = ["problem_id", "problem", "trace", "confidence", "faithfulness", "utility", "coherence",
               "factuality", "rs", "rs_expected", "correct"]  # fmt: skip
    rows = []
    for t in traces:
        if t.scores is None and t.unscored is None:  # not judged
            continue
        scores = t.scores or {}
        dims = [scores.get(name) for name in ("faithfulness", "utility", "coherence", "factuality")]
        rows.append([t.problem_id, t.problem, t.completion, t.confidence, *dims, t.rs, t.rs_expected, t.correct])
    return columns, rows
