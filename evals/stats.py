"""The statistics of procrl's results tables, each in one place: the percentile bootstrap over problems
(`bootstrap_interval`, `bootstrap_mean_interval`), the Wilson interval of a proportion (`wilson_interval`), mean and
sample standard deviation (`mean_std`), the ROC AUC of a score (`auroc`), the unbiased pass@k (`pass_at_k`), and the
rule for a number over nothing (`ratio`, `format_estimate`, `MISSING`).

No data is not zero: a rate or mean whose denominator is empty (an accuracy over zero scorable problems, a precision
with nothing predicted positive) is UNDEFINED: None in Python and JSON (`ratio`; JSON has no NaN), "–" (`MISSING`)
in markdown and console tables (`format_estimate`), left out of plots and of a run record's metrics, and it has no
interval (None, never (0, 0) or (0, 1)). Counts stay 0, and a value that is genuinely 0 stays 0 (an F1 with tp = 0
but fp + fn > 0).

Every comparison under docs/results/ resamples PROBLEMS (not samples within a problem) with replacement and takes the
percentile interval of the statistic (Efron & Tibshirani 1993, §13.3). A statistic is a function of the resampled
problem indices, so statistics that re-select over the resample (FRS@K's top-K% traces, AUROC) work the same way as
a plain mean.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence

import numpy as np

__all__ = [
    "BOOTSTRAP_RESAMPLES",
    "MISSING",
    "auroc",
    "bootstrap_interval",
    "bootstrap_mean_interval",
    "format_estimate",
    "mean_std",
    "pass_at_k",
    "ratio",
    "wilson_interval",
]

BOOTSTRAP_RESAMPLES = 1000
MISSING = "–"  # how a table shows an undefined (or not measured) value: never 0
WILSON_Z = 1.959964  # the 97.5% normal quantile: a two-sided 95% interval


def ratio(numerator: float, denominator: float) -> float | None:
    """numerator / denominator, or None (undefined) when the denominator is 0: a rate or mean over nothing.

    >>> ratio(3, 4), ratio(0, 4), ratio(0, 0)
    (0.75, 0.0, None)
    """
    return numerator / denominator if denominator else None


def format_estimate(
    value: float | None, interval: Sequence[float | None] | None = None, spec: str = ".3f", scale: float = 1.0
) -> str:
    """`value * scale` formatted with `spec`, followed by " [low, high]" (also scaled) when `interval` is a pair of
    numbers; `MISSING` ("–") when `value` is None (undefined). An interval that is None or holds a None is not shown.

    >>> format_estimate(0.5, (0.25, 0.75)), format_estimate(0.125, None, ".1f", 100), format_estimate(None, (0, 1))
    ('0.500 [0.250, 0.750]', '12.5', '–')
    """
    if value is None:
        return MISSING
    text = f"{value * scale:{spec}}"
    if interval is None or any(v is None for v in interval):
        return text
    low, high = interval
    return f"{text} [{low * scale:{spec}}, {high * scale:{spec}}]"


def bootstrap_interval(
    n_items: int,
    statistic: Callable[[np.ndarray], float],
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap interval of `statistic` over `n_items` items resampled with replacement.

    Args:
        n_items: how many items (problems) there are.
        statistic: maps an index array `(n_items,)` (int, with repeats) to a float. A resample where it is not
            finite (e.g. an AUROC with one class only) is left out.
        resamples: bootstrap draws; confidence: the interval's coverage (0.95: the 2.5th and 97.5th percentiles);
        seed: `numpy.random.default_rng(seed)`, so the same call gives the same interval.

    Returns:
        (low, high). With one item: (statistic, statistic).

    Raises:
        ValueError: `n_items` < 1, `resamples` < 1, `confidence` outside (0, 1), or no resample with a finite value.

    >>> lo, hi = bootstrap_interval(4, lambda idx: float(np.mean(np.array([0, 0, 1, 1])[idx])), seed=0)
    >>> 0.0 <= lo < 0.5 < hi <= 1.0
    True
    """
    if n_items < 1:
        raise ValueError("bootstrap_interval: no items to resample")
    if resamples < 1:
        raise ValueError(f"bootstrap_interval: resamples must be >= 1, got {resamples}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"bootstrap_interval: confidence must be in (0, 1), got {confidence}")
    if n_items == 1:
        value = float(statistic(np.zeros(1, dtype=np.int64)))
        if not math.isfinite(value):
            raise ValueError("bootstrap_interval: the statistic is not finite on the only item")
        return value, value
    rng = np.random.default_rng(seed)
    values = []
    for _ in range(resamples):
        value = float(statistic(rng.integers(0, n_items, size=n_items)))
        if math.isfinite(value):
            values.append(value)
    if not values:
        raise ValueError("bootstrap_interval: the statistic was not finite on any resample")
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(np.asarray(values), [alpha, 1.0 - alpha])
    return float(low), float(high)


def bootstrap_mean_interval(
    values: Sequence[float],
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float]:
    """`bootstrap_interval` of the mean of per-item `values` (e.g. each problem's 0/1 correctness or its expected
    accuracy over sample subsets).

    Raises:
        ValueError: no values, a non-finite value, or the errors of `bootstrap_interval`.

    >>> bootstrap_mean_interval([0.25, 0.25, 0.25])
    (0.25, 0.25)
    """
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 1 or array.size == 0:
        raise ValueError(f"bootstrap_mean_interval: need a non-empty 1-d sequence, got shape {array.shape}")
    if not np.all(np.isfinite(array)):
        raise ValueError("bootstrap_mean_interval: values must be finite")
    return bootstrap_interval(
        array.size, lambda idx: float(array[idx].mean()), resamples=resamples, confidence=confidence, seed=seed
    )


def wilson_interval(successes: int, n: int, z: float = WILSON_Z) -> tuple[float, float] | None:
    """Wilson score interval (low, high) of a binomial proportion successes/n (95% by default); None when n = 0: no
    trials, no interval (the proportion itself is undefined; `procrl.evals.stats`' rule for a number over nothing).

    >>> [round(x, 4) for x in wilson_interval(7, 20)]
    [0.1812, 0.5671]
    >>> wilson_interval(0, 0) is None
    True
    """
    if n <= 0:
        return None
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def mean_std(values: Sequence[float]) -> tuple[float | None, float | None]:
    """(mean, sample standard deviation with n - 1) of `values`; std None for one value, both None for none.

    >>> [round(x, 4) for x in mean_std([0.3, 0.5])]  # population std would be 0.1
    [0.4, 0.1414]
    """
    if not values:
        return None, None
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else None)


def auroc(positives: Sequence[float], negatives: Sequence[float]) -> float | None:
    """The ROC AUC of a score telling positives from negatives: P(X > Y) + P(X = Y) / 2 for X drawn from `positives`
    and Y from `negatives` (the Mann-Whitney U statistic over n_pos * n_neg); None (undefined) when either is empty.
    Exact, in O(n log n): U = (sum of the positives' mid-ranks in the pooled sample) - n_pos (n_pos + 1) / 2, a sum
    of halves, so it equals counting all n_pos * n_neg pairs. The caller leaves out what has no score; a NaN that
    reaches it wins and ties no pair (as a pairwise count of `x > y` and `x == y` would have it).

    >>> auroc([3, 2], [1, 2])  # pairs: 3>1, 3>2, 2>1, 2=2 -> (3 + 0.5) / 4
    0.875
    >>> auroc([1.0], []) is None
    True
    """
    if not positives or not negatives:
        return None
    pos = np.asarray(positives, dtype=np.float64)
    neg = np.asarray(negatives, dtype=np.float64)
    pos, neg = pos[~np.isnan(pos)], neg[~np.isnan(neg)]  # a NaN pair counts 0 in the denominator below
    wins = 0.0
    if pos.size and neg.size:
        _, inverse, counts = np.unique(np.concatenate([pos, neg]), return_inverse=True, return_counts=True)
        mid_ranks = np.cumsum(counts) - (counts - 1) / 2.0  # 1-based rank of each distinct value, ties averaged
        wins = float(mid_ranks[inverse[: pos.size]].sum()) - pos.size * (pos.size + 1) / 2.0
    return wins / (len(positives) * len(negatives))


def pass_at_k(n: int, correct: int, k: int) -> float:
    """The unbiased pass@k estimator 1 - C(n - c, k) / C(n, k) (Chen et al. 2021, arXiv 2107.03374, eq. 1): the
    probability that a uniformly drawn k-subset of n samples, `correct` = c of them correct, holds a correct one.

    Raises:
        ValueError: k outside [1, n] or c outside [0, n].

    >>> pass_at_k(4, 1, 2)  # 1 - C(3, 2) / C(4, 2) = 1 - 3/6
    0.5
    """
    if not 1 <= k <= n or not 0 <= correct <= n:
        raise ValueError(f"pass_at_k: need 1 <= k <= n and 0 <= correct <= n, got n={n}, correct={correct}, k={k}")
    return 1.0 - math.comb(n - correct, k) / math.comb(n, k)
