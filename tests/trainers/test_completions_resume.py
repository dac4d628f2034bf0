"""completions.jsonl across attempts (review 4): at train begin a fresh run moves a previous attempt's file aside, a
resumed run keeps the rows up to its checkpoint; the hook the trainer registers (`TrainingMonitor.attach`) is
tested in test_monitoring.py, and a real run in its slow training test."""

import json
import logging
import math
from collections import defaultdict, deque

from grpo_helpers import grpo_config
from transformers.trainer_callback import TrainerControl, TrainerState

from procrl.trainers import monitoring
from procrl.trainers.monitoring import COMPLETIONS_FILE, CompletionsLog, TrainingMonitor


def _logs(n):
    """TRL's `trainer._logs` for n completions (as in test_monitoring.py)."""
    return {
        "prompt": deque([[{"role": "user", "content": f"q{i}"}] for i in range(n)]),
        "completion": deque([f"ü{i}" for i in range(n)]),
        "rewards": defaultdict(deque, {"r": deque([float(i) for i in range(n)])}),
        "advantages": deque([math.nan] + [0.5] * (n - 1)),
        "extra": defaultdict(deque),
    }


def _rows(tmp_path):
    return [json.loads(line) for line in (tmp_path / COMPLETIONS_FILE).read_text(encoding="utf-8").splitlines()]


def _row(step, mode="train", index=0):
    return json.dumps({"step": step, "mode": mode, "index": index, "completion": f"{mode}{step}.{index}"}) + "\n"


def test_fresh_run_moves_a_previous_attempts_rows_aside(tmp_path, caplog):
    path = tmp_path / COMPLETIONS_FILE
    old = _row(1) + _row(2) + _row(2, "eval")
    path.write_text(old, encoding="utf-8")
    (tmp_path / f"{COMPLETIONS_FILE}.prev").write_text("older\n", encoding="utf-8")
    monitor = TrainingMonitor(grpo_config(tmp_path))
    with caplog.at_level(logging.INFO, logger="procrl"):
        monitoring._TrainBegin(monitor).on_train_begin(None, TrainerState(global_step=0), TrainerControl())
    assert not path.exists() and (tmp_path / f"{COMPLETIONS_FILE}.prev").read_text(encoding="utf-8") == old
    assert "moved to" in caplog.text
    monitor.batches += 1
    monitor.on_log({}, _logs(2), 1, "train")
    assert [(r["step"], r["completion"]) for r in _rows(tmp_path)] == [(1, "ü0"), (1, "ü1")]  # this run's rows only
    CompletionsLog(tmp_path / "missing.jsonl").start(0)  # nothing to move: no file appears
    assert not (tmp_path / "missing.jsonl").exists() and not (tmp_path / "missing.jsonl.prev").exists()


def test_resumed_run_keeps_the_rows_up_to_the_checkpoint(tmp_path, caplog):
    path = tmp_path / COMPLETIONS_FILE
    kept = _row(1) + _row(1, index=1) + _row(2, "eval") + _row(3)
    later = _row(4) + _row(5, "eval")  # written after the step-3 checkpoint by the attempt that died
    path.write_text(kept + later + '"not a row"\n{"step": true}\n\n{"step": 2, "mode": "tr', encoding="utf-8")
    monitor = TrainingMonitor(grpo_config(tmp_path))
    with caplog.at_level(logging.INFO, logger="procrl"):
        monitoring._TrainBegin(monitor).on_train_begin(None, TrainerState(global_step=3), TrainerControl())
    assert path.read_text(encoding="utf-8") == kept
    assert "kept 4 rows, dropped 5" in caplog.text  # 2 later rows, a string, a bool step, a cut-off line
    assert not (tmp_path / f"{COMPLETIONS_FILE}.prev").exists()
    assert [p.name for p in tmp_path.iterdir()] == [COMPLETIONS_FILE]  # no temp file left behind
    monitor.batches += 1
    monitor.on_log({}, _logs(1), 4, "train")
    assert [r["step"] for r in _rows(tmp_path)] == [1, 1, 2, 3, 4]


def test_train_begin_without_a_completions_log_and_on_os_error(tmp_path, caplog):
    (tmp_path / COMPLETIONS_FILE).write_text(_row(1), encoding="utf-8")
    TrainingMonitor(grpo_config(tmp_path, completions_jsonl=False)).on_train_begin(0)  # no log: nothing to do
    assert (tmp_path / COMPLETIONS_FILE).read_text(encoding="utf-8") == _row(1)
    (tmp_path / f"{COMPLETIONS_FILE}.prev" / "x").mkdir(parents=True)  # a directory in the way: os.replace fails
    with caplog.at_level(logging.ERROR, logger="procrl"):
        TrainingMonitor(grpo_config(tmp_path)).on_train_begin(0)  # telemetry: logged, training goes on
    assert "could not prepare" in caplog.text
