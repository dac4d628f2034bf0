"""One readable console line per logging step for procrl's GRPO runs (`ProcessGRPOConfig.console_line`).

transformers registers `PrinterCallback` (with `disable_tqdm`) or its `ProgressCallback` (transformers/trainer.py:599),
and both write the whole metrics dict with floats turned into strings (trainer_callback.py:673-690 and :703-708).
`install_console_line(trainer)` swaps that callback for `ConsoleLineCallback`, which keeps the progress bar (when
tqdm is on) and logs, through procrl's logger, a line like

    step 3/25 | loss 0.012 | reward 0.41 ± 0.22 | acc 0.38 | len 143 | outcome_reward 0.38 | picsar_bonus 0.12 |
    hacking rep 0.03 r·acc -0.2 | 12.3 s/step

When procrl's logger would not show an INFO record (its level is above INFO, or no handler up its chain takes
INFO: a library user who never configured logging has only `logging.lastResort`, which shows WARNING and up), the
line is written to stdout with `tqdm.write` instead, where transformers' `PrinterCallback` printed its dict: the
per-step output is never lost by default.

Fields whose metric is missing (or None/NaN) are left out. The full metrics are untouched: the callback only reads
`logs`; `state.log_history` and the report_to backends get everything (they are filled before the callbacks run,
`Trainer.log`, transformers/trainer.py:4210-4211).
"""

from __future__ import annotations

import logging
import math
import time

from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm
from transformers.trainer import DEFAULT_PROGRESS_CALLBACK
from transformers.trainer_callback import PrinterCallback, ProgressCallback

from procrl.utils import get_logger

logger = get_logger(__name__)

__all__ = ["ConsoleLineCallback", "format_console_line", "format_number", "install_console_line", "shows_info"]


def format_number(value) -> str | None:
    """A metric for the console: 3 significant digits, whole numbers from 100 up; None for a missing value.

    >>> [format_number(v) for v in (0.01234, 143.25, -0.2, 12.34, None, float("nan"))]
    ['0.0123', '143', '-0.2', '12.3', None, None]
    """
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


def format_console_line(logs: dict, step: int, max_steps: int | None = None, seconds_per_step: float | None = None):
    """The console line of one `logs` dict (a train or an `eval_` log; the final training summary gets its own
    short form). Returns None when there is nothing to show."""
    if "train_runtime" in logs:
        parts = [f"done: {step} steps", f"{format_number(logs['train_runtime'])} s"]
        if format_number(logs.get("train_loss")):
            parts.append(f"train_loss {format_number(logs['train_loss'])}")
        return " | ".join(parts)
    prefix = "eval_" if any(k.startswith("eval_") for k in logs) else ""
    get = lambda key: format_number(logs.get(prefix + key))  # noqa: E731 - a local shorthand
    parts = [f"{'eval ' if prefix else ''}step {step}" + (f"/{max_steps}" if max_steps and max_steps > 0 else "")]

    def add(label: str, key: str) -> None:
        if get(key) is not None:
            parts.append(f"{label} {get(key)}")

    add("loss", "loss")
    if get("reward") is not None:
        spread = f" ± {get('reward_std')}" if get("reward_std") is not None else ""
        parts.append(f"reward {get('reward')}{spread}")
    add("acc", "task/accuracy")
    add("len", "completions/mean_length")
    add("kl", "kl")
    for key in sorted(logs):
        name = key.removeprefix(prefix)
        if name.startswith("rewards/") and name.endswith("/mean") and get(name) is not None:
            parts.append(f"{name[len('rewards/') : -len('/mean')]} {get(name)}")
    add("frs", "frs/score")
    hacking = [
        f"{label} {get(key)}"
        for label, key in (("rep", "hacking/repetition_rate"), ("r·acc", "hacking/reward_accuracy_corr"))
        if get(key) is not None
    ]
    if hacking:
        parts.append("hacking " + " ".join(hacking))
    if format_number(seconds_per_step) is not None:
        parts.append(f"{format_number(seconds_per_step)} s/step")
    return " | ".join(parts) if len(parts) > 1 else None


def shows_info(log: logging.Logger) -> bool:
    """Whether an INFO record of `log` reaches a handler: `log` is enabled for INFO and it or an ancestor it
    propagates to has a handler whose level is INFO or lower (`logging.Logger.callHandlers`, logging/__init__.py;
    `logging.lastResort`, used when there is none, shows WARNING and up). Handler filters are not consulted."""
    if not log.isEnabledFor(logging.INFO):
        return False
    current: logging.Logger | None = log
    while current is not None:
        if any(handler.level <= logging.INFO for handler in current.handlers):
            return True
        current = current.parent if current.propagate else None
    return False


class ConsoleLineCallback(ProgressCallback):
    """transformers' `ProgressCallback` (the bar, unless `disable_tqdm`) whose `on_log` logs `format_console_line`
    at INFO on the world's main process instead of writing the dict, or writes it to stdout with `tqdm.write` when
    procrl's logger would not show it (`shows_info`). Seconds per step are wall time between two
    train logs divided by the optimizer steps between them (from the start of training for the first)."""

    def __init__(self, max_str_len: int = 100):
        super().__init__(max_str_len)
        self._last: tuple[float, int] | None = None

    def on_train_begin(self, args, state, control, **kwargs):
        if not args.disable_tqdm:
            super().on_train_begin(args, state, control, **kwargs)
        self._last = (time.monotonic(), state.global_step)

    def on_step_end(self, args, state, control, **kwargs):
        if self.training_bar is not None:
            super().on_step_end(args, state, control, **kwargs)

    def on_train_end(self, args, state, control, **kwargs):
        if self.training_bar is not None:
            super().on_train_end(args, state, control, **kwargs)

    def on_prediction_step(self, args, state, control, eval_dataloader=None, **kwargs):
        if not args.disable_tqdm:
            super().on_prediction_step(args, state, control, eval_dataloader=eval_dataloader, **kwargs)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs:
            return
        seconds = None
        is_train = not any(k.startswith("eval_") for k in logs) and "train_runtime" not in logs
        if is_train and self._last is not None and state.global_step > self._last[1]:
            now = time.monotonic()
            seconds = (now - self._last[0]) / (state.global_step - self._last[1])
            self._last = (now, state.global_step)
        line = format_console_line(logs, state.global_step, state.max_steps, seconds)
        if line is None:
            return
        if not shows_info(logger):  # nobody configured logging (a library user): print like PrinterCallback did
            tqdm.write(line)  # above the bar, if there is one (tqdm/std.py:718-726)
        elif self.training_bar is not None:
            with logging_redirect_tqdm():  # root's console handlers write through tqdm, so the bar stays intact
                logger.info(line)
        else:
            logger.info(line)


def install_console_line(trainer) -> ConsoleLineCallback:
    """Replace transformers' `PrinterCallback` / `ProgressCallback` on `trainer` by a `ConsoleLineCallback`."""
    # by class: removes the instance transformers added (trainer.py:599; its notebook bar where that is the default,
    # trainer.py:187-192)
    for callback in {PrinterCallback, ProgressCallback, DEFAULT_PROGRESS_CALLBACK}:
        trainer.remove_callback(callback)
    callback = ConsoleLineCallback()
    trainer.add_callback(callback)
    return callback
