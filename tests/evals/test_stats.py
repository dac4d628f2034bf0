"""procrl.evals.stats: percentile bootstrap over problems, checked against a by-hand resampling and the edge cases;
the Wilson interval against the other textbook closed form, mean ± sample std, the AUROC against pairs counted by
hand, pass@k against enumerating every k-subset; the rule for a number over nothing (`ratio`, `format_estimate`,
`MISSING`)."""

import itertools
import math
import random

import numpy as np
import pytest

from procrl.evals.accuracy import wilson_interval as trainer_wilson_interval
from procrl.evals.stats import (
    MISSING,
    auroc,
    bootstrap_interval,
    bootstrap_mean_interval,
    format_estimate,
    mean_std,
    pass_at_k,
    ratio,
    wilson_interval,
)


def test_matches_a_by_hand_percentile_bootstrap():
    values = np.array([0.0, 1.0, 1.0, 0.0, 1.0, 0.5, 0.25])
    rng = np.random.default_rng(3)
    means = [values[rng.integers(0, 7, size=7)].mean() for _ in range(200)]
    expected = np.quantile(means, [0.05, 0.95])
    got = bootstrap_mean_interval(values, resamples=200, confidence=0.9, seed=3)
    assert got == pytest.approx(tuple(expected), abs=1e-12)


def test_constant_values_and_one_item_give_a_point():
    assert bootstrap_mean_interval([1.0, 1.0, 1.0]) == (1.0, 1.0)
    assert bootstrap_interval(1, lambda idx: 0.4) == (0.4, 0.4)


def test_same_seed_same_interval_other_seed_other_draws():
    values = list(np.linspace(0, 1, 30))
    a = bootstrap_mean_interval(values, seed=1)
    assert a == bootstrap_mean_interval(values, seed=1)
    assert a != bootstrap_mean_interval(values, seed=2)
    assert a[0] < np.mean(values) < a[1]


def test_non_finite_resamples_are_left_out():
    labels = np.array([0, 1, 0, 1, 1])

    def share_of_ones_if_both(idx):  # undefined (nan) when a resample has one class only
        sub = labels[idx]
        return float(sub.mean()) if 0 < sub.sum() < len(sub) else float("nan")

    lo, hi = bootstrap_interval(5, share_of_ones_if_both, resamples=300, seed=0)
    assert 0.0 < lo <= hi < 1.0
    with pytest.raises(ValueError, match="not finite on any"):
        bootstrap_interval(3, lambda idx: float("nan"))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"n_items": 0}, "no items"),
        ({"n_items": 3, "resamples": 0}, "resamples"),
        ({"n_items": 3, "confidence": 1.0}, "confidence"),
    ],
)
def test_bad_arguments_raise(kwargs, match):
    with pytest.raises(ValueError, match=match):
        bootstrap_interval(statistic=lambda idx: 0.0, **kwargs)


def test_mean_interval_rejects_empty_and_nan():
    with pytest.raises(ValueError, match="non-empty"):
        bootstrap_mean_interval([])
    with pytest.raises(ValueError, match="finite"):
        bootstrap_mean_interval([0.1, float("nan")])


@pytest.mark.parametrize(
    ("numerator", "denominator", "expected"),
    [
        (3, 4, 0.75),  # 3 of 4
        (0, 4, 0.0),  # none of 4: a measured 0 stays 0
        (0, 0, None),  # nothing to divide: undefined, not 0
        (2.5, 0, None),  # any numerator over an empty denominator
    ],
)
def test_ratio_is_none_over_an_empty_denominator(numerator, denominator, expected):
    assert ratio(numerator, denominator) == expected  # None == 0.0 is False: a 0 for nothing fails


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ((0.5, (0.25, 0.75)), "0.500 [0.250, 0.750]"),  # value and interval, 3 decimals
        ((0.125, None, ".1f", 100), "12.5"),  # 12.5% without an interval
        ((0.0, (0.0, 0.2)), "0.000 [0.000, 0.200]"),  # a measured 0 is printed as 0
        ((0.5, (None, None)), "0.500"),  # an interval of Nones is no interval
        ((None, None), MISSING),  # undefined: "–"
        ((None, (0.0, 1.0)), MISSING),  # undefined, whatever the interval says
    ],
)
def test_format_estimate_shows_undefined_as_a_dash(args, expected):
    assert format_estimate(*args) == expected
    assert MISSING == "\u2013"  # the en dash of procrl's tables


# --------------------------------------------------------------------------------------------------------------------
# Wilson, mean ± std
# --------------------------------------------------------------------------------------------------------------------


def _wilson_closed_form(k: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    # the other textbook form: (2k + z² ± z·sqrt(z² + 4k(n-k)/n)) / (2(n + z²))
    root = z * math.sqrt(z * z + 4 * k * (n - k) / n)
    return (2 * k + z * z - root) / (2 * (n + z * z)), (2 * k + z * z + root) / (2 * (n + z * z))


def test_wilson_interval_of_7_of_20_by_hand():
    low, high = wilson_interval(7, 20)
    assert low == pytest.approx(0.181192, abs=1e-5) and high == pytest.approx(0.567146, abs=1e-5)
    assert (low, high) == pytest.approx(_wilson_closed_form(7, 20), abs=1e-12)


@pytest.mark.parametrize("k,n", [(0, 10), (10, 10), (1, 3), (50, 100), (7, 20), (0, 1)])
def test_wilson_interval_matches_closed_form_and_the_trainers_helper(k, n):
    low, high = wilson_interval(k, n)
    expected = _wilson_closed_form(k, n)
    assert low == pytest.approx(max(0.0, expected[0]), abs=1e-12) and high == pytest.approx(min(1.0, expected[1]))
    assert trainer_wilson_interval is wilson_interval  # one helper, re-exported by procrl.evals.accuracy
    assert 0.0 <= low <= k / n + 1e-12 and k / n - 1e-12 <= high <= 1.0


def test_wilson_interval_of_no_trials_is_none():
    # 0/0: the proportion is undefined, so there is no interval (not (0, 1), not (0, 0))
    assert wilson_interval(0, 0) is None


def test_mean_std_is_the_sample_std():
    mean, std = mean_std([1.0, 2.0, 4.0])
    # mean 7/3; squared deviations 16/9 + 1/9 + 25/9 = 42/9, over n - 1 = 2: 7/3 (population: 14/9)
    assert mean == pytest.approx(7 / 3) and std == pytest.approx(math.sqrt(7 / 3))
    assert mean_std([0.35, 0.45])[1] == pytest.approx(0.1 / math.sqrt(2))  # population std would be 0.05
    assert mean_std([0.5]) == (0.5, None)  # no spread from one seed
    assert mean_std([]) == (None, None)


# --------------------------------------------------------------------------------------------------------------------
# AUROC, pass@k
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "positives, negatives, expected",
    [
        ([3, 2], [1, 2], 0.875),  # 3>1, 3>2, 2>1, 2=2 -> 3.5 / 4
        ([0.8, 0.4, 0.4], [0.4, 0.1], 5 / 6),  # wins .8>.4 .8>.1 .4>.1 .4>.1, ties .4=.4 twice -> 5 / 6
        ([50.0] * 3, [50.0] * 2, 0.5),  # a constant score carries no information
        ([100, 75], [25, 0], 1.0),
        ([0], [25, 50], 0.0),
        ([], [1.0], None),  # undefined without both classes, not 0.5
        ([1.0], [], None),
    ],
)
def test_auroc_by_hand(positives, negatives, expected):
    assert auroc(positives, negatives) == (None if expected is None else pytest.approx(expected))


def test_auroc_equals_the_pairwise_count_with_ties_infinities_and_nan():
    def pairwise(pos, neg):  # the definition: a NaN wins and ties no pair
        return sum((x > y) + 0.5 * (x == y) for x in pos for y in neg) / (len(pos) * len(neg))

    rng = random.Random(0)
    pool = [0.0, 0.5, 1.0, 2.0, 3, math.inf, -math.inf, math.nan]
    for _ in range(500):
        pos = [rng.choice(pool) for _ in range(rng.randint(1, 8))]
        neg = [rng.choice(pool) for _ in range(rng.randint(1, 8))]
        assert auroc(pos, neg) == pairwise(pos, neg)  # exact: both are sums of halves over the same pairs
    big_pos, big_neg = [rng.random() for _ in range(300)], [rng.random() - 0.2 for _ in range(200)]
    assert auroc(big_pos, big_neg) == pytest.approx(pairwise(big_pos, big_neg), abs=1e-12)


@pytest.mark.parametrize("n, correct", [(4, 0), (4, 1), (5, 2), (6, 6), (8, 3)])
def test_pass_at_k_is_the_share_of_k_subsets_holding_a_correct_sample(n, correct):
    labels = [True] * correct + [False] * (n - correct)
    for k in range(1, n + 1):
        subsets = list(itertools.combinations(labels, k))
        assert pass_at_k(n, correct, k) == pytest.approx(sum(any(s) for s in subsets) / len(subsets), abs=1e-12)


@pytest.mark.parametrize("n, correct, k", [(4, 1, 0), (4, 1, 5), (4, 5, 2), (4, -1, 2)])
def test_pass_at_k_refuses_impossible_counts(n, correct, k):
    with pytest.raises(ValueError, match="pass_at_k"):
        pass_at_k(n, correct, k)
