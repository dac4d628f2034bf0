"""The GRPO monitors on the trainer path (`procrl.trainers.monitoring`): hacking metrics in log_history equal to an
independent computation on the logged completions, per-step scores in the completions table and completions.jsonl,
the rolling reward-accuracy warning, completions.jsonl across attempts (fresh / resumed), a failing monitor, and
the config fields."""

import json
import logging
import math
import statistics
from collections import defaultdict, deque

import pytest
import torch
from datasets import Dataset
from grpo_helpers import grpo_config
from transformers.trainer_callback import PrinterCallback, ProgressCallback

from procrl.generation import render_prompts
from procrl.rewards.outcome import outcome_reward
from procrl.step_rewards import StepRewards
from procrl.trainers import monitoring
from procrl.trainers.grpo import ProcessGRPOTrainer
from procrl.trainers.monitoring import (
    COMPLETIONS_FILE,
    CompletionsLog,
    ConsoleLineCallback,
    TrainingMonitor,
    log_batch_monitors,
    step_reward_columns,
)
from procrl.utils import completion_to_text

QUESTIONS = [("What is 2 + 3?", "5"), ("What is 4 + 4?", "8")]
TEXTS = [  # rows 0-3: gold 5, rows 4-7: gold 8 (TRL repeats each prompt num_generations = 4 times)
    "The answer is 5",
    "5 5 5 5 5 5 5 5 5",  # repetitive
    "It is 5. The answer is 5",
    "答案是 5 ✓",  # unicode
    "The answer is 8. The answer is 8. The answer is 8",  # repetitive
    "8",  # fewer than 4 tokens: no repetition rate
    "The answer is 8",
    "Four and four. The answer is 8",
]


class FixedRollout:
    """Returns TEXTS (tokenized + EOS) instead of sampling."""

    def __call__(self, prompts, trainer):
        tok = trainer.processing_class
        ids = [tok(t, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for t in TEXTS[: len(prompts)]]
        return {
            "prompt_ids": render_prompts(tok, prompts),
            "completion_ids": ids,
            "logprobs": [[0.0] * len(c) for c in ids],
            "completion_logps": [[-1.0] * len(c) for c in ids],
        }


def completion_chars(completions, **kwargs):
    return [float(len(completion_to_text(c))) for c in completions]


def _sentences(text):
    return [s for s in text.split(".") if s.strip()]


def step_labels(completions, log_extra=None, **kwargs):
    """A StepGap-like reward: one label per sentence, logged to the completions table; reward = number of steps."""
    labels = [["CORRECT" if "answer" in s else "STEP" for s in _sentences(completion_to_text(c))] for c in completions]
    log_extra("stepgap/step_labels", labels)
    return [float(len(row)) for row in labels]


class TwoSteps:
    """Step scorer: [chars / 10, unscored] at boundaries [1, len]; None without the word "answer"."""

    __name__ = "two_steps"

    def __call__(self, prompts, completions, completion_ids, **kwargs):
        return [
            StepRewards([len(completion_to_text(c)) / 10, math.nan], [1, len(ids)])
            if "answer" in completion_to_text(c)
            else None
            for c, ids in zip(completions, completion_ids, strict=True)
        ]


def _inputs():
    return [{"prompt": [{"role": "user", "content": q}], "answer": a} for q, a in QUESTIONS for _ in range(4)]


def _trainer(tmp_path, model, tokenizer, reward_funcs, **config):
    config = {"per_device_train_batch_size": 8, "max_completion_length": 32, "shuffle_dataset": False, **config}
    step_reward_func = TwoSteps() if config.get("advantage_mode", "outcome") != "outcome" else None
    return ProcessGRPOTrainer(
        model=model,
        reward_funcs=reward_funcs,
        args=grpo_config(tmp_path, **config),
        train_dataset=Dataset.from_list([dict(x) for x in _inputs()[::4]]),
        processing_class=tokenizer,
        rollout_func=FixedRollout(),
        step_reward_func=step_reward_func,
    )


def _rows(tmp_path):
    return [json.loads(line) for line in (tmp_path / COMPLETIONS_FILE).read_text(encoding="utf-8").splitlines()]


def _independent_monitors(rows, tokenizer, group_size=4):
    """Repetition rate and within-group length correlations from the logged completion TEXTS, re-tokenized, with
    the standard library's correlation (not procrl's)."""
    tokens = [tokenizer(r["completion"], add_special_tokens=False)["input_ids"] for r in rows]
    rates = []
    for t in tokens:
        grams = [tuple(t[i : i + 4]) for i in range(len(t) - 3)]
        if grams:
            rates.append((len(grams) - len(set(grams))) / len(grams))
    lengths = [len(t) + 1 for t in tokens]  # + EOS, which every fixed completion ends with
    corrs = {}
    for name in rows[0]["rewards"]:
        if name == "outcome_reward":
            continue
        per_group = []
        for g in range(0, len(rows), group_size):
            pairs = [(rows[i]["rewards"][name], lengths[i]) for i in range(g, g + group_size)]
            pairs = [(v, n) for v, n in pairs if v is not None]
            xs, ys = zip(*pairs, strict=True) if pairs else ((), ())
            if len(pairs) >= 2 and len(set(xs)) > 1 and len(set(ys)) > 1:
                per_group.append(statistics.correlation(xs, ys))
        if per_group:
            corrs[name] = sum(per_group) / len(per_group)
    return sum(rates) / len(rates), corrs


def _check_monitors(logs, rows, tokenizer):
    assert [r["completion"] for r in rows] == TEXTS  # the logged text is the completion, in batch order
    rate, corrs = _independent_monitors(rows, tokenizer)
    assert 0 < rate < 1
    assert logs["hacking/repetition_rate"] == pytest.approx(rate, rel=1e-5)
    assert set(corrs) == {"completion_chars", "step_labels"}
    for name, corr in corrs.items():
        assert logs[f"hacking/length_corr/{name}"] == pytest.approx(corr, rel=1e-6)
    assert "hacking/length_corr/outcome_reward" not in logs


def test_process_run_logs_monitors_and_per_step_scores(tmp_path, tiny_llama, tokenizer):
    """One generation batch through TRL's scoring path and one `log` call (no optimizer step)."""
    trainer = _trainer(
        tmp_path,
        tiny_llama,
        tokenizer,
        [outcome_reward, completion_chars, step_labels],
        advantage_mode="process",
        log_completions=True,
    )
    trainer.model.train()
    trainer._generate_and_score_completions([dict(x) for x in _inputs()])
    trainer.state.global_step = 1
    trainer.log({"loss": 0.5})
    logs = trainer.state.log_history[-1]
    rows = _rows(tmp_path)
    _check_monitors(logs, rows, tokenizer)
    assert [r["step"] for r in rows] == [1] * 8 and [r["index"] for r in rows] == list(range(8))
    assert all(r["mode"] == "train" and isinstance(r["advantage"], float) for r in rows)
    assert rows[0]["prompt"] == "What is 2 + 3?"
    scorer = TwoSteps()(None, TEXTS, [[0] * len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in TEXTS])
    for row, text, want in zip(rows, TEXTS, scorer, strict=True):
        assert row["stepgap/step_labels"] == ["CORRECT" if "answer" in s else "STEP" for s in _sentences(text)]
        if want is None:
            assert row["process/step_rewards"] is None and row["process/step_ends"] is None
        else:
            assert row["process/step_rewards"] == [pytest.approx(len(text) / 10), None]  # NaN -> null
            assert row["process/step_ends"] == [1, len(tokenizer(text, add_special_tokens=False)["input_ids"]) + 1]
    # the same columns reach TRL's completions table (parquet beside the run, and the wandb table's dataframe)
    import pandas as pd
    import wandb

    table = pd.read_parquet(tmp_path / "completions" / "completions_00001.parquet")
    assert {"process/step_rewards", "process/step_ends", "stepgap/step_labels"} <= set(table.columns)
    frame = pd.DataFrame({"completion": list(trainer._logs["completion"]), **trainer._logs["extra"]})
    assert len(wandb.Table(dataframe=frame).data) == 8  # None inside the lists, never NaN (wandb refuses NaN lists)


@pytest.mark.slow  # trains
def test_training_step_logs_monitors_completions_and_a_console_line(tmp_path, tiny_llama, tokenizer, caplog):
    trainer = _trainer(tmp_path, tiny_llama, tokenizer, [outcome_reward, completion_chars, step_labels])
    kinds = [type(cb) for cb in trainer.callback_handler.callbacks]
    assert ConsoleLineCallback in kinds and ProgressCallback not in kinds and PrinterCallback not in kinds
    stale = '{"step": 1, "mode": "train", "index": 0, "completion": "a previous attempt"}\n'
    (tmp_path / COMPLETIONS_FILE).write_text(stale, encoding="utf-8")  # a rerun into the same output_dir
    with caplog.at_level(logging.INFO, logger="procrl"):
        trainer.train()
    logs = trainer.state.log_history[0]
    rows = _rows(tmp_path)
    assert len(rows) == 8 and "a previous attempt" not in [r["completion"] for r in rows]  # only this run's rows
    assert (tmp_path / f"{COMPLETIONS_FILE}.prev").read_text(encoding="utf-8") == stale  # kept aside
    _check_monitors(logs, rows, tokenizer)
    assert all("process/step_rewards" not in r and "process/step_ends" not in r for r in rows)  # outcome mode
    assert "hacking/reward_accuracy_corr" not in logs  # one logging step: no correlation yet
    lines = [r.getMessage() for r in caplog.records if r.name == "procrl.trainers.monitoring.console"]
    assert lines[0].startswith("step 1/1 | loss ") and " | acc 0.625 | " in lines[0] and "s/step" in lines[0]
    assert f"hacking rep {logs['hacking/repetition_rate']:.3g}" in lines[0]
    assert lines[-1].startswith("done: 1 steps")


def _log_series(trainer, rewards, accuracies):
    for step, (reward, accuracy) in enumerate(zip(rewards, accuracies, strict=True), start=1):
        trainer._metrics["train"]["reward"].append(reward)
        trainer._metrics["train"]["task/accuracy"].append(accuracy)
        trainer.state.global_step = step
        trainer.log({"loss": 0.1})
    return [h.get("hacking/reward_accuracy_corr") for h in trainer.state.log_history]


def test_reward_accuracy_warning_on_the_trainer(tmp_path, tiny_llama, tokenizer, caplog):
    trainer = _trainer(tmp_path, tiny_llama, tokenizer, [outcome_reward], hacking_window=3)
    trainer.model.train()
    with caplog.at_level(logging.WARNING, logger="procrl"):
        corrs = _log_series(trainer, [0.1, 0.2, 0.3, 0.4, 0.5], [0.5, 0.4, 0.3, 0.2, 0.1])
    assert corrs[:2] == [None, None] and corrs[2:] == pytest.approx([-1.0] * 3)
    warnings = [r.getMessage() for r in caplog.records if "reward rises" in r.getMessage()]
    assert len(warnings) == 1 and warnings[0].startswith("step 3:")  # once for the whole crossing
    # the run record's trace of the alarm: 1.0 from the step it fired, while the condition holds
    assert [h["hacking/reward_accuracy_alarm"] for h in trainer.state.log_history] == [0.0, 0.0, 1.0, 1.0, 1.0]

    caplog.clear()
    trainer.state.log_history.clear()
    trainer.monitor = TrainingMonitor(trainer.args)
    with caplog.at_level(logging.WARNING, logger="procrl"):
        corrs = _log_series(trainer, [0.1, 0.2, 0.3, 0.4], [0.1, 0.3, 0.2, 0.4])
    assert all(c > 0 for c in corrs[2:])
    assert not [r for r in caplog.records if "reward rises" in r.getMessage()]
    assert [h["hacking/reward_accuracy_alarm"] for h in trainer.state.log_history] == [0.0] * 4


def _logs(n, extra=None):
    logs = {
        "prompt": deque([[{"role": "user", "content": f"q{i}"}] for i in range(n)]),
        "completion": deque([f"ü{i}" for i in range(n)]),
        "rewards": defaultdict(deque, {"r": deque([float(i) for i in range(n)])}),
        "advantages": deque([math.nan] + [0.5] * (n - 1)),
        "extra": defaultdict(deque, extra or {}),
    }
    return logs


def test_completions_log_rows_bounds_and_bad_columns(tmp_path, caplog):
    log = CompletionsLog(tmp_path / "sub" / COMPLETIONS_FILE, per_step=3)
    extra = {"labels": deque([["A"], ["B", "C"], [], ["D"]]), "step": deque([7] * 4), "short": deque([1, 2])}
    with caplog.at_level(logging.WARNING, logger="procrl"):
        assert log.write(5, "train", _logs(4, extra)) == 3
    assert "'short' has 2 values for 4 completions" in caplog.text
    text = (tmp_path / "sub" / COMPLETIONS_FILE).read_text(encoding="utf-8")
    assert "ü0" in text  # written as UTF-8, not escaped
    rows = [json.loads(line) for line in text.splitlines()]
    assert rows[0] == {
        "step": 5,
        "mode": "train",
        "index": 0,
        "prompt": "q0",
        "completion": "ü0",
        "rewards": {"r": 0.0},
        "advantage": None,  # NaN -> null
        "labels": ["A"],
        "extra/step": 7,  # an extra column named like a fixed key
    }
    assert [r["labels"] for r in rows] == [["A"], ["B", "C"], []]
    assert log.write(6, "eval", _logs(2)) == 2  # appends
    assert len((tmp_path / "sub" / COMPLETIONS_FILE).read_text().splitlines()) == 5
    assert CompletionsLog(tmp_path / "all.jsonl", per_step=None).write(1, "train", _logs(4)) == 4
    assert CompletionsLog(tmp_path / "none.jsonl").write(1, "train", _logs(0)) == 0
    assert not (tmp_path / "none.jsonl").exists()


def test_training_monitor_writes_each_batch_once(tmp_path):
    monitor = TrainingMonitor(grpo_config(tmp_path, completions_jsonl_per_step=2))
    monitor.on_log({}, _logs(4), 1, "train")
    assert not (tmp_path / COMPLETIONS_FILE).exists()  # no batch scored yet
    monitor.batches += 1
    monitor.on_log({}, _logs(4), 1, "train")
    monitor.on_log({}, _logs(4), 2, "train")  # steps_per_generation > 1: the same batch is not written twice
    assert [json.loads(x)["step"] for x in (tmp_path / COMPLETIONS_FILE).read_text().splitlines()] == [1, 1]
    off = TrainingMonitor(grpo_config(tmp_path / "off", completions_jsonl=False))
    off.batches += 1
    off.on_log({}, _logs(4), 1, "train")
    assert off.completions is None and not (tmp_path / "off" / COMPLETIONS_FILE).exists()
    assert TrainingMonitor(grpo_config(tmp_path), is_main_process=False).completions is None


def test_step_reward_columns():
    columns = step_reward_columns([StepRewards([0.5, math.nan], [2, 5]), None, StepRewards([1.0], [3])])
    assert columns == {
        "process/step_rewards": [[0.5, None], None, [1.0]],
        "process/step_ends": [[2, 5], None, [3]],
    }


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("hacking_window", 2, "hacking_window=2 must be >= 3"),
        ("completions_jsonl_per_step", 0, "completions_jsonl_per_step=0 must be >= 1"),
    ],
)
def test_config_validation(tmp_path, field, value, message):
    with pytest.raises(ValueError, match=message):
        grpo_config(tmp_path, **{field: value})


def test_config_defaults(tmp_path):
    config = grpo_config(tmp_path)
    assert (config.hacking_window, config.completions_jsonl, config.completions_jsonl_per_step) == (10, True, 16)
    assert config.console_line is True
    assert grpo_config(tmp_path, completions_jsonl_per_step=None).completions_jsonl_per_step is None


def test_console_line_off_keeps_transformers_output(tmp_path, tiny_llama, tokenizer):
    trainer = _trainer(tmp_path, tiny_llama, tokenizer, [outcome_reward], console_line=False)
    kinds = [type(cb) for cb in trainer.callback_handler.callbacks]
    assert ProgressCallback in kinds and ConsoleLineCallback not in kinds


def test_nan_rows_keep_the_stats_shape(tmp_path, tiny_llama, tokenizer):
    trainer = _trainer(tmp_path, tiny_llama, tokenizer, [outcome_reward])
    ids = [[1, 2, 3, 4, 1, 2, 3, 4, tokenizer.eos_token_id], [5, 6]]
    stats = trainer._local_process_stats(
        [{"answer": "5"}] * 2, ["p", "p"], ["x", "y"], ids, torch.zeros(2, 1)
    )  # (B, 4): correct, length, truncated, repetition
    assert stats.shape == (2, 4)
    assert stats[0, 1:3].tolist() == [9.0, 0.0] and stats[0, 3].item() == pytest.approx(0.2)  # EOS dropped
    assert stats[1, 2].item() == 1.0 and math.isnan(stats[1, 3].item())  # no EOS: truncated; < 4 tokens


def test_trainer_registers_the_train_begin_hook(tmp_path, tiny_llama, tokenizer):
    trainer = _trainer(tmp_path, tiny_llama, tokenizer, [outcome_reward])
    hooks = [cb for cb in trainer.callback_handler.callbacks if isinstance(cb, monitoring._TrainBegin)]
    assert len(hooks) == 1 and hooks[0].monitor is trainer.monitor


def test_a_failing_monitor_is_a_warning(caplog, monkeypatch):
    logged = []
    log = lambda key, value: logged.append((key, value))  # noqa: E731
    lengths = [3.0, 5.0, 4.0, 8.0]
    with caplog.at_level(logging.WARNING, logger="procrl"):
        # a partial group: 4 completions with group_size 3 -> within_group_corr raises ValueError
        log_batch_monitors(log, [0.5, 0.1, math.nan, 0.3], lengths, {"bonus": [1.0, 2.0, 0.0, 1.0]}, 3)
    assert logged == [("hacking/repetition_rate", pytest.approx(0.3))]
    assert "hacking/length_corr/bonus left out of this batch: the monitor failed (ValueError:" in caplog.text

    def broken(rates):
        raise RuntimeError("boom")

    monkeypatch.setattr(monitoring, "mean_repetition_rate", broken)
    logged.clear()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="procrl"):
        log_batch_monitors(log, [0.5] * 4, lengths, {"a": [1.0, 2.0, 3.0, 4.0], "b": [2.0, 1.0, 2.0, 1.0]}, 2)
    # within each pair the reward rises with the length (a) or falls (b): corr +1 in both pairs / -1 in both
    assert logged == [("hacking/length_corr/a", 1.0), ("hacking/length_corr/b", -1.0)]
    assert "hacking/repetition_rate left out of this batch: the monitor failed (RuntimeError: boom)" in caplog.text


def test_trainer_survives_a_partial_group(tmp_path, tiny_llama, tokenizer, caplog):
    trainer = _trainer(tmp_path, tiny_llama, tokenizer, [outcome_reward, completion_chars])
    trainer.model.train()
    # 3 rows with num_generations 4: not whole groups (within_group_corr raises); correct, length, truncated, rep.
    gathered = torch.tensor([[1.0, 4.0, 0.0, 0.1], [0.0, 6.0, 0.0, 0.3], [1.0, 9.0, 1.0, math.nan]])
    rewards = torch.tensor([[1.0, 10.0], [0.0, 20.0], [1.0, 40.0]])
    with caplog.at_level(logging.WARNING, logger="procrl"):
        trainer._log_process_metrics(gathered, rewards)
    metrics = trainer._pending_metrics  # TRL's _log_metric buffer (grpo_trainer.py:1576)
    assert metrics["task/accuracy"] == [pytest.approx(2 / 3)]
    assert metrics["hacking/repetition_rate"] == [pytest.approx(0.2)]
    assert "hacking/length_corr/completion_chars" not in metrics
    assert "hacking/length_corr/completion_chars left out of this batch" in caplog.text
