"""The oracle rewards by name in a GRPO config (`procrl.trainers.tasks.rewards.REWARDS`): `oracle_process` and
`oracle` as rewards, `oracle` as the step scorer, `oracle_penalty` as their setting."""

from pathlib import Path

import pytest

from procrl.rewards.oracle import OracleReward, OracleStepRewards, oracle_process_reward
from procrl.scripts.train_grpo import parse_args
from procrl.trainers.tasks.job import make_rewards
from procrl.trainers.tasks.rewards import REWARDS

DEMO = Path(__file__).resolve().parents[2] / "configs" / "grpo" / "svamp_smollm2_picsar.yaml"


def _rewards(tmp_path, *flags):
    return make_rewards(parse_args(["--config", str(DEMO), "--output_dir", str(tmp_path), *flags]))


def test_the_oracle_names_build_the_oracle_rewards(tmp_path):
    assert REWARDS["oracle"].task == REWARDS["oracle_process"].task == "math"
    funcs, weights, scorer = _rewards(
        tmp_path, "--reward_funcs", "outcome", "oracle_process", "--reward_weights", "1.0", "0.5",
        "--step_reward_func", "oracle", "--advantage_mode", "mixed", "--oracle_penalty", "0.25",
    )  # fmt: skip
    assert funcs[1] is oracle_process_reward and weights == [1.0, 0.5]
    assert isinstance(scorer, OracleStepRewards) and scorer.penalty == 0.25
    funcs, _, scorer = _rewards(tmp_path, "--reward_funcs", "outcome", "oracle", "--reward_weights", "1.0", "0.5")
    assert isinstance(funcs[1], OracleReward) and funcs[1].penalty == 0.5 and scorer is None


def test_the_import_paths_work_too(tmp_path):
    funcs, _, scorer = _rewards(
        tmp_path, "--reward_funcs", "outcome", "procrl.rewards.oracle:oracle_process_reward",
        "--reward_weights", "1.0", "0.5",
    )  # fmt: skip
    assert funcs[1] is oracle_process_reward


def test_a_negative_penalty_and_counting_twice_are_refused(tmp_path):
    with pytest.raises(ValueError, match="oracle_penalty must be >= 0"):
        parse_args(["--config", str(DEMO), "--output_dir", str(tmp_path), "--oracle_penalty", "-1"])
    with pytest.raises(ValueError, match="'oracle' is both in reward_funcs and step_reward_func"):
        parse_args(["--config", str(DEMO), "--output_dir", str(tmp_path), "--reward_funcs", "outcome", "oracle",
                    "--reward_weights", "1.0", "0.5", "--step_reward_func", "oracle", "--advantage_mode", "mixed"])  # fmt: skip
