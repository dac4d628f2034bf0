"""The report `train_grpo.py` prints (`procrl.scripts.train_grpo.format_summary`): model, data, steps, rewards, the
step scorer, the before/after table (`procrl.evals.reporting.format_table`) and the files."""

from procrl.evals.stats import MISSING
from procrl.scripts.train_grpo import format_summary, run_metrics


def test_run_report_names_the_rewards_the_table_and_the_files():
    row = dict(name="svamp[700:716]", accuracy=0.25, ci_low=0.1, ci_high=0.5, mean_reward=0.3, mean_length=50.0,
               truncated_frac=0.0, wall_time_s=20.0)  # fmt: skip
    summary = {
        "model": "default",
        "train": {"dataset": "svamp[0:700]", "steps": 3, "wall_time_s": 61.2, "reward_funcs": ["outcome_reward",
                  "picsar_bonus"], "reward_weights": [1.0, 0.1], "step_reward_func": None},
        "before": [row], "after": [row], "total_wall_time_s": 600.0,
    }  # fmt: skip
    files = {"results": "out/run.json", "checkpoint": "out", "curves": "out/curves.png"}
    lines = format_summary(summary, files).splitlines()
    assert lines[:3] == ["", "procrl GRPO: default on svamp[0:700], 3 steps in 61 s",
                         "rewards: outcome_reward, picsar_bonus with weights [1.0, 0.1]"]  # fmt: skip
    assert lines[3] == "" and lines[4].startswith("eval set") and lines[6].split()[:2] == ["svamp[700:716]", "before"]
    assert lines[-5:] == ["", "results: out/run.json", "checkpoint: out", "curves: out/curves.png",
                          "total wall time: 10.0 min"]  # fmt: skip


def test_the_step_scorer_is_named_under_the_rewards():
    summary = {
        "model": "m", "train": {"dataset": "d[0:4]", "steps": 1, "wall_time_s": 1.0, "reward_funcs": ["outcome_reward"],
                                "reward_weights": [1.0], "step_reward_func": "pum_step_increments"},
        "before": [], "after": [], "total_wall_time_s": 30.0,
    }  # fmt: skip
    lines = format_summary(summary, {}).splitlines()
    assert lines[2:4] == ["rewards: outcome_reward with weights [1.0]", "step scorer: pum_step_increments"]


def test_without_evaluation_there_is_no_table_and_wandb_gets_a_sync_line():
    summary = {
        "model": "m", "train": {"dataset": "d[0:4]", "steps": 1, "wall_time_s": 1.0, "reward_funcs": ["em"],
                                "reward_weights": [1.0]},
        "before": [], "after": [], "total_wall_time_s": 30.0,
    }  # fmt: skip
    lines = format_summary(summary, {"wandb": "wandb/run-1"}).splitlines()
    assert not any(line.startswith("eval set") for line in lines)
    assert lines[-3:] == [
        "wandb run (offline): wandb/run-1",
        "total wall time: 0.5 min",
        "sync later with: wandb sync wandb/run-1",
    ]


def test_an_empty_eval_set_is_reported_as_undefined_not_zero():
    # `evaluate` on no problem: n = 0, every rate and mean None
    rates = ("accuracy", "ci_low", "ci_high", "mean_reward", "mean_length", "truncated_frac")
    empty = {"name": "svamp[0:0]", "n": 0, **dict.fromkeys(rates), "wall_time_s": 0.1}
    summary = {
        "model": "m", "train": {"dataset": "d[0:4]", "steps": 1, "wall_time_s": 1.0, "reward_funcs": ["em"],
                                "reward_weights": [1.0]},
        "before": [empty], "after": [empty], "log_history": [], "total_wall_time_s": 30.0,
    }  # fmt: skip
    # the record keeps the counts (0 of 0) and leaves the undefined accuracies out, so a report shows "–"
    counts = {"correct": 0, "n": 0}
    assert run_metrics(summary) == {
        f"{prefix}{k}": v for prefix in ("eval/svamp[0:0]/", "task/") for k, v in counts.items()
    }
    rows = [line.split() for line in format_summary(summary, {}).splitlines() if line.startswith("svamp[0:0]")]
    assert rows == [["svamp[0:0]", stage, MISSING, MISSING, MISSING, MISSING, "0.1"] for stage in ("before", "after")]
