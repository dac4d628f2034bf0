"""Bootstrap intervals over questions for the StepGap verifier metrics (`procrl.evals.stepgap.evaluate`; StepGap,
arXiv 2605.24733, whose small annotated set makes the intervals of competing verifiers overlap).

`metric_intervals` is the percentile bootstrap of `procrl.evals.stats.bootstrap_interval` (Efron & Tibshirani 1993, §13.3)
over QUESTIONS, for sF1, Q-F1, BA and typed macro-F1 (`CI_METRICS`). Every resample recomputes the metrics on the
resampled questions; to keep 1000 resamples cheap they are computed from per-question counts (`question_counts`),
which add up over any multiset of questions, with the formulas of `evaluate.compute_metrics` (F1 = 2PR / (P + R) =
2tp / (2tp + fp + fn); BA = the mean of TPR and TNR over the classes present). A metric that is undefined on a
resample (`compute_metrics` gives None: sF1 / Q-F1 without any gold or predicted gap, every metric without steps) is
left out of the interval, never scored 0; a metric undefined on every resample gets no interval.

`paired_difference_intervals` is the paired bootstrap of the DIFFERENCE a − b of two predictions on the same
questions: each resample draws one multiset of questions and scores both on it (the same indices, since the same seed
draws them), so the question-to-question variation both share cancels; this is what decides whether removing a stage
of the verifier changes a metric, which two overlapping per-row intervals cannot.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from procrl.evals.stats import BOOTSTRAP_RESAMPLES, bootstrap_interval
from procrl.rewards.stepgap.verifier import GAP_LABELS, TYPED_LABELS

__all__ = ["CI_METRICS", "TYPED_LABELS", "metric_intervals", "paired_difference_intervals", "question_counts"]

CI_METRICS = ("sF1", "Q-F1", "BA", "typed_macro_f1")  # the metrics `metric_intervals` gives intervals for

# Per-question counts: step gap tp/fp/fn/tn, question gap tp/fp/fn, then tp/fp/fn of each typed label.
_N_COUNTS = 7 + 3 * len(TYPED_LABELS)


def question_counts(gold: Sequence[Sequence[str]], pred: Sequence[Sequence[str]]) -> np.ndarray:
    """The counts `compute_metrics`' sF1, Q-F1, BA and typed macro-F1 are made of, one row per question: int array
    `(n_questions, 19)`, columns step-gap tp, fp, fn, tn; question-gap tp, fp, fn; tp, fp, fn of NONE, CC, IE, MB.
    Summing the rows of any multiset of questions gives that multiset's counts (`_from_counts` turns them into
    metrics), so a bootstrap resample costs one sum.

    Raises:
        ValueError: mismatched shapes or an unknown gold label.
    """
    if len(gold) != len(pred) or any(len(g) != len(p) for g, p in zip(gold, pred, strict=True)):
        raise ValueError("question_counts: gold and pred must have the same questions and steps")
    rows = []
    for g_row, p_row in zip(gold, pred, strict=True):
        if bad := set(g_row) - set(TYPED_LABELS):
            raise ValueError(f"question_counts: unknown gold labels {sorted(bad)}; gold must be one of {TYPED_LABELS}")
        pairs = [(g in GAP_LABELS, p in GAP_LABELS) for g, p in zip(g_row, p_row, strict=True)]
        q_gold, q_pred = any(g for g, _ in pairs), any(p for _, p in pairs)
        row = [sum(g and p for g, p in pairs), sum(p and not g for g, p in pairs), sum(g and not p for g, p in pairs)]
        row += [len(pairs) - sum(row), q_gold and q_pred, q_pred and not q_gold, q_gold and not q_pred]
        for label in TYPED_LABELS:
            hits = [(g == label, p == label) for g, p in zip(g_row, p_row, strict=True)]
            row += [sum(g and p for g, p in hits), sum(p and not g for g, p in hits), sum(g and not p for g, p in hits)]
        rows.append(row)
    return np.asarray(rows, dtype=np.int64).reshape(len(gold), _N_COUNTS)


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """num / den elementwise, 0.0 where den == 0 (a term of a sum; `_from_counts` marks undefined metrics NaN)."""
    num, den = np.asarray(num, dtype=np.float64), np.asarray(den, dtype=np.float64)
    return np.divide(num, den, out=np.zeros(np.broadcast(num, den).shape), where=den > 0)


def _from_counts(counts: np.ndarray) -> dict[str, np.ndarray]:
    """sF1, Q-F1, BA and typed macro-F1 of summed `question_counts` `(..., 19)` (F1 = 2tp / (2tp + fp + fn), BA =
    the mean of the rates of the classes present), each of shape `counts.shape[:-1]`. NaN where `compute_metrics`
    gives None: sF1 and Q-F1 where 2tp + fp + fn = 0 (a resample without any gold or predicted gap), BA and typed
    macro-F1 without steps; `bootstrap_interval` leaves NaN out. Typed macro-F1 keeps `compute_metrics`' 0 for a label
    neither gold nor predicted, so the interval brackets the point value."""
    c = np.moveaxis(np.asarray(counts), -1, 0)

    def f1(tp, fp, fn):
        return _ratio(2 * tp, 2 * tp + fp + fn)

    def undefined_where_empty(value, den):  # an empty denominator: NaN, left out of the interval, not scored 0
        return np.where(np.asarray(den) > 0, value, np.nan)

    pos, neg = c[0] + c[2], c[3] + c[1]
    typed = sum(f1(c[7 + 3 * k], c[8 + 3 * k], c[9 + 3 * k]) for k in range(len(TYPED_LABELS)))
    return {
        "sF1": undefined_where_empty(f1(c[0], c[1], c[2]), 2 * c[0] + c[1] + c[2]),
        "Q-F1": undefined_where_empty(f1(c[4], c[5], c[6]), 2 * c[4] + c[5] + c[6]),
        "BA": undefined_where_empty(
            _ratio(_ratio(c[0], pos) + _ratio(c[3], neg), (pos > 0).astype(int) + (neg > 0).astype(int)), pos + neg
        ),
        "typed_macro_f1": undefined_where_empty(typed / len(TYPED_LABELS), pos + neg),
    }


def metric_intervals(
    gold: Sequence[Sequence[str]],
    preds: Sequence[Sequence[Sequence[str]]],
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    confidence: float = 0.95,
    seed: int = 0,
) -> dict[str, list[float]]:
    """Percentile bootstrap intervals over QUESTIONS of sF1, Q-F1, BA and typed macro-F1 (`CI_METRICS`).

    `procrl.evals.stats.bootstrap_interval(len(gold), statistic, seed=seed)` per metric; the statistic recomputes the
    metric on the resampled questions (repeats counted) of every prediction in `preds` and takes their MEAN (one
    prediction: its own metric; the random baseline's draws: their mean, as `baselines` reports it). The four
    metrics share one computation per resample (the same seed draws the same indices for each).

    Args:
        gold: gold labels `[question][step]`.
        preds: one or more predictions, each `[question][step]` like `gold`.
        resamples, confidence, seed: as `bootstrap_interval`.

    Returns:
        {metric: [low, high]} (fractions, like `compute_metrics`); a metric undefined on every resample (sF1 or
        Q-F1 where no question has a gold or a predicted gap; every metric when no question has a step) is left out.

    Raises:
        ValueError: no prediction, no question, mismatched shapes or an unknown gold label, or a bad `resamples` /
            `confidence` (`bootstrap_interval`).
    """
    if not preds:
        raise ValueError("metric_intervals: no predictions")
    counts = np.stack([question_counts(gold, pred) for pred in preds])  # (n_preds, n_questions, 19)
    memo: dict[bytes, dict[str, float]] = {}

    def scalars(idx: np.ndarray) -> dict[str, float]:
        key = idx.tobytes()
        if key not in memo:
            memo[key] = {k: float(v.mean()) for k, v in _from_counts(counts[:, idx].sum(axis=1)).items()}
        return memo[key]

    if len(gold) == 0:
        raise ValueError("metric_intervals: no items to resample (no questions)")
    out = {}
    for name in CI_METRICS:
        try:
            low, high = bootstrap_interval(
                len(gold), lambda idx, name=name: scalars(idx)[name], resamples=resamples, confidence=confidence,
                seed=seed,
            )  # fmt: skip
        except ValueError as error:
            if "not finite" not in str(error):
                raise
            continue  # undefined on every resample (sF1 / Q-F1 of a set without any gap): no interval
        out[name] = [low, high]
    return out


def paired_difference_intervals(
    gold: Sequence[Sequence[str]],
    pred_a: Sequence[Sequence[str]],
    pred_b: Sequence[Sequence[str]],
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    confidence: float = 0.95,
    seed: int = 0,
) -> dict[str, dict[str, float | None]]:
    """Paired percentile bootstrap over QUESTIONS of the difference a − b of sF1, Q-F1, BA and typed macro-F1
    (`CI_METRICS`) between two predictions of the same gold.

    The point value is d = m(a) − m(b) on all questions (m from the summed `question_counts`, the formulas of
    `compute_metrics`). Each resample draws one multiset of questions (`bootstrap_interval(len(gold), ..., seed=seed)`,
    so the same seed draws the same indices as `metric_intervals`) and recomputes d on it, both sides on the SAME
    questions; the interval is the percentiles of those d. A resample where the metric is undefined for either side
    (NaN in `_from_counts`: sF1 / Q-F1 without any gold or predicted gap, every metric without steps) is left out of
    the difference, never scored 0.

    Args:
        gold: gold labels `[question][step]`.
        pred_a, pred_b: two predictions `[question][step]` like `gold`.
        resamples: bootstrap draws; 0 gives the point differences only (low and high None). confidence, seed: as
            `bootstrap_interval`.

    Returns:
        {metric: {"diff": d on all questions, "low": ..., "high": ...}} (fractions: 0.05 is 5 points; positive: a
        scores higher). A metric undefined for either side on all questions (then it is on every resample too) gets
        no entry; one defined on all questions but on no resample (only possible with very few resamples) keeps its
        "diff" with low and high None.

    Raises:
        ValueError: no question, mismatched shapes or an unknown gold label (as `metric_intervals`), or `resamples`
            < 0 or a bad `confidence` (`bootstrap_interval`).

    >>> gold = [["CC"], ["NONE"], ["IE"]]
    >>> out = paired_difference_intervals(gold, [["CC"], ["NONE"], ["IE"]], [["NONE"], ["NONE"], ["IE"]], resamples=0)
    >>> round(out["sF1"]["diff"], 4), out["sF1"]["low"]  # sF1 1 vs 2/3 (b misses one of two gaps)
    (0.3333, None)
    """
    if len(gold) == 0:
        raise ValueError("paired_difference_intervals: no items to resample (no questions)")
    if resamples < 0:
        raise ValueError(f"paired_difference_intervals: resamples must be >= 0 (0: no interval), got {resamples}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"paired_difference_intervals: confidence must be in (0, 1), got {confidence}")
    counts = np.stack([question_counts(gold, pred_a), question_counts(gold, pred_b)])  # (2, n_questions, 19)
    memo: dict[bytes, dict[str, float]] = {}

    def differences(idx: np.ndarray) -> dict[str, float]:  # NaN where either side is undefined
        key = idx.tobytes()
        if key not in memo:
            memo[key] = {k: float(v[0] - v[1]) for k, v in _from_counts(counts[:, idx].sum(axis=1)).items()}
        return memo[key]

    point = differences(np.arange(len(gold)))
    out: dict[str, dict[str, float | None]] = {}
    for name in CI_METRICS:
        if not np.isfinite(point[name]):
            continue  # undefined for a or b on all questions, hence on every resample: no entry
        low = high = None
        if resamples:
            try:
                low, high = bootstrap_interval(
                    len(gold), lambda idx, name=name: differences(idx)[name], resamples=resamples,
                    confidence=confidence, seed=seed,
                )  # fmt: skip
            except ValueError as error:
                if "not finite" not in str(error):
                    raise
        out[name] = {"diff": point[name], "low": low, "high": high}
    return out
