"""The mission's entry commands, each run as a user runs it: a subprocess started in an empty working directory.

- `accelerate launch train_pum.py` trains on the shipped PUM-Math pairs with no data of the user's (a few pairs and
  one step here; the defaults are the CPU-sized run), and a missing pair set is one clear line, not a traceback;
- `launch/grpo_stepgap.sh` runs one GRPO step at a tiny size (tiny random policy, the builtin index, the local judge
  server started and stopped by the job);
- `procrl build-pum-data` builds pairs for one GSM8K problem with a tiny random student.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
pytestmark = pytest.mark.slow


def _run(cmd: list[str], cwd: Path, timeout: int = 900, **env) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "WANDB_MODE": "disabled", **env}
    proc = subprocess.run(cmd, cwd=cwd, env=full_env, capture_output=True, text=True, timeout=timeout)
    return proc


def test_accelerate_launch_train_pum_on_the_shipped_pairs(tmp_path):
    # the documented command with nothing in the working directory; the flags only make it small
    flags = ["--max_steps", "1", "--max_train_pairs", "4", "--max_eval_pairs", "4", "--per_device_train_batch_size",
             "2", "--per_device_eval_batch_size", "4", "--probe_size", "1"]  # fmt: skip
    proc = _run([str(BIN / "accelerate"), "launch", str(ROOT / "train_pum.py"), *flags], cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    summary = json.loads((tmp_path / "outputs" / "pum" / "run.json").read_text())["result"]
    assert summary["data"]["dataset"] == "pum_math_gsm8k_cpu"
    assert summary["train"]["steps"] == 1
    assert summary["heldout"]["after"]["n"] == 4
    assert "all" in proc.stdout and "checkpoint: outputs/pum" in proc.stdout  # the held-out table was printed
    assert (tmp_path / "outputs" / "pum" / "pum_config.json").is_file()


def test_train_pum_names_a_missing_pair_set_in_one_line(tmp_path):
    missing = "outputs/pum_math/gsm8k/dataset"
    proc = _run([sys.executable, str(ROOT / "train_pum.py"), "--dataset_name", missing], cwd=tmp_path, timeout=300)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    (line,) = [x for x in proc.stderr.splitlines() if x.startswith("train_pum.py: error:")]
    assert missing in line and "procrl build-pum-data --config configs/pum/build_gsm8k_cpu.yaml" in line


def test_grpo_stepgap_script_at_a_tiny_size(tmp_path, tiny_model_dir):
    out = tmp_path / "out"
    flags = ["--output_dir", str(out), "--dataset_end", "1", "--max_steps", "1", "--num_generations", "2",
             "--per_device_train_batch_size", "2", "--max_completion_length", "24", "--search_topk", "1",
             "--report_to", "none"]  # fmt: skip
    proc = _run(["bash", str(ROOT / "launch" / "grpo_stepgap.sh"), *flags], cwd=tmp_path,
                MODEL=str(tiny_model_dir), PYTHON=sys.executable)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    summary = json.loads((out / "run.json").read_text())["result"]
    assert summary["task"] == "search" and summary["train"]["steps"] == 1
    assert summary["train"]["reward_funcs"] == ["em_reward", "stepgap_reward"]
    logged = {k for row in summary["log_history"] for k in row}
    # a random policy seldom writes a step the verifier labels, so label shares may be absent; these are always logged
    assert {"rewards/stepgap_reward/mean", "stepgap/steps_per_completion", "stepgap/format_violations"} <= logged


def test_build_pum_data_at_a_tiny_size(tmp_path, tiny_model_dir):
    out = tmp_path / "pairs"
    flags = ["--config", str(ROOT / "configs" / "pum" / "build_gsm8k_cpu.yaml"), "--end", "1", "--output_dir",
             str(out), "--trajectory_source", "reference", "--students", str(tiny_model_dir), str(tiny_model_dir),
             "--student_max_new_tokens", "4", "4", "--n_rollouts", "2", "--n_rollouts_bare", "2",
             "--generation_backend", "transformers"]  # fmt: skip
    proc = _run([str(BIN / "procrl"), "build-pum-data", *flags], cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    stats = json.loads((out / "stats.json").read_text())
    assert stats["problems"] == 1
    assert stats["rollouts"]["total"] == stats["prefixes"] * 2 * 2 + 2 * 2  # 2 students x (n per prefix + n_0)
    assert (out / "pairs.parquet").is_file() and (out / "dataset").is_dir()
