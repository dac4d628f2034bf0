"""`procrl demo` chains its two stages: the SFT stage's checkpoint is the GRPO stage's policy, flags after the
demo's own go to the GRPO stage, and the shipped configs parse."""

from __future__ import annotations

import json

import pytest
import yaml

from procrl.scripts import demo, sft, train_grpo


def test_the_shipped_demo_configs_parse_and_train_on_disjoint_splits():
    script, training, model_args = sft.make_parser().parse_args_and_config(
        ["--config", str(demo.find_config(demo.SFT_CONFIG))]
    )
    assert model_args.model_name_or_path.startswith("scratch:") and "tokenizer=arith" in model_args.model_name_or_path
    job = train_grpo.parse_args(["--config", str(demo.find_config(demo.GRPO_CONFIG)), "--model_name_or_path", "x"])
    assert job.script.step_reward_func == "oracle" and job.training.advantage_mode == "mixed"
    assert all("-train" in part for part in script.dataset_name.split("+"))
    assert "-train" in job.script.dataset_name and all("-test" in spec for spec in job.math.eval_sets)
    assert int(job.math.eval_sets[0].split(":")[2]) >= 350  # the issue's >= 350 held-out problems


@pytest.mark.slow  # trains twice (two tiny stages)
def test_the_demo_runs_sft_then_grpo_from_its_checkpoint(tmp_path, monkeypatch):
    monkeypatch.setenv("PROCRL_CACHE", str(tmp_path / "cache"))
    sft_config = tmp_path / "sft.yaml"
    sft_config.write_text(yaml.safe_dump({
        "base": str(demo.find_config(demo.SFT_CONFIG)), "max_steps": 2,
        "model_name_or_path": "scratch:llama,hidden=32,layers=1,heads=2,seed=0,tokenizer=arith",
        "dataset_name": "arith-ops1-d2-train-n16", "output_dir": str(tmp_path / "sft"),
    }))  # fmt: skip
    argv = ["--sft_config", str(sft_config), "--output_dir", str(tmp_path / "grpo"), "--max_steps", "1",
            "--per_device_train_batch_size", "4", "--num_generations", "4", "--max_completion_length", "8",
            "--dataset_end", "4", "--eval_sets", "arith-ops1-d2-test-n4:0:4:8", "--logging_steps", "1"]  # fmt: skip
    assert demo.main(argv) == 0
    checkpoint = json.loads((tmp_path / "sft" / "run.json").read_text())["result"]["checkpoint"]
    record = json.loads((tmp_path / "grpo" / "run.json").read_text())["result"]
    assert record["model"] == checkpoint and record["train"]["steps"] == 1
    assert set(record["paired"]["arith-ops1-d2-test-n4[0:4]"]) >= {"accuracy", "oracle_process_reward"}
    assert demo.main(argv) == 0  # the second run reads the warm start back
    assert json.loads((tmp_path / "sft" / "run.json").read_text())["result"]["status"] == "cached"
