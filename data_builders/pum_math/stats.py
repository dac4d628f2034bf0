"""The builder's arithmetic (pure functions; unit-tested with hand-computed values): Laplace-smoothed solve-rate
variances, gains g_s = q_s(x,p) - q_s(x,∅), student scales σ_s, the intrinsic utility G and Var(ΔG) (docs/architecture.md "PUM" PUM;
formulas in the package docstring of `procrl.data_builders.pum_math`)."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass


def smoothed_variance(k: int, n: int) -> float:
    """Variance of a solve-rate estimate from k successes in n rollouts, Laplace-smoothed (docs/architecture.md "PUM" PUM).

    v = q̃(1 - q̃)/(n + 2) with q̃ = (k + 1)/(n + 2), so 0/n and n/n do not get zero variance.

    >>> round(smoothed_variance(0, 4), 6), round(smoothed_variance(2, 4), 6)
    (0.023148, 0.041667)
    """
    if n < 1 or not 0 <= k <= n:
        raise ValueError(f"smoothed_variance needs 0 <= k <= n and n >= 1, got k={k}, n={n}")
    q = (k + 1) / (n + 2)
    return q * (1 - q) / (n + 2)


def population_std(values: Sequence[float]) -> float:
    """Population standard deviation (ddof 0); 0.0 for fewer than two values."""
    if len(values) < 2:
        return 0.0
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))


@dataclass
class PrefixRates:
    """Successes of every student on one prefix: `successes[s]` of `n` rollouts; bare problem `bare[s]` of `n_bare`."""

    successes: list[int]
    n: int
    bare: list[int]
    n_bare: int

    def gains(self) -> list[float]:
        """g_s = q_s(x,p) - q_s(x,∅) per student."""
        return [k / self.n - k0 / self.n_bare for k, k0 in zip(self.successes, self.bare, strict=True)]


def student_scales(gains: Sequence[Sequence[float]]) -> list[float]:
    """σ_s: population std of each student's gains over all prefixes; `gains` is (P, M) (prefix-major)."""
    if not gains:
        return []
    return [population_std([row[s] for row in gains]) for s in range(len(gains[0]))]


def intrinsic_utility(gains: Sequence[float], scales: Sequence[float], centers: Sequence[float] | None = None) -> float:
    """G = mean over students with σ_s > 0 of (g_s - c_s)/σ_s (c_s = 0 unless per-problem centring); 0.0 if none."""
    centers = centers or [0.0] * len(gains)
    terms = [(g - c) / s for g, c, s in zip(gains, centers, scales, strict=True) if s > 0]
    return sum(terms) / len(terms) if terms else 0.0


def delta_variance(a: PrefixRates, b: PrefixRates, scales: Sequence[float]) -> float:
    """Var(ΔG) of two prefixes of one problem: (1/M²) Σ_s [v(k_sa, n_a) + v(k_sb, n_b)]/σ_s² over students with σ_s > 0."""
    valid = [s for s, scale in enumerate(scales) if scale > 0]
    if not valid:
        return 0.0
    total = sum(
        (smoothed_variance(a.successes[s], a.n) + smoothed_variance(b.successes[s], b.n)) / scales[s] ** 2
        for s in valid
    )
    return total / len(valid) ** 2


def compute_utilities(
    rates: dict[str, PrefixRates], problem_of: dict[str, str], normalization: str
) -> tuple[dict[str, float], dict[str, list[float]], list[float], list[int]]:
    """G for every prefix, plus the per-problem scales used for Var(ΔG).

    Returns:
        (utility per prefix key, scales per problem id (one σ per student), data-set σ_s, excluded student indices
        (σ_s = 0 over the data set)).
    """
    keys = list(rates)
    gains = {key: rates[key].gains() for key in keys}
    n_students = len(next(iter(gains.values()))) if gains else 0
    global_scales = student_scales([gains[k] for k in keys]) if keys else []
    excluded = [s for s, scale in enumerate(global_scales) if scale == 0]
    utility: dict[str, float] = {}
    problem_scales: dict[str, list[float]] = {}
    by_problem: dict[str, list[str]] = defaultdict(list)
    for key in keys:
        by_problem[problem_of[key]].append(key)
    for pid, members in by_problem.items():
        if normalization == "problem_zscore":
            scales = [population_std([gains[k][s] for k in members]) for s in range(n_students)]
            centers = [sum(gains[k][s] for k in members) / len(members) for s in range(n_students)]
        elif normalization == "none":
            scales = [1.0 if s not in excluded else 0.0 for s in range(n_students)]
            centers = None
        else:
            scales = list(global_scales)
            centers = None
        problem_scales[pid] = scales
        for key in members:
            utility[key] = intrinsic_utility(gains[key], scales, centers)
    return utility, problem_scales, global_scales, excluded
