"""The run record (`run.json`, `procrl.experiment.tracking`) of the result commands: `procrl select`, `procrl frs` and
`procrl beam` end to end on a tiny random policy (the record's metrics equal the numbers of the command's result; a
failing command leaves a failed record), and each command's `run_metrics` on a hand-made result."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from procrl.scripts import beam, build_pum_data, frs, select, stepgap_eval, train_grpo, train_pum

TINY = ["--device", "cpu", "--no-progress", "--generation-backend", "transformers"]
ACCURACY_KEYS = ("accuracy", "ci_low", "ci_high", "correct", "total", "abstained")


@pytest.fixture(autouse=True)
def _main_process(monkeypatch):
    for name in ("RANK", "LOCAL_RANK", "PROCRL_VARIANT"):
        monkeypatch.delenv(name, raising=False)


def test_select_writes_a_record_with_the_reports_accuracies(tmp_path, tiny_model_dir, monkeypatch):
    monkeypatch.setenv("PROCRL_VARIANT", json.dumps({"sweep": "bon", "name": "n2", "parameters": {"n": 2}, "seed": 0}))
    out = tmp_path / "sel"
    argv = [*TINY, "--model", str(tiny_model_dir), "--dataset", "svamp", "--end", "2", "--n", "2",
            "--max-new-tokens", "4", "--batch-size", "4", "--scorer", "majority,random",
            "--output-dir", str(out)]  # fmt: skip
    assert select.main(argv) == 0
    record = json.loads((out / "run.json").read_text())
    report = record["result"]
    assert record["command"] == "select" and record["status"] == "finished" and record["argv"] == argv
    assert record["variant"]["name"] == "n2" and record["history"] == []
    assert record["config"]["SelectConfig"]["n"] == 2 and record["config"]["SelectConfig"]["output_dir"] == str(out)
    assert record["config"]["TrackingArguments"] == {"report_to": ["none"]}
    expected = {
        f"select/{row}/{key}": report["results"][row][key] for row in report["results"] for key in ACCURACY_KEYS
    }
    expected |= {f"select/{key}": value for key, value in report["summary"].items()}
    assert record["metrics"] == expected
    assert set(report["results"]) == {"majority", "random", "pass@2 (oracle)"}  # so every row was compared


def test_frs_writes_a_record_with_the_reports_numbers(tmp_path, tiny_model_dir):
    out = tmp_path / "frs"
    argv = [*TINY, "--model", str(tiny_model_dir), "--end", "2", "--frs-traces", "2", "--max-new-tokens", "4",
            "--batch-size", "4", "--judge", "none", "--output-dir", str(out)]  # fmt: skip
    assert frs.main(argv) == 0
    record = json.loads((out / "run.json").read_text())
    report, metrics = record["result"]["report"], record["metrics"]
    assert set(record["config"]) == {"OfflineFRSConfig", "FRSArguments", "JudgeArguments", "TrackingArguments"}
    assert record["config"]["FRSArguments"]["frs_traces"] == 2 and record["config"]["JudgeArguments"]["judge"] == "none"
    assert metrics["frs/n_traces"] == report["n_traces"] == 4
    assert metrics["frs/accuracy"] == report["accuracy"] and metrics["frs/judged"] == report["n_judged"] == 0
    assert metrics["frs/mean_confidence"] == pytest.approx(report["mean_confidence"])
    assert metrics["frs/unscored"] == 0 and metrics["frs/n_scored"] == 0
    assert "frs/score" not in metrics and "frs/rs_auc" not in metrics  # nothing judged: not measured, not 0


def test_a_failing_command_leaves_a_failed_record(tmp_path, tiny_model_dir):
    out = tmp_path / "beam"
    argv = [*TINY, "--model", str(tiny_model_dir), "--end", "1", "--pum", str(tmp_path / "no-such-pum"),
            "--output-dir", str(out)]  # fmt: skip
    with pytest.raises(Exception) as raised:
        beam.main(argv)
    record = json.loads((out / "run.json").read_text())
    assert record["status"] == "failed" and record["command"] == "beam"
    assert record["error"].startswith(f"{type(raised.value).__name__}: ") and record["finished_at"] is not None
    assert record["result"] is None and record["files"] == {} and not (out / "problems.jsonl").exists()


# --------------------------------------------------------------------------------------------------------------------
# run_metrics of each command on hand-made results
# --------------------------------------------------------------------------------------------------------------------


def _eval_row(name, n, correct):
    return {"name": name, "n": n, "accuracy": correct / n, "mean_reward": 0.0, "mean_length": 10.0}


def test_train_grpo_metrics():
    summary = {
        "before": [_eval_row("svamp[700:850]", 150, 30), _eval_row("gsm8k[0:50]", 50, 5)],
        "after": [_eval_row("svamp[700:850]", 150, 45), _eval_row("gsm8k[0:50]", 50, 7)],
        "log_history": [
            {"step": 1, "reward": 0.2, "rewards/outcome_reward/mean": 0.1, "rewards/outcome_reward/std": 0.3,
             "completions/mean_length": 80.0, "frs/score": 40.0, "task/accuracy": 0.1, "loss": 0.5},
            {"step": 2, "reward": 0.4, "rewards/outcome_reward/mean": 0.3, "completions/mean_length": 70.0,
             "hacking/repetition_rate": 0.05, "process/mean_step_reward": 0.2, "stepgap/label_share/CC": 0.25,
             "note": "text"},
            {"step": 2, "train_runtime": 12.0, "train_loss": 0.4},
        ],
    }  # fmt: skip
    assert train_grpo.run_metrics(summary) == {
        "eval/svamp[700:850]/accuracy": 0.3, "eval/svamp[700:850]/correct": 45, "eval/svamp[700:850]/n": 150,
        "eval/svamp[700:850]/accuracy_before": 0.2,
        "eval/gsm8k[0:50]/accuracy": 0.14, "eval/gsm8k[0:50]/correct": 7, "eval/gsm8k[0:50]/n": 50,
        "eval/gsm8k[0:50]/accuracy_before": 0.1,
        "task/accuracy": 0.3, "task/correct": 45, "task/n": 150, "task/accuracy_before": 0.2,  # the first set
        # the mean of the last logged values (window 10 > 2 steps here: both steps)
        "reward": pytest.approx(0.3), "rewards/outcome_reward/mean": pytest.approx(0.2),
        "completions/mean_length": 75.0,
        "frs/score": 40.0,  # logged at step 1 only
        "task/train_accuracy": 0.1,  # the training batches' accuracy, beside the evaluation's task/accuracy
        "hacking/repetition_rate": 0.05, "process/mean_step_reward": 0.2, "stepgap/label_share/CC": 0.25,
    }  # fmt: skip
    # a window of 1: the last logged value of each key
    last = train_grpo.run_metrics(summary, window=1)
    assert last["reward"] == 0.4 and last["completions/mean_length"] == 70.0 and last["frs/score"] == 40.0


def test_train_grpo_metrics_without_evaluation():
    log = [{"step": 1, "reward": math.nan, "task/accuracy": 0.25}, {"step": 2, "reward": 0.5, "task/accuracy": 0.5}]
    metrics = train_grpo.run_metrics({"before": [], "after": [], "log_history": log})
    # NaN is not a value (never averaged in, never written); a search run's headline is its training accuracy
    assert metrics == {"reward": 0.5, "task/train_accuracy": 0.375}
    assert train_grpo.run_metrics({"before": [], "after": [], "log_history": [{"step": 1, "reward": math.nan}]}) == {}


def test_train_pum_metrics():
    after = {"accuracy": 0.75, "n": 40, "by_type": {"vertical": {"accuracy": 0.8, "n": 30}, "horizontal":
             {"accuracy": 0.6, "n": 10}}}  # fmt: skip
    summary = {
        "heldout": {"after": after, "before": {"accuracy": 0.5, "n": 40, "by_type": {}},
                    "length_baseline": {"accuracy": 0.55}},
        "train": {"train_loss": 0.6, "steps": 12},
        "log_history": [{"step": 5, "eval_loss": 0.7, "eval_pairwise_accuracy": 0.6},
                        {"step": 12, "eval_loss": 0.65, "eval_pairwise_accuracy": 0.75, "loss": 0.5}],
    }  # fmt: skip
    assert train_pum.run_metrics(summary) == {
        "eval_loss": 0.65, "eval_pairwise_accuracy": 0.75, "pum/heldout_accuracy": 0.75,
        "pum/heldout_accuracy_before": 0.5, "pum/heldout_n": 40, "pum/length_baseline_accuracy": 0.55,
        "pum/heldout/vertical/accuracy": 0.8, "pum/heldout/horizontal/accuracy": 0.6,
        "pum/train_loss": 0.6, "pum/steps": 12,
    }  # fmt: skip
    no_eval = {**summary, "heldout": {"after": None, "before": None, "length_baseline": None}, "log_history": []}
    assert train_pum.run_metrics(no_eval) == {"pum/train_loss": 0.6, "pum/steps": 12}  # nothing held out
    versus = {"difference": 0.2, "interval": [0.05, 0.31], "n_problems": 7, "n_pairs": 40}
    with_versus = {**summary, "heldout": {**summary["heldout"], "after": {**after, "vs_length": versus},
                                          "length_baseline": {"accuracy": 0.55, "by_type": {}}}}
    assert train_pum.run_metrics(with_versus)["pum/vs_length"] == 0.2
    data = {"dataset": "d", "train": {"pairs_kept": 9, "pairs_in": 9, "truncated_sequences": 0,
            "dropped_identical_after_truncation": 0}, "eval": {"pairs_kept": 40, "pairs_in": 40,
            "truncated_sequences": 0, "dropped_identical_after_truncation": 0}, "train_problems": 3,
            "eval_problems": 7}  # fmt: skip
    printed = train_pum.format_summary(
        {**with_versus, "model": "m", "lora": False, "world_size": 1, "data": data,
         "train": {**summary["train"], "wall_time_s": 3.0}}, {}
    )  # fmt: skip
    assert "PUM after - longer wins: +0.200 [+0.050, +0.310] (paired, 95% bootstrap over 7 held-out problems)" in printed


def test_build_pum_data_metrics():
    stats = {"problems": 10, "prefixes": 42, "pairs": {"vertical": 7}, "students": ["a", "b"], "tokens_generated": 900,
             "rollouts": {"per_student": 200, "total": 400, "generated_this_run": 300, "from_cache": 100}}  # fmt: skip
    assert build_pum_data.run_metrics(stats) == {
        "pum_data/pairs/vertical": 7, "pum_data/pairs/horizontal": 0, "pum_data/pairs/total": 7,  # none horizontal
        "pum_data/problems": 10, "pum_data/prefixes": 42, "pum_data/rollouts/per_student": 200,
        "pum_data/rollouts/total": 400, "pum_data/rollouts/generated_this_run": 300, "pum_data/rollouts/from_cache": 100,
        "pum_data/tokens_generated": 900,
    }  # fmt: skip


def test_stepgap_eval_metrics():
    full = {"sF1": 0.5, "step_precision": 0.4, "step_recall": 0.6, "Q-F1": 0.7, "BA": 0.55, "typed_macro_f1": 0.3,
            "per_label": {"CC": {"f1": 0.1}}, "confusion": {"CC": {"CC": 1}}, "gold_distribution": {"CC": 0.5},
            "label_distribution": {"NONE": 0.75, "CC": 0.25}, "n_steps": 8, "n_questions": 3, "n_error": 1}  # fmt: skip
    summary = {"metrics": {"full": full, "-A": {"sF1": 0.1}}, "judge_unscored": {"timeout": 2, "refusal": 1}}
    assert stepgap_eval.run_metrics(summary) == {
        "stepgap/sF1": 0.5, "stepgap/step_precision": 0.4, "stepgap/step_recall": 0.6, "stepgap/Q-F1": 0.7,
        "stepgap/BA": 0.55, "stepgap/typed_macro_f1": 0.3, "stepgap/label_distribution/NONE": 0.75,
        "stepgap/label_distribution/CC": 0.25, "stepgap/n_steps": 8, "stepgap/n_questions": 3, "stepgap/n_error": 1,
        "stepgap/judge_unscored": 3,
    }  # fmt: skip


def test_beam_metrics():
    row = {"accuracy": 0.5, "ci_low": 0.1, "ci_high": 0.9, "correct": 1, "total": 2, "abstained": 0}
    result = {"results": {"beam B=4 k=4": row}, "summary": {"rounds": 3, "unparseable_gold": 0}}
    assert beam.run_metrics(result) == {**{f"beam/{k}": v for k, v in row.items()}, "beam/rounds": 3,
                                        "beam/unparseable_gold": 0}  # fmt: skip


@pytest.mark.slow  # trains (one GRPO step of a tiny random policy, a few seconds unloaded)
def test_train_grpo_writes_a_record_with_its_evaluation_and_history(tmp_path, tiny_model_dir):
    out = tmp_path / "grpo"
    argv = ["--model_name_or_path", str(tiny_model_dir), "--output_dir", str(out), "--dataset_end", "2",
            "--reward_funcs", "outcome", "--max_steps", "1", "--num_generations", "2", "--per_device_train_batch_size",
            "2", "--max_completion_length", "6", "--eval_sets", "svamp:700:703:4", "gsm8k:0:2:4", "--logging_steps",
            "1", "--report_to", "none", "--use_cpu", "true", "--bf16", "false", "--generation_backend",
            "transformers"]  # fmt: skip
    assert train_grpo.main(argv) == 0
    record = json.loads((out / "run.json").read_text())
    summary = record["result"]  # run.json is the one results file: the job's summary is its result
    assert not (out / "summary.json").exists()
    assert record["files"] == {"checkpoint": str(out), "curves": str(out / "curves.png"),
                               "completions": str(out / "completions.jsonl")}  # fmt: skip
    assert all(Path(path).exists() for path in record["files"].values())
    assert record["command"] == "train-grpo" and record["status"] == "finished"
    assert set(record["config"]) == {"GRPOScriptArguments", "MathTaskArguments", "SearchTaskArguments",
                                     "FRSCallbackArguments", "ProcessGRPOConfig", "ModelConfig"}  # fmt: skip
    assert record["config"]["ProcessGRPOConfig"]["max_steps"] == 1
    metrics = record["metrics"]
    first, second = summary["after"]
    assert (metrics["task/accuracy"], metrics["task/n"]) == (first["accuracy"], first["n"]) and first["n"] == 3
    assert metrics["task/accuracy_before"] == summary["before"][0]["accuracy"]
    assert metrics[f"eval/{second['name']}/n"] == 2
    logged = [row for row in summary["log_history"] if "reward" in row]
    assert metrics["reward"] == pytest.approx(logged[-1]["reward"])
    assert metrics["rewards/outcome_reward/mean"] == pytest.approx(logged[-1]["rewards/outcome_reward/mean"])
    assert [row["step"] for row in record["history"]] == [row["step"] for row in summary["log_history"]]
