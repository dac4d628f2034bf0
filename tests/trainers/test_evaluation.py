"""Evaluation helpers: the Wilson interval against textbook values, and the before/after table."""

import pytest

from procrl.reporting import format_summary, format_table
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


def test_run_report_names_the_rewards_the_table_and_the_files():
    row = dict(name="svamp[700:716]", accuracy=0.25, ci_low=0.1, ci_high=0.5, mean_reward=0.3, mean_length=50.0,
               truncated_frac=0.0, wall_time_s=20.0)  # fmt: skip
    summary = {
        "model": "default",
        "train": {"dataset": "svamp[0:700]", "steps": 3, "wall_time_s": 61.2, "reward_funcs": ["outcome_reward",
                  "picsar_bonus"], "reward_weights": [1.0, 0.1]},
        "before": [row], "after": [row], "summary_path": "out/summary.json", "curves": "out/curves.png",
        "wandb_dir": None, "total_wall_time_s": 600.0,
    }  # fmt: skip
    lines = format_summary(summary).splitlines()
    assert lines[:3] == ["", "procrl GRPO: default on svamp[0:700], 3 steps in 61 s",
                         "rewards: outcome_reward, picsar_bonus with weights [1.0, 0.1]"]  # fmt: skip
    assert lines[3] == "" and lines[4].startswith("eval set") and lines[6].split()[:2] == ["svamp[700:716]", "before"]
    assert lines[-4:] == ["", "summary: out/summary.json", "curves: out/curves.png", "total wall time: 10.0 min"]
