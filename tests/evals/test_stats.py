"""procrl.evals.stats: percentile bootstrap over problems, checked against a by-hand resampling and the edge cases; the
rule for a number over nothing (`ratio`, `format_estimate`, `MISSING`)."""

import numpy as np
import pytest

from procrl.evals.stats import MISSING, bootstrap_interval, bootstrap_mean_interval, format_estimate, ratio


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
