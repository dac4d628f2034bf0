"""launch/lib.sh's sft_chain: each stage's `procrl sft` starts from the previous stage's checkpoint, and the last
stage's checkpoint is printed (a fake procrl records its calls and writes each stage's run.json)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # starts bash and python subprocesses

ROOT = Path(__file__).resolve().parents[1]

FAKE_PROCRL = """#!/usr/bin/env bash
# records its arguments; writes <output_dir of the config>/run.json naming a checkpoint after the config
echo "$*" >> "$CALLS"
config=$3
out=$(sed -n 's/^output_dir: *//p' "$config")
mkdir -p "$out"
echo "{\\"result\\": {\\"checkpoint\\": \\"ckpt-$(basename "$config" .yaml)\\"}}" > "$out/run.json"
"""


def test_sft_chain_trains_each_stage_from_the_previous_checkpoint(tmp_path):
    (tmp_path / "a.yaml").write_text(f"model_name_or_path: default\noutput_dir: {tmp_path / 'out_a'}\n")
    (tmp_path / "b.yaml").write_text(f"base: a.yaml\nmax_steps: 3\noutput_dir: {tmp_path / 'out_b'}\n")
    fake = tmp_path / "procrl"
    fake.write_text(FAKE_PROCRL)
    fake.chmod(0o755)
    env = {**os.environ, "PROCRL": str(fake), "PY": sys.executable, "CALLS": str(tmp_path / "calls")}
    script = f'source launch/lib.sh; sft_chain "{tmp_path / "a.yaml"}+{tmp_path / "b.yaml"}"'
    done = subprocess.run(["bash", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ckpt-b"
    calls = (tmp_path / "calls").read_text().splitlines()
    assert calls == [f"sft --config {tmp_path / 'a.yaml'}", f"sft --config {tmp_path / 'b.yaml'} --model_name_or_path ckpt-a"]
    assert json.loads((tmp_path / "out_b" / "run.json").read_text())["result"]["checkpoint"] == "ckpt-b"
