"""The GRPO job (`procrl.trainers.tasks.job`) with a user's own reward and step scorer, named by import path in a
config (`custom_rewards` in tests/helpers stands in for the user's package), and run.json as its one results file."""

from __future__ import annotations

import json
from pathlib import Path

import custom_rewards
import pytest
import yaml

from procrl.rewards.placebo import ShuffledReward, ShuffledStepRewards
from procrl.scripts import train_grpo
from procrl.trainers.tasks.job import make_rewards

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "configs" / "grpo" / "svamp_smollm2_picsar.yaml"
REWARD = "custom_rewards:token_count_reward"
SCORER = "custom_rewards:halves_step_scorer"


def _config(tmp_path: Path) -> Path:
    """A thin override of the demo config that names the custom reward and step scorer."""
    path = tmp_path / "custom.yaml"
    path.write_text(yaml.safe_dump({
        "base": str(DEMO),
        "reward_funcs": ["outcome", REWARD],
        "reward_weights": [1.0, 0.0],
        "step_reward_func": SCORER,
        "advantage_mode": "mixed",
    }))  # fmt: skip
    return path


def test_the_import_paths_build_the_very_objects(tmp_path):
    job = train_grpo.parse_args(["--config", str(_config(tmp_path)), "--output_dir", str(tmp_path / "out")])
    funcs, weights, step_scorer = make_rewards(job)
    assert funcs[1] is custom_rewards.token_count_reward and weights == [1.0, 0.0]
    assert step_scorer is custom_rewards.halves_step_scorer


def test_shuffled_names_build_the_placebos_of_the_same_objects(tmp_path):
    argv = ["--config", str(_config(tmp_path)), "--output_dir", str(tmp_path / "out"), "--placebo_seed", "5",
            "--reward_funcs", "outcome", f"shuffled:{REWARD}", "--step_reward_func", f"shuffled:{SCORER}"]  # fmt: skip
    funcs, _, step_scorer = make_rewards(train_grpo.parse_args(argv))
    assert isinstance(funcs[1], ShuffledReward) and funcs[1].func is custom_rewards.token_count_reward
    assert isinstance(step_scorer, ShuffledStepRewards) and step_scorer.func is custom_rewards.halves_step_scorer
    assert funcs[1].seed == 5 and funcs[1].__name__ == "shuffled_token_count_reward"


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--reward_funcs", "shuffled:nope"], "unknown reward function 'nope'"),
        (["--reward_funcs", "outcome", "--step_reward_func", "shuffled:outcome"], "not a step scorer"),
        (["--reward_funcs", "outcome", "shuffled:pum"], "need a Prefix Utility Model"),
    ],
)
def test_shuffled_names_are_checked_like_their_rewards(tmp_path, flags, message):
    argv = ["--config", str(_config(tmp_path)), "--output_dir", str(tmp_path / "out"), "--step_reward_func", SCORER]
    with pytest.raises(ValueError, match=message):
        train_grpo.parse_args([*argv, *flags])


@pytest.mark.slow  # trains
def test_a_custom_reward_and_step_scorer_are_called_in_training(tmp_path, tiny_model_dir, monkeypatch):
    monkeypatch.setattr(custom_rewards, "CALLS", {"reward": [], "scorer": []})
    out = tmp_path / "out"
    argv = ["--config", str(_config(tmp_path)), "--model_name_or_path", str(tiny_model_dir), "--output_dir", str(out),
            "--dataset_end", "2", "--max_steps", "1", "--num_generations", "2", "--per_device_train_batch_size", "2",
            "--max_completion_length", "6", "--run_eval", "false", "--logging_steps", "1", "--report_to", "none",
            "--use_cpu", "true", "--bf16", "false", "--generation_backend", "transformers"]  # fmt: skip
    assert train_grpo.main(argv) == 0
    calls = custom_rewards.CALLS
    assert len(calls["reward"]) == 1 and calls["scorer"] == calls["reward"]  # once, on the step's 2 completions
    (lengths,) = calls["scorer"]
    assert len(lengths) == 2 and all(n >= 1 for n in lengths)
    record = json.loads((out / "run.json").read_text())
    assert not (out / "summary.json").exists()
    summary = record["result"]
    assert summary["train"]["reward_funcs"] == ["outcome_reward", "token_count_reward"]
    assert summary["train"]["step_reward_func"] == "halves_step_scorer"
    (logs,) = [row for row in summary["log_history"] if "reward" in row]
    # the reward's column is each completion's length; the scorer's steps: 2 per completion of 2+ tokens, else 1
    assert logs["rewards/token_count_reward/mean"] == pytest.approx(sum(lengths) / 2)
    assert logs["completions/mean_length"] == pytest.approx(sum(lengths) / 2)
    assert logs["process/steps_per_completion"] == pytest.approx(sum(2 if n >= 2 else 1 for n in lengths) / 2)
    assert record["metrics"]["rewards/token_count_reward/mean"] == pytest.approx(sum(lengths) / 2)
