"""How well a step scorer agrees with the step oracle: ProcessBench-style labels for evaluating learned scorers (PUM,
PiCSAR, LLM judges) on step-checkable problems (docs/architecture.md "Step oracle").

**Units.** Every scorer is read on the oracle's steps: `step_units(completion, labels)` cuts a completion into one
piece per written step (`procrl.rewards.oracle.scorer.step_chunks`: piece k ends where step k's result ends; text
before the first step belongs to it, text after the last step to the last), so piece k holds step k and a prefix
through piece k is "the solution up to step k". A scorer gives one score per piece, higher = better: a PUM the
prefix utility U(x, pieces 0..k) (`pum_scores`), PiCSAR its log-probability over piece k's tokens, an LLM judge its
verdict on piece k given the pieces before. A completion without a step has no unit.

**First-error detection** (ProcessBench, Zheng et al. 2024, arXiv 2412.06559). A scorer's predicted first error is
the first step whose score is < threshold, None ("no error") when there is none (`predict_first_error`; a NaN score,
an unscored step, never flags). Over completions with at least one step: acc_erroneous = the share of erroneous
completions (oracle `first_error` not None) whose prediction is exactly `first_error`; acc_correct = the share of
the others predicted None; F1 = 2·a·c/(a + c), their harmonic mean (0 when both are 0; None when a class is
empty). Completions without steps are left out and counted. The threshold is given, or the one that maximises F1 on
a dev split (`choose_threshold`).

**Within-problem AUROC.** Per problem, `procrl.evals.stats.auroc` of the completion scores of the completions the
oracle marks error-free (ProcessAcc = 1 and no error step, `is_error_free`) against the others'; averaged over the
problems that have both (the rest are undefined: left out and counted). **Step AUROC**: `auroc` of the per-step
scores of valid steps against invalid ones (or of steps without error against error steps), pooled over all steps.
Unscored values (None, NaN) are left out and counted. Intervals are percentile-bootstrap 95% over problems
(`procrl.evals.stats`), None when a value is undefined or `resamples` is 0.

    >>> from procrl.rewards.oracle import gold_steps_from_json, oracle_labels
    >>> gold = gold_steps_from_json('[[14,"+",7,21],[21,"-",9,12]]')
    >>> texts = ["14 + 7 = 21.\\n21 - 9 = 12.", "14 + 7 = 22.\\n22 - 9 = 13.", "14 + 7 = 21.\\n21 - 9 = 11."]
    >>> labels = [oracle_labels(t, "14 apples, 7 more, 9 eaten", gold) for t in texts]
    >>> [label.first_error for label in labels]
    [None, 0, 1]
    >>> [unit.text for unit in step_units(texts[2], labels[2])]
    ['14 + 7 = 21', '.\\n21 - 9 = 11.']
    >>> scores = [[0.9, 0.8], [0.2, 0.6], [0.7, 0.3]]  # a scorer's per-step scores, one per oracle step
    >>> result = first_error_detection(scores, labels, threshold=0.5, resamples=0)
    >>> result.acc_erroneous, result.acc_correct, result.f1
    (1.0, 1.0, 1.0)
    >>> within_problem_auroc([0.8, 0.2, 0.3], labels, ["p"] * 3, resamples=0).auroc  # error-free vs the others
    1.0
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from procrl.evals.stats import BOOTSTRAP_RESAMPLES, auroc, bootstrap_interval, bootstrap_mean_interval
from procrl.rewards.oracle import OracleLabels
from procrl.rewards.oracle.scorer import step_chunks
from procrl.rewards.pum import PrefixUtilityModel
from procrl.rewards.pum_rewards import PUMReward
from procrl.rewards.steps import Step

__all__ = [
    "FirstErrorDetection",
    "StepAUROC",
    "WithinProblemAUROC",
    "choose_threshold",
    "first_error_detection",
    "is_error_free",
    "predict_first_error",
    "pum_scores",
    "step_auroc",
    "step_units",
    "within_problem_auroc",
]

Interval = tuple[float, float] | None


def step_units(completion: str, labels: OracleLabels) -> list[Step]:
    """The pieces a step scorer scores: one per oracle step, tiling `completion` (module docstring); [] without
    steps. `labels` must be the oracle's labels of this very text."""
    return step_chunks(completion, labels) if labels.steps else []


def is_error_free(labels: OracleLabels) -> bool:
    """The oracle's "correct" completion for AUROC: ProcessAcc = 1 and no error step."""
    return labels.first_error is None and labels.process_acc == 1.0


def predict_first_error(step_scores: Sequence[float], threshold: float) -> int | None:
    """The first step whose score is < `threshold`; None when none is (NaN never is).

    >>> predict_first_error([0.9, 0.4, 0.1], 0.5), predict_first_error([0.9, float("nan")], 0.5)
    (1, None)
    """
    return next((k for k, s in enumerate(step_scores) if s < threshold), None)


@dataclass(frozen=True)
class FirstErrorDetection:
    """First-error detection at one threshold (module docstring); None = undefined (an empty class).

    Attributes:
        threshold: the step score below which a step is flagged.
        acc_erroneous: share of erroneous completions whose predicted first error is the oracle's.
        acc_correct: share of completions without an error step predicted to have none.
        f1: their harmonic mean (ProcessBench's F1).
        n_erroneous, n_correct: completions of each class; n_no_steps: completions without a step, left out.
        intervals: "acc_erroneous", "acc_correct", "f1" -> bootstrap 95% interval over problems (None when
            undefined); empty when no bootstrap was asked for.
    """

    threshold: float
    acc_erroneous: float | None
    acc_correct: float | None
    f1: float | None
    n_erroneous: int
    n_correct: int
    n_no_steps: int
    intervals: dict[str, Interval] = field(default_factory=dict)


@dataclass(frozen=True)
class WithinProblemAUROC:
    """Mean within-problem AUROC of completion scores, error-free against the others.

    Attributes:
        auroc: the mean over `n_problems`; None when no problem has both classes.
        interval: bootstrap 95% interval over those problems (None: undefined or not asked for).
        n_problems: problems with a scored error-free and a scored other completion.
        n_undefined: problems without both (left out).
        n_unscored: completions without a score (None or NaN; left out).
    """

    auroc: float | None
    interval: Interval
    n_problems: int
    n_undefined: int
    n_unscored: int


@dataclass(frozen=True)
class StepAUROC:
    """Pooled step-level AUROC of per-step scores against the oracle's step labels.

    Attributes:
        auroc: P(score of a positive step > score of a negative one) + ties/2; None without both classes.
        interval: bootstrap 95% interval over problems (None: undefined or not asked for).
        positive: what a positive step is: "valid" (its arithmetic holds) or "no_error" (valid and grounded).
        n_positive, n_negative: scored steps of each class; n_unscored: steps with a NaN score (left out).
    """

    auroc: float | None
    interval: Interval
    positive: str
    n_positive: int
    n_negative: int
    n_unscored: int


def _check_step_scores(step_scores: Sequence[Sequence[float]], labels: Sequence[OracleLabels]) -> None:
    if len(step_scores) != len(labels):
        raise ValueError(f"{len(step_scores)} score lists for {len(labels)} labelled completions; give one each")
    for i, (scores, label) in enumerate(zip(step_scores, labels, strict=True)):
        if len(scores) != len(label.steps):
            raise ValueError(
                f"completion {i}: {len(scores)} step scores for {len(label.steps)} oracle steps; score the units "
                "of step_units(completion, labels), one score each"
            )


def _units(problem_ids: Sequence[str] | None, n: int) -> tuple[list[int], int]:
    """Each completion's bootstrap unit (its problem; each completion alone without problem ids) and their count."""
    if problem_ids is None:
        return list(range(n)), n
    if len(problem_ids) != n:
        raise ValueError(f"{len(problem_ids)} problem ids for {n} completions; give one each")
    index: dict[str, int] = {}
    return [index.setdefault(str(p), len(index)) for p in problem_ids], len(index)


def _interval(n_units: int, statistic: Callable[[np.ndarray], float], resamples: int, seed: int) -> Interval:
    if resamples < 1 or n_units < 1:
        return None
    try:
        return bootstrap_interval(n_units, statistic, resamples=resamples, seed=seed)
    except ValueError:  # undefined on every resample
        return None


def _detection_values(err_n, err_hit, cor_n, cor_hit) -> tuple[float | None, float | None, float | None]:
    """(acc_erroneous, acc_correct, F1) from the counts; None where a class is empty."""
    a = float(err_hit) / float(err_n) if err_n else None
    c = float(cor_hit) / float(cor_n) if cor_n else None
    f1 = None if a is None or c is None else (2 * a * c / (a + c) if a + c > 0 else 0.0)
    return a, c, f1


def first_error_detection(
    step_scores: Sequence[Sequence[float]],
    labels: Sequence[OracleLabels],
    threshold: float,
    *,
    problem_ids: Sequence[str] | None = None,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = 0,
) -> FirstErrorDetection:
    """ProcessBench's first-error accuracies and F1 of a scorer at `threshold` (module docstring).

    Args:
        step_scores: per completion, one score per oracle step (`step_units`), higher = better; NaN = unscored.
        labels: the oracle's labels of each completion.
        threshold: a step with a score < threshold is flagged.
        problem_ids: each completion's problem, the bootstrap's unit (None: each completion alone).
        resamples: bootstrap draws for the intervals (0: none); seed: their seed.

    Raises:
        ValueError: lengths that do not match (a score list per completion, a score per oracle step), or a NaN
            threshold.
    """
    if math.isnan(threshold):
        raise ValueError("threshold must be a number, got NaN")
    _check_step_scores(step_scores, labels)
    units, n_units = _units(problem_ids, len(labels))
    counts = np.zeros((n_units, 4))  # per unit: erroneous, erroneous hit, correct, correct hit
    no_steps = 0
    for unit, scores, label in zip(units, step_scores, labels, strict=True):
        if not label.steps:
            no_steps += 1
            continue
        hit = predict_first_error(scores, threshold) == label.first_error
        column = 0 if label.first_error is not None else 2
        counts[unit, column] += 1
        counts[unit, column + 1] += hit

    def statistic(name: int) -> Callable[[np.ndarray], float]:
        def value(idx: np.ndarray) -> float:
            result = _detection_values(*counts[idx].sum(axis=0))[name]
            return math.nan if result is None else result

        return value

    a, c, f1 = _detection_values(*counts.sum(axis=0))
    intervals = {}
    if resamples > 0:
        for k, (name, point) in enumerate([("acc_erroneous", a), ("acc_correct", c), ("f1", f1)]):
            intervals[name] = None if point is None else _interval(n_units, statistic(k), resamples, seed)
    total = counts.sum(axis=0)
    return FirstErrorDetection(float(threshold), a, c, f1, int(total[0]), int(total[2]), no_steps, intervals)


def choose_threshold(step_scores: Sequence[Sequence[float]], labels: Sequence[OracleLabels]) -> float:
    """The threshold that maximises first-error F1 on these (dev) completions; among equal F1s the smallest.

    The candidates are the smallest finite score (flags nothing), the midpoints between consecutive distinct finite
    scores, and the float just above the largest (flags every finite step): every distinct prediction is one of
    them. Completion k is a hit exactly for thresholds in an interval (erroneous with first error e: (s_e,
    min(s_0..s_{e-1})]; without error: (-inf, min over its steps]; NaN counts as +inf there), so all candidates are
    counted in O((candidates + completions) log candidates).

    Raises:
        ValueError: mismatched lengths, no finite step score, or no erroneous or no correct completion with steps
            (F1 is undefined; the message says which).
    """
    _check_step_scores(step_scores, labels)
    finite = sorted({float(s) for scores in step_scores for s in scores if math.isfinite(s)})
    if not finite:
        raise ValueError("choose_threshold: no finite step score to choose a threshold from")
    values = np.asarray(finite)
    candidates = np.concatenate([values[:1], (values[:-1] + values[1:]) / 2, [math.nextafter(finite[-1], math.inf)]])
    err_hits, cor_hits = np.zeros(len(candidates) + 1), np.zeros(len(candidates) + 1)
    n_err = n_cor = 0
    for scores, label in zip(step_scores, labels, strict=True):
        if not label.steps:
            continue
        guarded = [math.inf if math.isnan(s) else float(s) for s in scores]
        if label.first_error is None:
            n_cor += 1
            lo, hi, hits = -math.inf, min(guarded), cor_hits
        else:
            n_err += 1
            e = label.first_error
            lo, hi, hits = guarded[e], min(guarded[:e], default=math.inf), err_hits
        start, end = np.searchsorted(candidates, lo, side="right"), np.searchsorted(candidates, hi, side="right")
        if start < end:  # hit for candidates[start:end], i.e. lo < t <= hi
            hits[start] += 1
            hits[end] -= 1
    if not n_err or not n_cor:
        raise ValueError(
            f"choose_threshold: F1 needs erroneous and correct completions with steps, got {n_err} and {n_cor}"
        )
    a, c = np.cumsum(err_hits)[:-1] / n_err, np.cumsum(cor_hits)[:-1] / n_cor
    with np.errstate(invalid="ignore", divide="ignore"):
        f1 = np.where(a + c > 0, 2 * a * c / (a + c), 0.0)
    return float(candidates[int(np.argmax(f1))])  # argmax: the first (smallest) of equal maxima


def within_problem_auroc(
    completion_scores: Sequence[float | None],
    labels: Sequence[OracleLabels],
    problem_ids: Sequence[str],
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = 0,
) -> WithinProblemAUROC:
    """Per problem, the AUROC of completion scores separating error-free completions (`is_error_free`) from the
    others, averaged over the problems that have both (module docstring).

    Raises:
        ValueError: lengths that do not match.
    """
    if not len(completion_scores) == len(labels) == len(problem_ids):
        raise ValueError(
            f"{len(completion_scores)} scores, {len(labels)} labels and {len(problem_ids)} problem ids; give one each"
        )
    groups: dict[str, tuple[list[float], list[float]]] = defaultdict(lambda: ([], []))
    unscored = 0
    for score, label, problem in zip(completion_scores, labels, problem_ids, strict=True):
        group = groups[str(problem)]  # every problem counts, also one whose completions are all unscored
        if score is None or math.isnan(score):
            unscored += 1
            continue
        group[0 if is_error_free(label) else 1].append(float(score))
    values = [v for pos, neg in groups.values() if (v := auroc(pos, neg)) is not None]
    interval = bootstrap_mean_interval(values, resamples=resamples, seed=seed) if values and resamples > 0 else None
    mean = math.fsum(values) / len(values) if values else None
    return WithinProblemAUROC(mean, interval, len(values), len(groups) - len(values), unscored)


def step_auroc(
    step_scores: Sequence[Sequence[float]],
    labels: Sequence[OracleLabels],
    *,
    positive: Literal["valid", "no_error"] = "valid",
    problem_ids: Sequence[str] | None = None,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = 0,
) -> StepAUROC:
    """The AUROC of per-step scores separating positive steps (`positive`: "valid" = the written arithmetic holds,
    "no_error" = valid and grounded) from the others, pooled over every step of every completion.

    Raises:
        ValueError: mismatched lengths, or an unknown `positive`.
    """
    if positive not in ("valid", "no_error"):
        raise ValueError(f"positive must be 'valid' or 'no_error', got {positive!r}")
    _check_step_scores(step_scores, labels)
    units, n_units = _units(problem_ids, len(labels))
    per_unit: list[tuple[list[float], list[float]]] = [([], []) for _ in range(n_units)]
    unscored = 0
    for unit, scores, label in zip(units, step_scores, labels, strict=True):
        for score, step in zip(scores, label.steps, strict=True):
            if math.isnan(score):
                unscored += 1
                continue
            good = step.valid if positive == "valid" else not step.is_error
            per_unit[unit][0 if good else 1].append(float(score))
    pos = [s for p, _ in per_unit for s in p]
    neg = [s for _, n in per_unit for s in n]
    value = auroc(pos, neg)

    def statistic(idx: np.ndarray) -> float:
        resampled = auroc([s for u in idx for s in per_unit[u][0]], [s for u in idx for s in per_unit[u][1]])
        return math.nan if resampled is None else resampled

    interval = None if value is None else _interval(n_units, statistic, resamples, seed)
    return StepAUROC(value, interval, positive, len(pos), len(neg), unscored)


def pum_scores(
    pum: PrefixUtilityModel,
    questions: Sequence[str],
    completions: Sequence[str],
    labels: Sequence[OracleLabels],
    *,
    include_empty: bool = False,
) -> tuple[list[list[float]], list[float | None]]:
    """A PUM's scores on the oracle's units: per completion, U(x, pieces 0..k) for each step k (`step_units`, one
    forward pass per completion, `PrefixUtilityModel.score_steps`; NaN for a step whose end lies beyond the PUM's
    budget), and U(x, y) of the whole completion (`procrl.rewards.pum_rewards.PUMReward`, mode "full": None for an
    empty completion or one that does not fit).

    Args:
        pum: a loaded `PrefixUtilityModel`.
        questions: each completion's problem text (the `question` column the PUM was trained on).
        completions: the completion texts the labels were computed on.
        labels: the oracle's labels of each completion.
        include_empty: also U(x, empty prefix) in front of each row with steps (k + 1 values for k steps), from which
            the step increments U_k - U_{k-1} follow (the mixed-mode process reward).

    Returns:
        (step_scores, completion_scores): inputs of `first_error_detection` / `step_auroc` and of
        `within_problem_auroc`.

    Raises:
        ValueError: lengths that do not match.
    """
    if not len(questions) == len(completions) == len(labels):
        raise ValueError(f"{len(questions)} questions, {len(completions)} completions, {len(labels)} labels")
    units = [step_units(text, label) for text, label in zip(completions, labels, strict=True)]
    with_steps = [i for i, u in enumerate(units) if u]
    step_scores: list[list[float]] = [[] for _ in completions]
    if with_steps:
        rows = pum.score_steps(
            [questions[i] for i in with_steps], [units[i] for i in with_steps], include_empty=include_empty
        )
        for i, row in zip(with_steps, rows, strict=True):
            step_scores[i] = [float(v) for v in row]
    completion_scores = PUMReward(pum, mode="full")(completions=list(completions), question=list(questions))
    return step_scores, completion_scores
