"""The console line of procrl's GRPO runs (`procrl.trainers.monitoring`): its format, and where it goes (the procrl
logger when that shows INFO, else stdout through tqdm.write)."""

import logging
import math
from types import SimpleNamespace

import pytest
from transformers.trainer_callback import TrainerControl, TrainerState

from procrl.trainers.monitoring import ConsoleLineCallback, format_console_line, shows_info

FULL = {
    "loss": 0.0123,
    "grad_norm": 1.7,
    "learning_rate": 1e-6,
    "reward": 0.41,
    "reward_std": 0.2234,
    "task/accuracy": 0.375,
    "completions/mean_length": 143.25,
    "rewards/outcome_reward/mean": 0.375,
    "rewards/outcome_reward/std": 0.5,
    "rewards/picsar_bonus/mean": 0.12,
    "hacking/repetition_rate": 0.031,
    "hacking/reward_accuracy_corr": -0.2,
    "epoch": 0.1,
}


def test_full_line():
    assert format_console_line(FULL, 3, 25, 12.34) == (
        "step 3/25 | loss 0.0123 | reward 0.41 ± 0.223 | acc 0.375 | len 143 | outcome_reward 0.375 | "
        "picsar_bonus 0.12 | hacking rep 0.031 r·acc -0.2 | 12.3 s/step"
    )


@pytest.mark.parametrize(
    "logs, expected",
    [
        ({"loss": 0.5}, "step 2 | loss 0.5"),
        ({"reward": 0.4, "kl": 0.001}, "step 2 | reward 0.4 | kl 0.001"),  # no std: no ±
        ({"loss": None, "reward": math.nan, "task/accuracy": 0.5}, "step 2 | acc 0.5"),  # None / NaN omitted
        ({"loss": "0.5", "frs/score": 0.7, "hacking/repetition_rate": 0.0}, "step 2 | frs 0.7 | hacking rep 0"),
        ({"rewards/x/mean": math.inf, "rewards/x/std": 1.0, "loss": -2.5}, "step 2 | loss -2.5"),
    ],
)
def test_missing_fields_are_left_out(logs, expected):
    assert format_console_line(logs, 2, 0) == expected  # max_steps 0 (unknown): no "/N"


def test_eval_line_and_training_summary():
    logs = {"eval_loss": 0.1, "eval_reward": 0.5, "eval_task/accuracy": 0.25, "eval_runtime": 3.2}
    assert format_console_line(logs, 4, 10) == "eval step 4/10 | loss 0.1 | reward 0.5 | acc 0.25"
    summary = {"train_runtime": 310.24, "train_samples_per_second": 1.2, "train_loss": 0.0123, "epoch": 1.0}
    assert format_console_line(summary, 25, 25) == "done: 25 steps | 310 s | train_loss 0.0123"


def test_nothing_to_show():
    assert format_console_line({}, 1) is None
    assert format_console_line({"epoch": 1.0, "learning_rate": 1e-5}, 1) is None


@pytest.mark.parametrize("disable_tqdm", [True, False])
def test_callback_logs_the_line_on_the_main_process(caplog, disable_tqdm):
    args = SimpleNamespace(disable_tqdm=disable_tqdm)
    state, control = TrainerState(max_steps=5), TrainerControl()
    callback = ConsoleLineCallback()
    with caplog.at_level(logging.INFO, logger="procrl"):
        callback.on_train_begin(args, state, control)
        state.global_step = 2
        callback.on_step_end(args, state, control)
        callback.on_log(args, state, control, logs={"loss": 0.25, "reward": 0.5, "reward_std": 0.1})
        callback.on_log(args, state, control, logs={"eval_reward": 0.3})
        state.is_world_process_zero = False
        callback.on_log(args, state, control, logs={"loss": 0.25})
        state.is_world_process_zero = True
        callback.on_train_end(args, state, control)
    lines = [r.getMessage() for r in caplog.records if r.name == "procrl.trainers.monitoring.console"]
    assert len(lines) == 2
    assert lines[0].startswith("step 2/5 | loss 0.25 | reward 0.5 ± 0.1 | ") and lines[0].endswith(" s/step")
    assert lines[1] == "eval step 2/5 | reward 0.3"  # no s/step for an eval log
    assert callback.training_bar is None


@pytest.fixture
def set_level():
    """`set_level(logger, level)` through `Logger.setLevel` (which clears the loggers' isEnabledFor cache), undone
    after the test."""
    saved = {}

    def set_level(log, level):
        saved.setdefault(log, log.level)
        log.setLevel(level)

    yield set_level
    for log, level in saved.items():
        log.setLevel(level)


def _isolated(monkeypatch, set_level, name, level=logging.NOTSET):
    """A logger tree `name` cut off from root (where pytest's handlers are): what a library user who never
    configured logging has."""
    top = logging.getLogger(name)
    monkeypatch.setattr(top, "propagate", False)
    monkeypatch.setattr(top, "handlers", [])
    set_level(top, level)
    return top


def test_shows_info(monkeypatch, set_level):
    top = _isolated(monkeypatch, set_level, "procrl_test_console", logging.INFO)
    child = logging.getLogger("procrl_test_console.child")
    assert not shows_info(child)  # no handler up the chain: logging.lastResort shows WARNING only
    monkeypatch.setattr(top, "handlers", [logging.NullHandler(logging.WARNING)])
    assert not shows_info(child)  # a handler that drops INFO
    monkeypatch.setattr(top, "handlers", [logging.NullHandler(logging.WARNING), logging.NullHandler()])
    assert shows_info(child)
    set_level(top, logging.WARNING)
    assert not shows_info(child)  # the logger itself drops INFO
    set_level(child, logging.INFO)
    assert shows_info(child)
    set_level(top, logging.INFO)
    monkeypatch.setattr(child, "propagate", False)
    assert not shows_info(child)  # the handlers above are not reached


def _one_log(disable_tqdm):
    args = SimpleNamespace(disable_tqdm=disable_tqdm)
    state, control = TrainerState(max_steps=5), TrainerControl()
    callback = ConsoleLineCallback()
    callback.on_train_begin(args, state, control)
    state.global_step = 1
    callback.on_step_end(args, state, control)
    callback.on_log(args, state, control, logs={"loss": 0.25, "reward": 0.5})
    callback.on_train_end(args, state, control)


@pytest.mark.parametrize("disable_tqdm", [True, False])
@pytest.mark.parametrize("level", [logging.NOTSET, logging.WARNING])
def test_unconfigured_logging_prints_the_line(monkeypatch, set_level, capsys, caplog, disable_tqdm, level):
    _isolated(monkeypatch, set_level, "procrl", level)  # NOTSET: root's WARNING decides; WARNING: procrl set quiet
    _one_log(disable_tqdm)
    lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("step ")]
    assert len(lines) == 1 and lines[0].startswith("step 1/5 | loss 0.25 | reward 0.5 | ")
    assert lines[0].endswith(" s/step")
    assert not [r for r in caplog.records if r.name == "procrl.trainers.monitoring.console"]


def test_configured_logging_gets_the_line_not_stdout(capsys, caplog):
    with caplog.at_level(logging.INFO, logger="procrl"):
        _one_log(disable_tqdm=True)
    assert "step 1/5" not in capsys.readouterr().out
    assert [r.getMessage()[:8] for r in caplog.records if r.name == "procrl.trainers.monitoring.console"] == [
        "step 1/5"
    ]
