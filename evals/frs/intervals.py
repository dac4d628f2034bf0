"""Bootstrap intervals of FRS's numbers over PROBLEMS (part of `procrl.evals.frs`; issue 17).

The unit of resampling is the problem: a resample draws n problems with replacement (`procrl.evals.stats.
bootstrap_interval`: `numpy.random.default_rng(seed).integers(0, n, size=n)` per draw) and takes ALL traces of each
drawn problem; a problem drawn twice contributes its traces twice. On every resample the statistic does what the
point estimate (`summarize`) does, with compute.py's own functions: the pooled traces are re-ranked by confidence
(`rank_by_confidence`), the top floor(K% * N) re-selected (`kept_count`), and

- `accuracy`: the accuracy of all traces (`_accuracy`);
- `accuracy@K`: the accuracy of the kept traces;
- `frs@K`: FRS@K over the kept traces with a score (`_frs_at`, from RS);
- `selection_gain`: the mean over the resampled questions of RS(most confident) - RS(random) (`_selection_gain`, run
  on each problem's own traces: a question's gain depends on its traces only, so a problem drawn twice is two
  questions with the same gain, exactly as two copies of it would be).

Each interval is the percentile interval (default 95%) of the resampled values; a resample where a number is not
defined (no kept trace with a score, no question with a gain) is left out of that number's interval and counted
(`FRSIntervals.n_undefined`); a number defined on no resample has no interval (None). The traces are used as they
were judged: nothing is judged again. So a resample's top-K% can reach traces the point estimate did not judge (its
K-cut falls lower); those count as kept traces without a score, as failed judgements do in the point estimate. With
the bin estimator a resampled bin's judged sample is the resampled copies of the traces the point estimate's bin
sample (`_bins`) held, so the identity resample reproduces the point estimate for either estimator.

    >>> t = [Trace("a", "", "", "1", True, 0.9, 5), Trace("b", "", "", "1", False, 0.5, 5)]
    >>> point_estimates(t, FRSConfig(k_values=(50,)))["accuracy@50"]
    1.0
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from procrl.evals.frs.arguments import FRSConfig
from procrl.evals.frs.compute import _RS, _accuracy, _bins, _frs_at, _mean, _selection_gain
from procrl.evals.frs.confidence import kept_count, rank_by_confidence
from procrl.evals.frs.traces import Trace
from procrl.evals.stats import BOOTSTRAP_RESAMPLES, bootstrap_interval

__all__ = [
    "ACCURACY",
    "SELECTION_GAIN",
    "FRSIntervals",
    "accuracy_key",
    "config_from_result",
    "frs_intervals",
    "frs_key",
    "intervals_from_result",
    "metric_names",
    "paired_differences",
    "point_estimates",
]

ACCURACY, SELECTION_GAIN = "accuracy", "selection_gain"


def accuracy_key(k: float) -> str:
    """The name of the top-K% accuracy: `accuracy_key(10) == "accuracy@10"`, `accuracy_key(12.5) == "accuracy@12.5"`."""
    return f"accuracy@{float(k):g}"


def frs_key(k: float) -> str:
    """The name of FRS@K: `frs_key(10) == "frs@10"`."""
    return f"frs@{float(k):g}"


def metric_names(config: FRSConfig) -> list[str]:
    """The numbers that get intervals, in report order: accuracy, accuracy@K and frs@K for every K of
    `config.k_values`, selection_gain."""
    return [
        ACCURACY,
        *(accuracy_key(k) for k in config.k_values),
        *(frs_key(k) for k in config.k_values),
        SELECTION_GAIN,
    ]


@dataclass
class FRSIntervals:
    """Bootstrap intervals of one (model, benchmark)'s FRS numbers (see the module docstring).

    Attributes:
        intervals: name (`metric_names`) -> (low, high), or None where the number is defined on no resample.
            Accuracies are fractions in [0, 1]; FRS and the selection gain are RS units (0-100).
        resamples, confidence, seed: the bootstrap's settings (`procrl.evals.stats.bootstrap_interval`).
        n_problems: the problems resampled.
        n_undefined: name -> resamples on which the number was not defined (left out of its interval).
    """

    intervals: dict[str, tuple[float, float] | None]
    resamples: int
    confidence: float
    seed: int
    n_problems: int
    n_undefined: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """`{"intervals": {name: [low, high] | None}, "bootstrap": {unit, resamples, confidence, seed, n_problems,
        n_undefined}}`: the two keys of `procrl frs`'s result next to `report`."""
        return {
            "intervals": {k: (None if v is None else [v[0], v[1]]) for k, v in self.intervals.items()},
            "bootstrap": {
                "unit": "problems",
                "resamples": self.resamples,
                "confidence": self.confidence,
                "seed": self.seed,
                "n_problems": self.n_problems,
                "n_undefined": dict(self.n_undefined),
            },
        }


@dataclass(frozen=True, slots=True)
class _Scored:
    """What a resample reads of a trace (`rs` computed once, not per resample)."""

    correct: bool | None
    confidence: float | None
    rs: float | None


class _Resampler:
    """The traces grouped by problem (first-appearance order) and what every resample reuses: each problem's
    selection gain and, for the bin estimator, which traces the point estimate's bins sampled."""

    def __init__(self, traces: Sequence[Trace], config: FRSConfig) -> None:
        self.traces, self.config = list(traces), config
        self.scored = [_Scored(t.correct, t.confidence, t.rs) for t in self.traces]
        index: dict[str, int] = {}
        self.problem_of = [index.setdefault(t.problem_id, len(index)) for t in self.traces]
        self.problem_index, self.n_problems = index, len(index)
        members: list[list[int]] = [[] for _ in range(self.n_problems)]
        for i, p in enumerate(self.problem_of):
            members[p].append(i)
        self.gains: list[float | None] = [None] * self.n_problems
        if config.selection_gain:
            for p, group in enumerate(members):
                own = [self.traces[i] for i in group]
                self.gains[p] = _selection_gain(own, rank_by_confidence([t.confidence for t in own]), config, _RS)[0]
        self.sampled: set[int] | None = None
        if config.estimator == "bins":
            ranked = rank_by_confidence([t.confidence for t in self.traces])
            self.sampled = {i for sample in _bins(ranked, config) for i in sample}

    def statistics(self, counts: np.ndarray) -> dict[str, float | None]:
        """Every number of `metric_names` on the resample that takes problem p `counts[p]` times (copies of a trace
        adjacent, the original order otherwise: all counts 1 is the original set)."""
        origin = [i for i, p in enumerate(self.problem_of) for _ in range(int(counts[p]))]
        traces = [self.scored[i] for i in origin]
        ranked = rank_by_confidence([t.confidence for t in traces])
        n = len(ranked)
        bins = None
        if self.sampled is not None:
            n_bins = self.config.n_bins
            bins = [
                [j for j in ranked[b * n // n_bins : (b + 1) * n // n_bins] if origin[j] in self.sampled]
                for b in range(n_bins)
            ]
        values: dict[str, float | None] = {ACCURACY: _accuracy(traces)}
        for k in self.config.k_values:
            keep = kept_count(n, k)
            values[accuracy_key(k)] = _accuracy(traces[j] for j in ranked[:keep])
            values[frs_key(k)] = _frs_at(traces, ranked, bins, keep, _RS)[0]
        gains = [g for p, g in enumerate(self.gains) if g is not None for _ in range(int(counts[p]))]
        values[SELECTION_GAIN] = _mean(gains) if self.config.selection_gain else None
        return values


def point_estimates(traces: Sequence[Trace], config: FRSConfig) -> dict[str, float | None]:
    """The numbers of `metric_names` on the traces themselves (the bootstrap's statistic on the identity resample):
    the values `summarize` reports as `accuracy`, `accuracy_at_k[K]`, `at_k[K]` and `selection_gain` (None where it
    reports None, except that the selection gain here needs no judgement to exist: without one it is None anyway)."""
    resampler = _Resampler(traces, config)
    return resampler.statistics(np.ones(resampler.n_problems, dtype=np.int64))


def frs_intervals(
    traces: Sequence[Trace],
    config: FRSConfig,
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    confidence: float = 0.95,
    seed: int = 0,
) -> FRSIntervals:
    """Percentile bootstrap intervals over problems of accuracy, accuracy@K, FRS@K and the selection gain.

    Args:
        traces: every trace of one (model, benchmark), judged as `summarize` sees them (`scores` / `unscored`).
        config: the `FRSConfig` the point estimate used (K values, estimator, selection gain's baseline and seed).
        resamples: bootstrap draws (>= 1); confidence: the coverage, in (0, 1); seed: the draws' seed. Every number
            is computed on the same draws (one `bootstrap_interval` call per number, each with `seed`).

    Returns:
        `FRSIntervals`; with no traces every interval is None (nothing to resample) and `n_problems` is 0. With one
        problem each interval is (value, value).

    Raises:
        ValueError: `resamples` < 1 or `confidence` outside (0, 1).
    """
    if resamples < 1:
        raise ValueError(f"frs_intervals: resamples must be >= 1, got {resamples} (0 = no intervals is the caller's)")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"frs_intervals: confidence must be in (0, 1), got {confidence}")
    names = metric_names(config)
    resampler = _Resampler(traces, config)
    n = resampler.n_problems
    if n == 0:
        return FRSIntervals({name: None for name in names}, resamples, confidence, seed, 0, {name: 0 for name in names})
    memo: dict[bytes, dict[str, float | None]] = {}  # one computation per distinct resample, shared by all numbers

    def values_of(idx: np.ndarray) -> dict[str, float | None]:
        counts = np.bincount(idx, minlength=n)
        key = counts.tobytes()
        if key not in memo:
            memo[key] = resampler.statistics(counts)
        return memo[key]

    intervals: dict[str, tuple[float, float] | None] = {}
    undefined: dict[str, int] = {}
    for name in names:
        seen = {"defined": 0, "undefined": 0}

        def statistic(idx: np.ndarray, name: str = name, seen: dict = seen) -> float:
            value = values_of(idx)[name]
            seen["defined" if value is not None else "undefined"] += 1
            return math.nan if value is None else float(value)

        try:
            intervals[name] = bootstrap_interval(n, statistic, resamples=resamples, confidence=confidence, seed=seed)
        except ValueError:
            if seen["defined"]:  # not the "no finite value" refusal: a real error
                raise
            intervals[name] = None
        undefined[name] = seen["undefined"]
    return FRSIntervals(intervals, resamples, confidence, seed, n, undefined)


def paired_differences(
    first: Sequence[Trace],
    first_config: FRSConfig,
    second: Sequence[Trace],
    second_config: FRSConfig,
    names: Sequence[str],
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    confidence: float = 0.95,
    seed: int = 0,
) -> dict[str, dict[str, Any]]:
    """Paired bootstrap of the difference first − second of each number in `names`, over the problems both runs
    answered: every resample draws ONE multiset of problems and computes each model's number on it (each on its
    own traces, as `frs_intervals` does), so the problem-to-problem variation both models share cancels.

    Args:
        first, second: the judged traces of two models on the same benchmark; first_config, second_config: the
            `FRSConfig` each point estimate used. names: numbers of `metric_names` (e.g. "accuracy", "frs@10").
        resamples, confidence, seed: as `frs_intervals`.

    Returns:
        name -> `{"difference": first − second on all problems (None: undefined for either), "interval": [low,
        high] or None (defined on no resample), "n_undefined": resamples left out}`; accuracies as fractions, FRS
        and the gain in RS units.

    Raises:
        ValueError: the runs answered different problems (a paired comparison needs the same ones), no problems,
            a name not in both configs' `metric_names`, or `resamples` / `confidence` out of range.

    >>> a = [Trace("p", "", "", "1", True, 0.9, 5), Trace("q", "", "", "1", True, 0.5, 5)]
    >>> b = [Trace("p", "", "", "1", False, 0.9, 5), Trace("q", "", "", "1", True, 0.5, 5)]
    >>> paired_differences(a, FRSConfig(k_values=(50,)), b, FRSConfig(k_values=(50,)), ["accuracy"])["accuracy"]["difference"]
    0.5
    """
    if resamples < 1 or not 0.0 < confidence < 1.0:
        raise ValueError(f"paired_differences: resamples >= 1 and confidence in (0, 1), got {resamples}, {confidence}")
    for name in names:
        if name not in metric_names(first_config) or name not in metric_names(second_config):
            raise ValueError(f"paired_differences: {name!r} is not a number both runs report")
    ra, rb = _Resampler(first, first_config), _Resampler(second, second_config)
    if set(ra.problem_index) != set(rb.problem_index) or not ra.problem_index:
        only_a = len(set(ra.problem_index) - set(rb.problem_index))
        only_b = len(set(rb.problem_index) - set(ra.problem_index))
        raise ValueError(
            f"paired_differences: the runs answered different problems ({only_a} only in the first, {only_b} only "
            f"in the second, {len(ra.problem_index)} and {len(rb.problem_index)} in all): run both on the same slice"
        )
    n = ra.n_problems
    to_b = np.array([rb.problem_index[pid] for pid in ra.problem_index], dtype=np.int64)  # a's problem -> b's index
    memo: dict[bytes, dict[str, float | None]] = {}

    def differences(counts: np.ndarray) -> dict[str, float | None]:
        key = counts.tobytes()
        if key not in memo:
            counts_b = np.zeros(n, dtype=np.int64)
            counts_b[to_b] = counts
            va, vb = ra.statistics(counts), rb.statistics(counts_b)
            memo[key] = {
                name: None if va[name] is None or vb[name] is None else float(va[name]) - float(vb[name])
                for name in names
            }
        return memo[key]

    point = differences(np.ones(n, dtype=np.int64))
    out: dict[str, dict[str, Any]] = {}
    for name in names:
        seen = {"undefined": 0}

        def statistic(idx: np.ndarray, name: str = name, seen: dict = seen) -> float:
            value = differences(np.bincount(idx, minlength=n))[name]
            seen["undefined"] += value is None
            return math.nan if value is None else value

        try:
            low, high = bootstrap_interval(n, statistic, resamples=resamples, confidence=confidence, seed=seed)
            interval: list[float] | None = [low, high]
        except ValueError:
            interval = None  # defined on no resample (the other refusals were checked above)
        out[name] = {"difference": point[name], "interval": interval, "n_undefined": seen["undefined"]}
    return out


def config_from_result(result: Mapping[str, Any]) -> FRSConfig:
    """The `FRSConfig` of a `procrl frs` result (run.json's `result`: `settings.frs`).

    Raises:
        ValueError: the result has no `settings.frs` or it does not read back.
    """
    settings = result.get("settings") if isinstance(result, Mapping) else None
    if not isinstance(settings, Mapping) or not isinstance(settings.get("frs"), Mapping):
        raise ValueError("not a procrl frs result: no 'settings.frs' (the FRS config of the run)")
    try:
        return FRSConfig(**settings["frs"])
    except (TypeError, ValueError) as error:
        raise ValueError(f"the FRS config of the result does not read back: {error}") from error


def intervals_from_result(
    result: Mapping[str, Any],
    traces: Sequence[Trace],
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    confidence: float = 0.95,
    seed: int | None = None,
) -> FRSIntervals:
    """`frs_intervals` of a `procrl frs` result (run.json's `result`) and its judged traces (`judged_traces.jsonl`,
    `procrl.evals.frs.traces.read_traces`: with their judgements, so nothing is judged again), under the result's
    `settings.frs` config; `seed` None = the run's FRS seed (`settings.frs.seed`), as `procrl frs` itself uses.

    Raises:
        ValueError: the result has no `settings.frs` or it does not read back (`FRSConfig`), or the errors of
            `frs_intervals`.
    """
    config = config_from_result(result)
    return frs_intervals(
        traces, config, resamples=resamples, confidence=confidence, seed=config.seed if seed is None else seed
    )
