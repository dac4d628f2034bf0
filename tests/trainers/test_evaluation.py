"""Evaluation helpers: the Wilson interval against textbook values, and the before/after table (the run report
of the GRPO command is tested in tests/scripts/test_train_grpo_report.py)."""

import pytest

from procrl.reporting import format_table
from procrl.trainers.evaluation import wilson_interval


@pytest.mark.parametrize(
    "successes, n, low, high",
    [
        (5, 10, 0.2366, 0.7634),  # symmetric textbook case
        (0, 50, 0.0, 3.8415 / 53.8415),  # 0/n: upper bound z²/(n + z²)
        (50, 50, 50 / 53.8415, 1.0),  # n/n: lower bound n/(n + z²)
        (3, 150, 0.0068, 0.0572),
    ],
)
def test_wilson_interval(successes, n, low, high):
    got_low, got_high = wilson_interval(successes, n)
    assert got_low == pytest.approx(low, abs=1e-4)
    assert got_high == pytest.approx(high, abs=1e-4)


def test_wilson_interval_without_data_is_uninformative():
    assert wilson_interval(0, 0) == (0.0, 1.0)


def test_table_pairs_before_and_after_by_name():
    row = dict(
        accuracy=0.02,
        ci_low=0.007,
        ci_high=0.057,
        mean_reward=-0.0289,
        mean_length=53.2,
        truncated_frac=0.03,
        wall_time_s=155.0,
    )
    text = format_table([{"name": "svamp[700:850]", **row}], [{"name": "svamp[700:850]", **row, "accuracy": 0.027}])
    lines = text.splitlines()
    assert lines[2].split()[:3] == ["svamp[700:850]", "before", "0.020"]
    assert lines[3].split()[:3] == ["svamp[700:850]", "after", "0.027"]
