"""PUM rewards in `train_grpo.py` (`procrl.scripts.train_grpo`; reward names pum / pum_min / pum_last, step scorer pum,
pum_model) and launch/grpo_pum.sh.

A tiny random Llama stands in for the policy and a tiny random LlamaForSequenceClassification (saved with its score
head) for the PUM; each variant runs one GRPO step in a subprocess, exactly as a user starts it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from procrl.scripts.train_grpo import parse_args
from procrl.trainers.tasks.arguments import GRPOScriptArguments
from procrl.trainers.tasks.job import make_rewards

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "configs" / "grpo"
SCRIPT = ROOT / "launch" / "grpo_pum.sh"
VARIANTS = {
    "outcome_anchored": ("svamp_smollm2_pum.yaml", ["outcome_reward", "pum_utility"], "outcome"),
    "process_only": ("svamp_smollm2_pum_process.yaml", ["pum_utility"], "outcome"),
    "process_adv": ("svamp_smollm2_pum_steps.yaml", ["outcome_reward"], "mixed"),
}


def _parse(config: str, *flags: str):
    return parse_args(["--config", str(CONFIGS / config), *flags])


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_configs_build_the_documented_rewards(variant, tmp_path, models):
    config, names, mode = VARIANTS[variant]
    _, pum = models  # building the pum rewards loads the PUM (a bad pum_model fails before training)
    job = _parse(config, "--pum_model", str(pum), "--output_dir", str(tmp_path))
    funcs, weights, step_scorer = make_rewards(job)
    assert [getattr(f, "__name__", "") for f in funcs] == names
    assert job.training.advantage_mode == mode
    assert len(weights) == len(funcs)
    if variant == "outcome_anchored":
        assert weights == [1.0, 0.5]  # docs/architecture.md "PUM": outcome + 0.5 U(x, y)
    # in mixed mode the step scorer (step_reward_func: pum) is not also a scalar reward (never counted twice)
    assert (step_scorer is not None) == (mode != "outcome")
    assert step_scorer is None or step_scorer.__name__ == "pum_step_increments"


def test_pum_rewards_without_a_model_or_step_scorer_are_refused(tmp_path):
    with pytest.raises(ValueError, match="set pum_model"):
        GRPOScriptArguments(reward_funcs=["outcome", "pum_min"])
    with pytest.raises(ValueError, match="set pum_model"):
        GRPOScriptArguments(step_reward_func="pum")
    # refused when the settings are parsed, before any model loads
    with pytest.raises(ValueError, match="needs a step scorer: set step_reward_func"):
        _parse("svamp_smollm2_pum.yaml", "--advantage_mode", "mixed", "--output_dir", str(tmp_path))


@pytest.fixture(scope="module")
def models(tmp_path_factory, smollm2_tokenizer, tiny_llama_factory, tiny_pum_factory):
    policy = tmp_path_factory.mktemp("tiny-policy")
    tiny_llama_factory(len(smollm2_tokenizer)).save_pretrained(policy)
    smollm2_tokenizer.save_pretrained(policy)
    pum = tmp_path_factory.mktemp("tiny-pum")
    tiny_pum_factory(len(smollm2_tokenizer)).save_pretrained(pum)
    smollm2_tokenizer.save_pretrained(pum)
    return policy, pum


@pytest.mark.slow
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_launch_script_runs_each_variant(variant, tmp_path, models):
    policy, pum = models
    out = tmp_path / "out"
    env = {**os.environ, "VARIANT": variant, "PUM": str(pum), "MODEL": str(policy), "PYTHON": sys.executable,
           "WANDB_DIR": str(tmp_path), "TOKENIZERS_PARALLELISM": "false"}  # fmt: skip
    flags = ["--output_dir", str(out), "--max_steps", "1", "--num_generations", "2",
             "--per_device_train_batch_size", "2", "--max_completion_length", "12", "--run_eval", "false",
             "--report_to", "none"]  # fmt: skip
    proc = subprocess.run(["bash", str(SCRIPT), *flags], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    summary = json.loads((out / "run.json").read_text())["result"]
    _, names, mode = VARIANTS[variant]
    assert summary["train"]["steps"] == 1
    assert summary["train"]["reward_funcs"] == names
    logged = {k for row in summary["log_history"] for k in row}
    for name in names:
        assert f"rewards/{name}/mean" in logged
    if mode != "outcome":  # the step scorer ran: steps were counted per completion
        assert "process/steps_per_completion" in logged


@pytest.mark.slow
def test_launch_script_refuses_a_missing_pum(tmp_path):
    env = {**os.environ, "PUM": str(tmp_path / "no-such-pum"), "PYTHON": sys.executable}
    proc = subprocess.run(["bash", str(SCRIPT)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "Train one first" in proc.stderr


SHIM = """#!/usr/bin/env bash
# stands in for python: no CUDA for the scripts' check, and the command it would run, one argument a line
if [ "$1" = "-c" ]; then exit 1; fi
printf '%s\\n' "$@" > "$SHIM_OUT"
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    "script, entry, env",
    [
        ("grpo_pum.sh", "train_grpo.py", {"PUM": "."}),
        ("build_pum_math.sh", "procrl.scripts.build_pum_data", {}),
    ],
)
def test_cpu_ranks_pass_flags_after_a_double_dash(script, entry, env, tmp_path):
    """With NPROC > 1 on CPU the scripts run torchrun with "--" before the script's own flags: without it torchrun
    reads an abbreviation such as the builder's --start as its own --start-method and stops."""
    shim = tmp_path / "python"
    shim.write_text(SHIM)
    shim.chmod(0o755)
    env = {**os.environ, **env, "NPROC": "2", "PYTHON": str(shim), "SHIM_OUT": str(tmp_path / "argv")}
    proc = subprocess.run(["bash", str(ROOT / "launch" / script), "--start", "8"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    argv = (tmp_path / "argv").read_text().splitlines()
    assert argv[:4] == ["-m", "torch.distributed.run", "--nproc_per_node", "2"]
    after = argv[argv.index(entry) + 1 :]
    assert after[0] == "--" and after[1] == "--config" and after[-2:] == ["--start", "8"]


@pytest.mark.slow
def test_torchrun_passes_flags_after_a_double_dash_to_the_module(tmp_path):
    """The behaviour the scripts rely on: torchrun drops the "--" and hands the rest to the module unchanged."""
    (tmp_path / "print_argv.py").write_text("import json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "1"]
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    proc = subprocess.run([*torchrun, "-m", "print_argv", "--", "--start", "8", "--end", "9"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == ["--start", "8", "--end", "9"]
    bare = subprocess.run([*torchrun, "-m", "print_argv", "--start", "8"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    # why the scripts put "--" there: torchrun takes a bare --start for its --start-method (a torch that no longer
    # abbreviates its options passes it through, and then the "--" is harmless)
    assert bare.returncode == 0 or "--start" in bare.stderr
