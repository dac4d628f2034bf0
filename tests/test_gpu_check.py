"""benchmarks/gpu_check.sh keeps working: run on CPU at tiny sizes in a subprocess, its report lines are checked.

The script is meant for a GPU machine (docs/scaling.md); `--device cpu` runs the same code path (random
Qwen2-shaped model, GRPO steps with process advantages, one PUM scoring pass) so CI notices when it breaks.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # starts a subprocess that trains

ROOT = Path(__file__).resolve().parent.parent


def test_gpu_check_runs_on_cpu(tmp_path):
    cmd = ["bash", "benchmarks/gpu_check.sh", "--device", "cpu", "--hidden", "32", "--layers", "1", "--heads", "2"]
    cmd += ["--prompts", "1", "--num_generations", "2", "--max_new_tokens", "8", "--steps", "2", "--chunk", "3"]
    env = {**os.environ, "PYTHON": sys.executable, "TOKENIZERS_PARALLELISM": "false", "WANDB_DIR": str(tmp_path)}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    lines = [line for line in proc.stdout.splitlines() if line.startswith("gpu_check: ")]
    assert lines[-1] == "gpu_check: OK", lines
    values = dict(line.removeprefix("gpu_check: ").split(": ", 1) for line in lines[:-1])
    assert values["device"] == "cpu (cpu), dtype float32"
    assert values["model"].startswith("random Qwen2,") and "hidden 32, 1 layers" in values["model"]
    assert values["generate"].startswith("2 rows x 8 tokens in ")
    assert float(values["generate tokens/s"]) > 0
    assert len(values["grpo steps"].split(", ")) == 2  # --steps 2: one time per step
    assert re.fullmatch(r"[0-9.]+ s \(median after the warm-up; 1 x 2 x 8 tokens\)", values["grpo step time"])
    # 2 trajectories of 8 tokens in steps of 3 (3 + 3 + 2) plus U(x, empty): 4 values each, all finite
    assert re.fullmatch(r"2 trajectories, 8 values, \d+ tokens in [0-9.]+ s", values["pum scoring"])
    assert float(values["pum tokens/s"]) > 0
    assert re.fullmatch(r"\d+ MiB \(max RSS\)", values["peak memory"])
