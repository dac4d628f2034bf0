"""The reward-hacking monitors' math (`procrl.trainers.monitoring`) against hand-computed values."""

import math

import pytest

from procrl.trainers.monitoring import (
    RewardAccuracyMonitor,
    correlation,
    mean_repetition_rate,
    repetition_rate,
    slope,
    within_group_corr,
)

NAN = math.nan


@pytest.mark.parametrize(
    "tokens, expected",
    [
        ([1, 2, 3, 4, 1, 2, 3, 4], 1 - 4 / 5),  # 4-grams 1234 2341 3412 4123 1234: 5, 4 distinct
        ([5] * 10, 1 - 1 / 7),  # 7 four-grams, all the same
        ([1, 2, 3, 4], 0.0),  # one 4-gram, nothing repeated
        ([1, 2, 3, 4, 5, 6], 0.0),
        (list("日本日本日本日本"), 1 - 2 / 5),  # unicode units: 日本日本 / 本日本日 alternate over 5 four-grams
        ("ab ab ab ab ab".split(), 1 - 1 / 2),  # words: (ab ab ab ab) twice
    ],
)
def test_repetition_rate_by_hand(tokens, expected):
    assert repetition_rate(tokens) == pytest.approx(expected)


@pytest.mark.parametrize("tokens", [[], [1], [1, 2, 3], list("日本語")])
def test_fewer_than_four_tokens_have_no_rate(tokens):
    assert repetition_rate(tokens) is None  # excluded from the batch mean, not counted as 0.0


def test_repetition_rate_other_n_and_bad_n():
    assert repetition_rate([1, 1, 1], n=1) == pytest.approx(1 - 1 / 3)
    assert repetition_rate([1, 2, 1, 2], n=2) == pytest.approx(1 - 2 / 3)  # 12 21 12
    with pytest.raises(ValueError, match="n >= 1"):
        repetition_rate([1, 2], n=0)


def test_mean_repetition_rate_excludes_undefined():
    assert mean_repetition_rate([0.2, None, NAN, 0.4]) == pytest.approx(0.3)
    assert mean_repetition_rate([None, NAN]) is None
    assert mean_repetition_rate([]) is None
    assert mean_repetition_rate([0.0, 0.0]) == 0.0


def test_correlation_by_hand():
    # dx = [-1.5, -.5, .5, 1.5], dy = [-.5, -1.5, 1.5, .5]: Σ dx·dy = 3, Σ dx² = Σ dy² = 5
    assert correlation([1, 2, 3, 4], [2, 1, 4, 3]) == pytest.approx(3 / 5)
    # ties: dx = [-.5, -.5, .5, .5], dy = [-1.5, -.5, .5, 1.5]: Σ dx·dy = 2, Σ dx² = 1, Σ dy² = 5
    assert correlation([1, 1, 2, 2], [1, 2, 3, 4]) == pytest.approx(2 / math.sqrt(5))
    assert correlation([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert -1.0 <= correlation([0.1, 0.2, 0.3], [0.3, 0.2, 0.1]) <= 1.0  # clipped against rounding


def test_correlation_undefined_is_none_never_nan():
    assert correlation([1.0, 1.0, 1.0], [1, 2, 3]) is None  # constant x
    assert correlation([1, 2, 3], [0.1] * 3) is None  # constant y, whose mean has rounding residue
    assert correlation([1.0], [2.0]) is None
    assert correlation([], []) is None
    assert correlation([1, NAN, 3], [1, 2, NAN]) is None  # one pair left
    assert correlation([1, 2, NAN, 3], [1, 2, 5, 3]) == pytest.approx(1.0)  # the NaN pair is dropped
    with pytest.raises(ValueError, match="equal length"):
        correlation([1, 2], [1])


def test_slope_by_hand():
    assert slope([1.0, 3.0, 5.0]) == pytest.approx(2.0)
    assert slope([5.0, 3.0, 1.0]) == pytest.approx(-2.0)
    # x - x̄ = [-1.5, -.5, .5, 1.5], y - ȳ = [-.5, .5, -.5, .5]: Σ = 1, Σ (x - x̄)² = 5
    assert slope([0.0, 1.0, 0.0, 1.0]) == pytest.approx(0.2)
    assert slope([0.3, 0.3, 0.3]) == 0.0
    assert slope([1.0]) is None


def test_within_group_corr_averages_the_groups():
    values = [1, 2, 3, 4, 1, 2, 3, 4]
    lengths = [10, 20, 30, 40, 40, 30, 20, 10]
    assert within_group_corr(values, lengths, 4) == pytest.approx(0.0)  # (+1 + -1) / 2
    assert within_group_corr(values, lengths, 8) == pytest.approx(0.0)  # one group of 8: corr([1..4]*2, ...) = 0


def test_within_group_corr_skips_groups_without_a_correlation():
    # group 0: constant reward (skipped); group 1: corr([2, 1, 4, 3], [1, 2, 3, 4]) = 0.6
    assert within_group_corr([1, 1, 1, 1, 2, 1, 4, 3], [1, 2, 3, 4, 1, 2, 3, 4], 4) == pytest.approx(0.6)
    # group 0: constant length (skipped)
    assert within_group_corr([1, 2, 3, 4, 2, 1, 4, 3], [9, 9, 9, 9, 1, 2, 3, 4], 4) == pytest.approx(0.6)
    # groups of size 1 never have a correlation
    assert within_group_corr([1, 2, 3], [1, 2, 3], 1) is None
    assert within_group_corr([], [], 4) is None
    # empty completions (length 0) are ordinary points
    assert within_group_corr([0, 0, 1, 1], [0, 0, 5, 5], 4) == pytest.approx(1.0)


def test_within_group_corr_drops_rewards_that_did_not_apply():
    # pairs (1, 1), (2, 2), (3, 4): dx = [-1, 0, 1], dy = [-4/3, -1/3, 5/3]; Σ dx·dy = 3, Σ dx² = 2, Σ dy² = 42/9
    expected = 3 / math.sqrt(2 * 42 / 9)
    assert within_group_corr([NAN, 1, 2, 3], [5, 1, 2, 4], 4) == pytest.approx(expected)
    assert within_group_corr([NAN, NAN, NAN, 1], [1, 2, 3, 4], 4) is None


@pytest.mark.parametrize("values, lengths, group_size", [([1, 2, 3], [1, 2, 3], 2), ([1, 2], [1], 2), ([1], [1], 0)])
def test_within_group_corr_refuses_partial_groups(values, lengths, group_size):
    with pytest.raises(ValueError, match="whole groups"):
        within_group_corr(values, lengths, group_size)


def _run(monitor, rewards, accuracies):
    return [monitor.update(r, a) for r, a in zip(rewards, accuracies, strict=True)]


def test_rising_together_never_warns():
    out = _run(RewardAccuracyMonitor(window=5), [0.1, 0.2, 0.3, 0.5, 0.4, 0.6], [0.0, 0.1, 0.1, 0.3, 0.2, 0.4])
    corrs, warns = zip(*out, strict=True)
    assert corrs[:2] == (None, None)  # fewer than 3 points
    assert all(c > 0 for c in corrs[2:])
    # the third point by hand: r = [.1, .2, .3], a = [0, .1, .1]: Σ dr·da = 0.01, Σ dr² = 0.02, Σ da² = 0.02/3
    assert corrs[2] == pytest.approx(0.01 / math.sqrt(0.02 * 0.02 / 3))
    assert not any(warns)


def test_collapse_warns_once_per_crossing():
    # window 3; reward rises throughout; accuracy falls, recovers, falls again
    rewards = [1, 2, 3, 4, 5, 6, 7, 8]
    accuracies = [5, 4, 3, 4, 5, 6, 5, 4]
    corrs, warns = zip(*_run(RewardAccuracyMonitor(window=3), rewards, accuracies), strict=True)
    # windows: (5,4,3) -1, (4,3,4) 0, (3,4,5) +1, (4,5,6) +1, (5,6,5) 0, (6,5,4) -1
    assert corrs[0] is None and corrs[1] is None
    assert corrs[2:] == pytest.approx([-1.0, 0.0, 1.0, 1.0, 0.0, -1.0])
    assert warns == (False, False, True, False, False, False, False, True)


def test_collapse_stays_warned_while_it_lasts():
    corrs, warns = zip(*_run(RewardAccuracyMonitor(window=4), [1, 2, 3, 4, 5], [9, 8, 7, 6, 5]), strict=True)
    assert warns == (False, False, True, False, False)
    assert corrs[2:] == pytest.approx([-1.0, -1.0, -1.0])


def test_negative_correlation_with_a_falling_reward_does_not_warn():
    _, warns = zip(*_run(RewardAccuracyMonitor(window=3), [5, 4, 3, 2], [1, 2, 3, 4]), strict=True)
    assert not any(warns)  # the reward falls: not the collapse


def test_constant_series_have_no_correlation():
    corrs, warns = zip(*_run(RewardAccuracyMonitor(window=3), [0.5] * 4, [0.1, 0.2, 0.3, 0.4]), strict=True)
    assert corrs == (None,) * 4 and not any(warns)
    corrs, _ = zip(*_run(RewardAccuracyMonitor(window=3), [0.1, 0.2, 0.3], [0.0] * 3), strict=True)
    assert corrs == (None,) * 3


def test_missing_points_are_skipped_and_the_window_rolls():
    monitor = RewardAccuracyMonitor(window=3)
    assert monitor.update(None, 0.5) == (None, False)
    assert monitor.update(0.5, NAN) == (None, False)
    assert len(monitor.rewards) == 0
    _run(monitor, [1, 2, 3, 4], [4, 3, 2, 1])
    assert list(monitor.rewards) == [2, 3, 4] and list(monitor.accuracies) == [3, 2, 1]
    assert "reward 2 -> 4 (slope +1/step), accuracy 3 -> 1 over the last 3 logging steps" == monitor.describe()


@pytest.mark.parametrize("window", [2, 0, -1])
def test_window_below_three_is_refused(window):
    with pytest.raises(ValueError, match="hacking_window must be >= 3"):
        RewardAccuracyMonitor(window)
