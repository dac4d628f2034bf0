"""Subprocess smoke tests of the launch paths: python, accelerate launch, and two CPU ranks with torchrun.

A tiny random Llama over the SmolLM2 tokenizer stands in for the policy, so each run takes seconds.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from wandb_service import WANDB_SERVICE_ENV, wandb_records, wandb_summary  # tests/helpers

pytestmark = pytest.mark.slow  # every test here starts a subprocess

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
CONFIG = ROOT / "configs" / "grpo" / "svamp_smollm2_picsar.yaml"


def _flags(model_dir, out_dir, report_to="none"):
    return [
        "--config",
        str(CONFIG),
        "--model_name_or_path",
        str(model_dir),
        "--output_dir",
        str(out_dir),
        "--max_steps",
        "1",
        "--num_generations",
        "2",
        "--per_device_train_batch_size",
        "2",
        "--max_completion_length",
        "8",
        "--eval_sets",
        "svamp:700:702:8",
        "gsm8k:0:2:8",
        "--eval_batch_size",
        "2",
        "--report_to",
        report_to,
    ]


def _run(cmd, tmp_path, **env):
    # No WANDB_SERVICE: with a wandb service of this process in its environment, the command's wandb would attach to
    # that service instead of starting its own, and its exit would not wait for the .wandb file to be written
    # (tests/helpers/wandb_service.py). Its own service is joined at its exit (wandb's atexit teardown).
    inherited = {k: v for k, v in os.environ.items() if k != WANDB_SERVICE_ENV}
    full_env = {**inherited, "TOKENIZERS_PARALLELISM": "false", "WANDB_DIR": str(tmp_path), **env}
    proc = subprocess.run(cmd, cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return proc


def _summary(out_dir):
    summary = json.loads((Path(out_dir) / "run.json").read_text())["result"]  # the one results file
    assert (Path(out_dir) / "curves.png").stat().st_size > 1000
    assert [r["name"] for r in summary["before"]] == ["svamp[700:702]", "gsm8k[0:2]"]
    assert [r["name"] for r in summary["after"]] == ["svamp[700:702]", "gsm8k[0:2]"]
    assert summary["train"]["steps"] == 1
    return summary


def test_python_train_grpo_with_wandb_offline(tmp_path, tiny_model_dir):
    out = tmp_path / "out"
    proc = _run(
        [sys.executable, "train_grpo.py", *_flags(tiny_model_dir, out, "wandb")], tmp_path, WANDB_MODE="offline"
    )
    summary = _summary(out)
    assert summary["world_size"] == 1
    record = json.loads((out / "run.json").read_text())
    assert record["status"] == "finished" and record["command"] == "train-grpo"
    wandb_dir = record["files"]["wandb"]
    assert Path(wandb_dir).is_dir()
    assert "accuracy [95% CI]" in proc.stdout and f"sync later with: wandb sync {wandb_dir}" in proc.stdout
    # one wandb run, finished by procrl.experiment.tracking after the record's metrics went into its summary
    records = wandb_records(wandb_dir)
    assert [r.exit.exit_code for r in records if r.WhichOneof("record_type") == "exit"] == [0]
    assert wandb_summary(records)["task/accuracy"] == pytest.approx(record["metrics"]["task/accuracy"])


def test_accelerate_launch(tmp_path, tiny_model_dir):
    out = tmp_path / "out"
    _run(
        [
            str(BIN / "accelerate"),
            "launch",
            "--cpu",
            "--num_processes",
            "1",
            "train_grpo.py",
            *_flags(tiny_model_dir, out),
        ],
        tmp_path,
    )
    assert _summary(out)["world_size"] == 1


def test_two_cpu_ranks_with_torchrun(tmp_path, tiny_model_dir):
    out = tmp_path / "out"
    _run(
        [str(BIN / "torchrun"), "--standalone", "--nproc_per_node", "2", "train_grpo.py", *_flags(tiny_model_dir, out)],
        tmp_path,
        ACCELERATE_USE_CPU="True",
    )
    assert _summary(out)["world_size"] == 2


def test_cli_model_path_prints_the_cache_dir(tmp_path):
    proc = _run([str(BIN / "procrl"), "model", "path"], tmp_path, PROCRL_CACHE=str(tmp_path))
    assert proc.stdout.strip() == str(tmp_path / "models" / "SmolLM2-135M-Instruct")


def test_frs_callback_through_train_grpo(tmp_path, tiny_model_dir):
    # the frs_* fields of train_grpo.py attach FRSCallback, judged by the run's one judge (judge: none here); with
    # report_to none it writes JSON next to checkpoints
    out = tmp_path / "out"
    flags = _flags(tiny_model_dir, out) + [
        "--run_eval", "false",
        "--frs_every_n_steps", "1",
        "--judge", "none",
        "--frs_eval_set", "svamp:0:2",
        "--frs_traces", "2",
        "--frs_max_new_tokens", "8",
    ]  # fmt: skip
    _run([sys.executable, "train_grpo.py", *flags], tmp_path)
    reports = sorted(out.glob("frs_step*.json"))
    assert [p.name for p in reports] == ["frs_step1.json"]
    payload = json.loads(reports[0].read_text())
    assert payload["step"] == 1
    assert len(payload["traces"]) == 2 * 2  # 2 problems x 2 traces, generated by the current policy
    assert isinstance(payload["report"], dict)


def test_results_script_names_its_sections():
    """launch/results.sh (docs/results/README.md) refuses an unknown section with its usage line, exit 2, before
    running anything; the select config it reads parses."""
    done = subprocess.run(["bash", str(ROOT / "launch" / "results.sh"), "nope"], capture_output=True, text=True)
    assert (
        done.returncode == 2
        and "usage: launch/results.sh bestofn|frs|stepgap|all|picsar_arith|frs_arith|frs_arith_judges|frs_arith_grpo|pum_arith|"
        "pum_oracle_arith|pum_bestofn|grpo|grpo_corrupted|grpo_pum_corrupted|arith" in done.stderr
    )
    from procrl.scripts.select import make_parser

    (config,) = make_parser().parse_args_and_config(["--config", str(ROOT / "configs/results/select_svamp.yaml")])[:1]
    assert (config.dataset, config.start, config.end, config.n, config.temperature) == ("svamp", 700, 764, 16, 0.7)
    assert config.greedy and {"picsar", "picsar_reasoning", "picsar_answer", "majority", "pum_min"} <= set(
        config.scorers
    )
