"""Issue 28 §3's GRPO arms on the arith organism: each configs/grpo/arith_organism_<arm>.yaml is a thin override of
the demo's GRPO config that parses and passes train_grpo.py's checks (the same check `procrl demo` runs before its
warm start), with the rewards, step scorer and advantage mode of its arm; the two sweeps expand to arms x seeds with
the SFT checkpoint given at run time (`procrl sweep --set`); launch/results.sh names its grpo section."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from procrl.scripts._common import load_config
from procrl.scripts.train_grpo import parse_args

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "configs" / "demo" / "grpo_organism.yaml"
CKPT = "/cache/procrl/sft/0123456789abcdef"

# arm: (reward_funcs, reward_weights, step_reward_func, advantage_mode, pum_model set)
ARMS = {
    "outcome": (["outcome", "oracle_process"], [1.0, 0.0], None, "outcome", False),
    "oracle": (["outcome", "oracle_process"], [1.0, 0.0], "oracle", "mixed", False),
    "oracle_shuffled": (["outcome", "oracle_process"], [1.0, 0.0], "shuffled:oracle", "mixed", False),
    "pum_anchored": (["outcome", "pum", "oracle_process"], [1.0, 0.5, 0.0], None, "outcome", True),
    "pum_mixed": (["outcome", "oracle_process"], [1.0, 0.0], "pum", "mixed", True),
    "pum_shuffled": (["outcome", "oracle_process"], [1.0, 0.0], "shuffled:pum", "mixed", True),
    "pum_process": (["pum", "oracle_process"], [1.0, 0.0], None, "outcome", True),
}
# the keys an arm may change: everything else (data, evaluation, GRPO settings, seed) is the demo's
ARM_KEYS = {
    "reward_funcs",
    "reward_weights",
    "step_reward_func",
    "advantage_mode",
    "pum_model",
    "output_dir",
    "run_name",
}


@pytest.mark.parametrize("arm", ARMS)
def test_each_arm_config_validates_as_a_thin_override_of_the_demo(arm, tmp_path):
    path = ROOT / "configs" / "grpo" / f"arith_organism_{arm}.yaml"
    assert load_config(path).get("base") is None and "base:" in path.read_text()  # resolved, and a thin file
    resolved, demo = load_config(path), load_config(DEMO)
    assert {k for k in resolved.keys() | demo.keys() if resolved.get(k) != demo.get(k)} <= ARM_KEYS
    assert resolved["output_dir"] == f"outputs/grpo/arith_organism_{arm}"
    job = parse_args(["--config", str(path), "--model_name_or_path", CKPT, "--output_dir", str(tmp_path)])
    funcs, weights, scorer, mode, uses_pum = ARMS[arm]
    assert job.script.reward_funcs == funcs and job.training.reward_weights == weights
    assert (job.script.step_reward_func, job.training.advantage_mode) == (scorer, mode)
    assert bool(job.script.pum_model) == uses_pum
    assert "oracle_process" in funcs  # ProcessAcc is evaluated in every arm, never trained on (weight 0)
    assert weights[funcs.index("oracle_process")] == 0.0
    assert job.training.max_steps == 150 and job.math.eval_sets == ["arith-ops4-d1-test-n400:0:400:64"]


def _dry_run(sweep: str, *sets: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-m", "procrl.scripts.sweep", f"configs/sweeps/{sweep}.yaml", "--dry-run", "--set", *sets],
        cwd=ROOT, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return [line for line in done.stdout.splitlines() if not line.startswith("#")]


@pytest.mark.slow  # two subprocesses (the command's import time)
def test_the_sweeps_list_arms_by_seeds_with_the_checkpoint_given_at_run_time():
    commands = _dry_run("process_rewards_organism", f"model_name_or_path={CKPT}")
    assert len(commands) == 9
    expected = [(arm, seed) for arm in ("outcome", "oracle", "oracle_shuffled") for seed in (0, 1, 2)]
    for command, (arm, seed) in zip(commands, expected, strict=True):
        assert f"--config=configs/grpo/arith_organism_{arm}.yaml --seed={seed} " in command
        assert f"--model_name_or_path={CKPT} " in command
        assert command.endswith(f"--output_dir outputs/sweeps/process_rewards_organism/config=arith_organism_{arm},seed={seed}")  # fmt: skip
    commands = _dry_run("process_rewards_organism_pum", f"model_name_or_path={CKPT}", "pum_model=/pums/organism")
    assert len(commands) == 12
    assert all("--pum_model=/pums/organism " in c and f"--model_name_or_path={CKPT} " in c for c in commands)
    arms = [c.split("--config=configs/grpo/arith_organism_")[1].split(".yaml")[0] for c in commands]
    assert arms == [a for a in ("pum_anchored", "pum_mixed", "pum_shuffled", "pum_process") for _ in range(3)]


def test_results_script_has_the_grpo_section():
    text = (ROOT / "launch" / "results.sh").read_text()
    assert "grpo() {" in text and '--set "model_name_or_path=$organism"' in text
    assert "--reference outcome --placebo" in text
    done = subprocess.run(["bash", str(ROOT / "launch" / "results.sh"), "nope"], capture_output=True, text=True)
    assert done.returncode == 2 and "|grpo|" in done.stderr
