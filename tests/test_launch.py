"""Subprocess smoke tests of the launch paths: python, accelerate launch, and two CPU ranks with torchrun.

A tiny random Llama over the SmolLM2 tokenizer stands in for the policy, so each run takes seconds.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
CONFIG = ROOT / "configs" / "grpo" / "svamp_smollm2_picsar.yaml"


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory, smollm2_tokenizer, tiny_llama_factory):
    path = tmp_path_factory.mktemp("tiny-policy")
    tiny_llama_factory(len(smollm2_tokenizer)).save_pretrained(path)
    smollm2_tokenizer.save_pretrained(path)
    return path


def _flags(model_dir, out_dir, report_to="none"):
    return [
        "--config", str(CONFIG),
        "--model_name_or_path", str(model_dir),
        "--output_dir", str(out_dir),
        "--max_steps", "1",
        "--num_generations", "2",
        "--per_device_train_batch_size", "2",
        "--max_completion_length", "8",
        "--eval_sets", "svamp:700:702:8", "gsm8k:0:2:8",
        "--eval_batch_size", "2",
        "--report_to", report_to,
    ]


def _run(cmd, tmp_path, **env):
    full_env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "WANDB_DIR": str(tmp_path), **env}
    proc = subprocess.run(cmd, cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return proc


def _summary(out_dir):
    summary = json.loads((Path(out_dir) / "summary.json").read_text())
    assert (Path(out_dir) / "curves.png").stat().st_size > 1000
    assert [r["name"] for r in summary["before"]] == ["svamp[700:702]", "gsm8k[0:2]"]
    assert [r["name"] for r in summary["after"]] == ["svamp[700:702]", "gsm8k[0:2]"]
    assert summary["train"]["steps"] == 1
    return summary


def test_python_train_grpo_with_wandb_offline(tmp_path, tiny_model_dir):
    out = tmp_path / "out"
    proc = _run([sys.executable, "train_grpo.py", *_flags(tiny_model_dir, out, "wandb")], tmp_path, WANDB_MODE="offline")
    summary = _summary(out)
    assert summary["world_size"] == 1
    assert summary["wandb_dir"] and Path(summary["wandb_dir"]).is_dir()
    assert "accuracy [95% CI]" in proc.stdout  # the before/after table is printed


def test_accelerate_launch(tmp_path, tiny_model_dir):
    out = tmp_path / "out"
    _run([str(BIN / "accelerate"), "launch", "--cpu", "--num_processes", "1", "train_grpo.py", *_flags(tiny_model_dir, out)],
         tmp_path)
    assert _summary(out)["world_size"] == 1


def test_two_cpu_ranks_with_torchrun(tmp_path, tiny_model_dir):
    out = tmp_path / "out"
    _run([str(BIN / "torchrun"), "--nproc_per_node", "2", "train_grpo.py", *_flags(tiny_model_dir, out)],
         tmp_path, ACCELERATE_USE_CPU="True")
    assert _summary(out)["world_size"] == 2


def test_cli_model_path_prints_the_cache_dir(tmp_path):
    proc = _run([str(BIN / "procrl"), "model", "path"], tmp_path, PROCRL_CACHE=str(tmp_path))
    assert proc.stdout.strip() == str(tmp_path / "models" / "SmolLM2-135M-Instruct")
