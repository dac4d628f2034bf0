"""What `ProcessGRPOTrainer` logs beyond TRL at every logging step: the reward-hacking monitors and their math, the
per-step scores in the completions table, `completions.jsonl`, and one readable console line per logging step.

Metrics (TRL's `_log_metric` per generation batch, averaged per logging step; never NaN, a key is left out when its
value is undefined):
- `hacking/repetition_rate`: mean fraction of repeated 4-grams of the sampled completion ids (trailing EOS dropped;
  completions with fewer than 4 tokens excluded).
- `hacking/length_corr/<reward name>`: for each reward function except the outcome check, corr(reward, length in
  tokens) within each prompt's group, averaged over the groups where it is defined.
- `hacking/reward_accuracy_corr` (train logs only): the rolling correlation of TRL's `reward` (weighted reward mean)
  with `task/accuracy` over the last `hacking_window` logging steps; a WARNING is logged when it turns negative
  while the reward rises (`RewardAccuracyMonitor`).
- `hacking/reward_accuracy_alarm` (train logs only): 1.0 at a logging step where that condition holds, else 0.0, so
  the run record shows whether and when the warning fired (it fires at each step where the value turns 0 -> 1).

Completions table: TRL keeps the latest generation batch in `trainer._logs` (prompt, completion, one column per
reward, advantage, and the `extra` columns that reward functions add through TRL's `log_extra`; grpo_trainer.py
:2833-2845) and logs it to wandb/parquet when `log_completions` is on (:3323-3381). Per-step scores join it as
`extra` columns, one value per completion (None = not applicable):
- `process/step_rewards` (list of float, None = unscored step) and `process/step_ends` (token end of each step):
  the step scorer's output in `advantage_mode: process | mixed`, logged by the trainer;
- any column a reward function logs itself, e.g. StepGap's per-step labels (a list of label strings).
Per-step values are lists of float with None for NaN, the form wandb's Table accepts (a NaN inside a list makes
`wandb.Table` raise: wandb/sdk/data_types/table.py:645) and parquet stores as list<double>.
`CompletionsLog` appends the same rows, bounded per step, to `<output_dir>/completions.jsonl` on the main process.
At train begin (`TrainingMonitor.attach` registers the hook) a fresh run moves a previous attempt's file aside to
`completions.jsonl.prev`, and a run resumed from a checkpoint keeps only the rows up to the checkpoint's step, so
a rerun into the same output_dir never interleaves two attempts' rows.

A monitor that fails on a batch (`log_batch_monitors`) is a logged warning, never a crash mid-training.

The monitors' math:
- `repetition_rate(tokens)`: the fraction of repeated n-grams (n = 4) in one completion,
  `1 - #distinct n-grams / #n-grams`; None for a completion with fewer than n tokens (it has no n-gram, so it is
  excluded from the batch mean rather than counted as "no repetition"). `hacking/repetition_rate` is the mean
  over the completions that have an n-gram (not logged when none has).
- `within_group_corr(values, lengths, group_size)`: the Pearson correlation of a reward with completion length
  inside each prompt's group of G completions, averaged over the groups where it is defined (at least 2
  completions with a reward, neither the reward nor the length constant); None when no group qualifies
  (`hacking/length_corr/<reward name>` is then not logged for that batch).
- `RewardAccuracyMonitor`: the rolling Pearson correlation between the weighted reward mean and task accuracy over
  the last N logging steps (`hacking/reward_accuracy_corr`), and a warning when it is negative while the reward
  rises (the least-squares slope of the reward over the window is > 0): the process-only collapse that the PUM
  paper reports for PRM rewards (the reward climbs, accuracy falls). The warning fires once per crossing.

The math takes plain Python sequences of floats (NaN = missing) and never returns NaN: an undefined value is None.
Sums use `math.fsum`.

The console line (`ProcessGRPOConfig.console_line`): transformers registers `PrinterCallback` (with `disable_tqdm`)
or its `ProgressCallback` (transformers/trainer.py:599), and both write the whole metrics dict with floats turned into
strings (trainer_callback.py:673-690 and :703-708). `install_console_line(trainer)` swaps that callback for
`ConsoleLineCallback`, which keeps the progress bar (when tqdm is on) and logs, through procrl's logger
`procrl.trainers.monitoring.console` (its own, so the line can be silenced or routed apart from the monitors'
messages), a line like

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

import json
import logging
import math
import os
import time
from collections import deque
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm
from transformers.trainer import DEFAULT_PROGRESS_CALLBACK
from transformers.trainer_callback import PrinterCallback, ProgressCallback, TrainerCallback

from procrl.step_rewards import StepRewards
from procrl.utils import completion_to_text, get_logger, json_safe, prompt_to_text

logger = get_logger(__name__)
console_logger = get_logger(f"{__name__}.console")  # the console line's records (module docstring)

__all__ = [
    "COMPLETIONS_FILE",
    "CompletionsLog",
    "ConsoleLineCallback",
    "MonitorArguments",
    "RewardAccuracyMonitor",
    "TrainingMonitor",
    "correlation",
    "format_console_line",
    "format_number",
    "install_console_line",
    "log_batch_monitors",
    "mean_repetition_rate",
    "repetition_rate",
    "shows_info",
    "slope",
    "step_reward_columns",
    "within_group_corr",
]

COMPLETIONS_FILE = "completions.jsonl"
_FIXED_KEYS = ("step", "mode", "index", "prompt", "completion", "rewards", "advantage")
NGRAM = 4
MIN_WINDOW = 3  # the fewest points a correlation and a trend are computed from


def repetition_rate(tokens: Sequence[Hashable], n: int = NGRAM) -> float | None:
    """`1 - #distinct n-grams / #n-grams` of one token sequence, in [0, 1); None when it has fewer than n tokens.

    `tokens` are token ids (or any hashable units: words, characters). 0.0 = no n-gram occurs twice.

    >>> repetition_rate([1, 2, 3, 4, 1, 2, 3, 4])  # 5 four-grams, 4 distinct
    0.2
    >>> repetition_rate([7, 7, 7]) is None
    True
    """
    if n < 1:
        raise ValueError(f"repetition_rate needs n >= 1, got {n}")
    tokens = list(tokens)
    count = len(tokens) - n + 1
    if count <= 0:
        return None
    distinct = len({tuple(tokens[i : i + n]) for i in range(count)})
    return (count - distinct) / count  # = 1 - distinct / count, without its rounding


def mean_repetition_rate(rates: Sequence[float | None]) -> float | None:
    """Mean of the per-completion rates that are defined (None and NaN = excluded); None when none is."""
    valid = [r for r in rates if r is not None and not math.isnan(r)]
    return math.fsum(valid) / len(valid) if valid else None


def correlation(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Pearson correlation of two equally long sequences, in [-1, 1]; None when undefined (fewer than 2 points, or
    either sequence constant). Pairs with a NaN in either element are dropped first.

    Raises:
        ValueError: the sequences differ in length.

    >>> correlation([1, 2, 3, 4], [2, 1, 4, 3])
    0.6
    >>> correlation([1, 1, 1], [1, 2, 3]) is None
    True
    """
    if len(xs) != len(ys):
        raise ValueError(f"correlation needs sequences of equal length, got {len(xs)} and {len(ys)}")
    pairs = [(float(x), float(y)) for x, y in zip(xs, ys, strict=True) if not (math.isnan(x) or math.isnan(y))]
    if len(pairs) < 2:
        return None
    x, y = zip(*pairs, strict=True)
    if min(x) == max(x) or min(y) == max(y):  # exact test: rounding residue must not pass for variance
        return None
    mx, my = math.fsum(x) / len(x), math.fsum(y) / len(y)
    sxy = math.fsum((a - mx) * (b - my) for a, b in pairs)
    sxx, syy = math.fsum((a - mx) ** 2 for a in x), math.fsum((b - my) ** 2 for b in y)
    return max(-1.0, min(1.0, sxy / math.sqrt(sxx * syy)))


def slope(ys: Sequence[float]) -> float | None:
    """Least-squares slope of `ys` against 0, 1, 2, ... (units of y per point); None for fewer than 2 points.

    >>> slope([1.0, 3.0, 5.0])
    2.0
    """
    if len(ys) < 2:
        return None
    n = len(ys)
    mx, my = (n - 1) / 2, math.fsum(ys) / n
    return math.fsum((i - mx) * (y - my) for i, y in enumerate(ys)) / math.fsum((i - mx) ** 2 for i in range(n))


def within_group_corr(values: Sequence[float], lengths: Sequence[float], group_size: int) -> float | None:
    """Mean over prompt groups of corr(reward, length) inside each group; None when no group has a defined one.

    Args:
        values: one reward per completion `(N,)`, NaN = the reward did not apply; groups are consecutive blocks of
            `group_size` (TRL's layout: `rewards_per_func.view(-1, num_generations)`).
        lengths: completion lengths in tokens `(N,)`.
        group_size: G, completions per prompt (>= 1; a group of 1 never has a correlation).

    Raises:
        ValueError: unequal lengths, or N not a multiple of `group_size`.
    """
    if group_size < 1 or len(values) % group_size or len(values) != len(lengths):
        raise ValueError(
            f"within_group_corr needs equally long values and lengths made of whole groups; got {len(values)} values, "
            f"{len(lengths)} lengths, group_size {group_size}"
        )
    corrs = []
    for start in range(0, len(values), group_size):
        corr = correlation(values[start : start + group_size], lengths[start : start + group_size])
        if corr is not None:
            corrs.append(corr)
    return math.fsum(corrs) / len(corrs) if corrs else None


class RewardAccuracyMonitor:
    """Rolling reward-accuracy correlation over the last `window` logging steps, with the collapse warning.

    `update(reward, accuracy)` adds one logging step (skipped when either is None or NaN) and returns the Pearson
    correlation over the points in the window (the last `window`, or all of them before the window fills), None
    while there are fewer than 3 or either series is constant. `collapsing` is then True when that correlation is
    < 0 and the reward's least-squares slope over the same points is > 0; `update` returns `(corr, warn)`, where
    `warn` is True only on the update at which `collapsing` turns True (once per crossing: it must turn False,
    including an undefined correlation, before it can warn again).

    Raises:
        ValueError: `window` < 3.
    """

    def __init__(self, window: int = 10):
        if window < MIN_WINDOW:
            raise ValueError(f"hacking_window must be >= {MIN_WINDOW} (logging steps), got {window}")
        self.window = window
        self.rewards: deque[float] = deque(maxlen=window)
        self.accuracies: deque[float] = deque(maxlen=window)
        self.collapsing = False

    def update(self, reward: float | None, accuracy: float | None) -> tuple[float | None, bool]:
        if reward is None or accuracy is None or math.isnan(reward) or math.isnan(accuracy):
            return None, False
        self.rewards.append(float(reward))
        self.accuracies.append(float(accuracy))
        corr = correlation(self.rewards, self.accuracies) if len(self.rewards) >= MIN_WINDOW else None
        trend = slope(self.rewards)
        collapsing = corr is not None and corr < 0 and trend is not None and trend > 0
        warn = collapsing and not self.collapsing
        self.collapsing = collapsing
        return corr, warn

    def describe(self) -> str:
        """The window's numbers for the warning text."""
        return (
            f"reward {self.rewards[0]:.3g} -> {self.rewards[-1]:.3g} (slope {slope(self.rewards):+.3g}/step), "
            f"accuracy {self.accuracies[0]:.3g} -> {self.accuracies[-1]:.3g} over the last {len(self.rewards)} "
            "logging steps"
        )


@dataclass
class MonitorArguments:
    """The fields of `ProcessGRPOConfig` for the hacking monitors, `completions.jsonl` and the console line (a mixin:
    `check_monitor_arguments` is called from `ProcessGRPOConfig.__post_init__`)."""

    hacking_window: int = field(
        default=10,
        metadata={
            "help": "Logging steps in the rolling reward-accuracy correlation (hacking/reward_accuracy_corr; a "
            "warning is logged when it turns negative while the reward rises). >= 3."
        },
    )
    completions_jsonl: bool = field(
        default=True,
        metadata={
            "help": "Append the latest generation batch's completions to <output_dir>/completions.jsonl at every "
            "logging step (step, prompt, completion, each reward, advantage, per-step scores or labels when the run "
            "has them). A fresh run moves an earlier file to completions.jsonl.prev; a run resumed from a "
            "checkpoint keeps the rows up to the checkpoint's step. Independent of TRL's log_completions (rich "
            "print, wandb table, parquet)."
        },
    )
    completions_jsonl_per_step: int | None = field(
        default=16,
        metadata={
            "help": "At most this many completions per logging step in completions.jsonl (the first rows of the "
            "batch, i.e. whole prompt groups first); null = the whole generation batch. >= 1."
        },
    )
    console_line: bool = field(
        default=True,
        metadata={
            "help": "Log one readable line per logging step (step, loss, reward ± std, accuracy, length, rewards, "
            "hacking monitors, s/step) instead of transformers' printed metrics dict; the full metrics still go to "
            "log_history and the report_to backends. false = transformers' default output."
        },
    )

    def check_monitor_arguments(self) -> None:
        """Raises ValueError, with the fix, for `hacking_window` < 3 or `completions_jsonl_per_step` < 1."""
        if isinstance(self.hacking_window, bool) or self.hacking_window < 3:
            raise ValueError(
                f"hacking_window={self.hacking_window} must be >= 3 logging steps (e.g. hacking_window: 10)."
            )
        if self.completions_jsonl_per_step is not None and self.completions_jsonl_per_step < 1:
            raise ValueError(
                f"completions_jsonl_per_step={self.completions_jsonl_per_step} must be >= 1, or null for the whole "
                "batch; to write no completions.jsonl set completions_jsonl: false."
            )


def log_batch_monitors(log_metric, repetition, lengths, rewards, group_size: int) -> None:
    """Log `hacking/repetition_rate` and `hacking/length_corr/<name>` for one generation batch (all ranks).

    Args:
        log_metric: TRL's `trainer._log_metric(name, value)`.
        repetition: per-completion repetition rates `(N,)`, NaN = excluded.
        lengths: completion lengths in tokens `(N,)`.
        rewards: `{reward name: (N,) values, NaN = not applicable}` for the non-outcome rewards.
        group_size: completions per prompt (the groups are consecutive blocks).

    Each metric is computed on its own: one that raises (e.g. `within_group_corr` on a batch that is not made of
    whole groups) is left out of this batch with a logged warning, and the others are still logged.
    """
    monitors = {"hacking/repetition_rate": lambda: mean_repetition_rate(repetition)}
    for name, values in rewards.items():
        monitors[f"hacking/length_corr/{name}"] = lambda values=values: within_group_corr(values, lengths, group_size)
    for key, compute in monitors.items():
        try:
            value = compute()
        except Exception as error:  # telemetry must never stop training
            logger.warning("%s left out of this batch: the monitor failed (%s: %s)", key, type(error).__name__, error)
            continue
        if value is not None:
            log_metric(key, value)


def step_reward_columns(step_rewards: list[StepRewards | None]) -> dict[str, list]:
    """The completions-table columns of a step scorer's output: `process/step_rewards` (NaN -> None) and
    `process/step_ends`, None for a completion the scorer does not apply to."""
    return {
        "process/step_rewards": [None if s is None else [_finite(v) for v in s.values] for s in step_rewards],
        "process/step_ends": [None if s is None else [int(b) for b in s.boundaries] for s in step_rewards],
    }


class CompletionsLog:
    """Appends completion rows to a JSONL file, one JSON object per line:
    `{"step", "mode" ("train"|"eval"), "index" (row in the batch), "prompt" (text), "completion" (text),
    "rewards": {name: float | None}, "advantage": float | None, <extra column>: value, ...}`; an extra column
    named like a fixed key is written as `extra/<name>`. Non-finite floats become null (strict JSON).

    Args:
        path: the file (created with its directory on first write).
        per_step: at most this many rows per `write` (the first ones); None = all.
    """

    def __init__(self, path: str | Path, per_step: int | None = 16):
        self.path = Path(path)
        self.per_step = per_step

    def start(self, resume_step: int = 0) -> None:
        """Make the file hold only this run's rows, at train begin.

        `resume_step` 0 (a fresh run): an existing file, a previous attempt's, is moved to `<path>.prev` (replacing
        an older one), so its rows are kept but never mixed with this run's. `resume_step` > 0 (resumed from a
        checkpoint saved at that optimizer step): rows with `step` <= `resume_step` are kept and the later ones,
        which the resumed run writes again, are dropped, as are lines that are not a JSON object with an integer
        `step` (e.g. a line cut off by a crash); how many is logged. Rewritten through a temp file and
        `os.replace`, so the file is never half-written.
        """
        if not self.path.is_file():
            return
        if resume_step <= 0:
            previous = self.path.with_name(self.path.name + ".prev")
            os.replace(self.path, previous)
            logger.info("%s: a previous attempt's rows moved to %s (this run starts a new file)", self.path, previous)
            return
        kept = dropped = 0
        temp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        with open(self.path, encoding="utf-8") as source, open(temp, "w", encoding="utf-8") as target:
            for line in source:
                step = _row_step(line)
                if step is not None and step <= resume_step:
                    target.write(line if line.endswith("\n") else line + "\n")
                    kept += 1
                elif line.strip():
                    dropped += 1
        os.replace(temp, self.path)
        if dropped:
            logger.info(
                "%s: resuming from step %d, kept %d rows, dropped %d (later steps, written again now, or unreadable)",
                self.path,
                resume_step,
                kept,
                dropped,
            )

    def write(self, step: int, mode: str, logs: dict[str, Any]) -> int:
        """Write the rows of TRL's `trainer._logs` (`prompt`, `completion`, `rewards`, `advantages`, `extra`);
        returns how many. Columns whose length differs from the prompts' are left out with a warning (a reward
        function that logged one column twice would otherwise shift every row)."""
        prompts, completions = list(logs["prompt"]), list(logs["completion"])
        n = len(prompts) if self.per_step is None else min(len(prompts), self.per_step)
        columns = {"rewards": dict(logs["rewards"]), "extra": dict(logs["extra"])}
        if len(logs["advantages"]) == len(prompts):
            columns["advantage"] = {"advantage": logs["advantages"]}
        for group in columns.values():
            for name in [k for k, v in group.items() if len(v) != len(prompts)]:
                logger.warning(
                    "completions.jsonl: column %r has %d values for %d completions; left out of step %d",
                    name,
                    len(group.pop(name)),
                    len(prompts),
                    step,
                )
        rewards = {k: list(v) for k, v in columns["rewards"].items()}
        extra = {(f"extra/{k}" if k in _FIXED_KEYS else k): list(v) for k, v in columns["extra"].items()}
        advantages = list(columns["advantage"]["advantage"]) if "advantage" in columns else None
        lines = []
        for i in range(n):
            row = {
                "step": step,
                "mode": mode,
                "index": i,
                "prompt": prompt_to_text(prompts[i]),
                "completion": completion_to_text(completions[i]),
                "rewards": {k: v[i] for k, v in rewards.items()},
            }
            if advantages is not None:
                row["advantage"] = advantages[i]
            row.update({k: v[i] for k, v in extra.items()})
            lines.append(json.dumps(json_safe(row), ensure_ascii=False, allow_nan=False, default=str))
        if lines:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as f:
                f.write("".join(line + "\n" for line in lines))
        return len(lines)


class TrainingMonitor:
    """The per-run state behind the monitors: the rolling reward-accuracy window, the completions log, and how many
    generation batches were scored (so a logging step without a new batch writes no duplicate rows).

    Built from the trainer's args with `MonitorArguments`' defaults for fields a plain `GRPOConfig` lacks;
    `attach(trainer)` also registers the train-begin hook (`CompletionsLog.start`)."""

    def __init__(self, args, is_main_process: bool = True):
        self.reward_accuracy = RewardAccuracyMonitor(getattr(args, "hacking_window", 10))
        self.completions = (
            CompletionsLog(Path(args.output_dir) / COMPLETIONS_FILE, getattr(args, "completions_jsonl_per_step", 16))
            if getattr(args, "completions_jsonl", True) and is_main_process
            else None
        )
        self.is_main_process = is_main_process
        self.batches = 0  # generation batches scored (incremented by the trainer's _calculate_rewards)
        self._written = 0

    @classmethod
    def attach(cls, trainer) -> TrainingMonitor:
        """The monitor of `trainer` (a transformers `Trainer`), with a callback that calls `on_train_begin`."""
        monitor = cls(trainer.args, trainer.accelerator.is_main_process)
        trainer.add_callback(_TrainBegin(monitor))
        return monitor

    def on_train_begin(self, global_step: int) -> None:
        """At train begin: `global_step` is the resumed checkpoint's step, 0 for a fresh run (transformers loads
        the checkpoint's `TrainerState` before `on_train_begin`, trainer.py:1612 / :1697 / :1653)."""
        if self.completions is None:
            return
        try:
            self.completions.start(global_step)
        except OSError:  # telemetry must never stop training
            logger.exception("could not prepare %s; training continues", self.completions.path)

    def on_log(self, metrics: dict[str, list], logs: dict[str, Any], step: int, mode: str) -> None:
        """Before TRL averages `metrics` (`trainer._metrics[mode]`, lists of per-batch values) into a log: add
        `hacking/reward_accuracy_corr` and `hacking/reward_accuracy_alarm` (train only) and warn on a collapse;
        write the new completions (`logs` is `trainer._logs`)."""
        if mode == "train" and "reward" in metrics:
            corr, warn = self.reward_accuracy.update(_mean(metrics.get("reward")), _mean(metrics.get("task/accuracy")))
            if corr is not None:
                metrics["hacking/reward_accuracy_corr"].append(corr)
            metrics["hacking/reward_accuracy_alarm"].append(float(self.reward_accuracy.collapsing))
            if warn and self.is_main_process:
                logger.warning(
                    "step %d: reward rises while task accuracy does not follow (hacking/reward_accuracy_corr %.2f; "
                    "%s). The reward may be hacked (the PUM paper's process-only collapse): check the completions and "
                    "the non-outcome rewards.",
                    step,
                    corr,
                    self.reward_accuracy.describe(),
                )
        if self.completions is not None and self.batches != self._written:
            self._written = self.batches
            try:
                self.completions.write(step, mode, logs)
            except OSError:  # telemetry must never stop training
                logger.exception("could not write %s; training continues", self.completions.path)


class _TrainBegin(TrainerCallback):
    """Calls `TrainingMonitor.on_train_begin` with the run's starting step."""

    def __init__(self, monitor: TrainingMonitor):
        self.monitor = monitor

    def on_train_begin(self, args, state, control, **kwargs):
        self.monitor.on_train_begin(state.global_step)


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
        if not shows_info(console_logger):  # nobody configured logging (a library user): print like PrinterCallback did
            tqdm.write(line)  # above the bar, if there is one (tqdm/std.py:718-726)
        elif self.training_bar is not None:
            with logging_redirect_tqdm():  # root's console handlers write through tqdm, so the bar stays intact
                console_logger.info(line)
        else:
            console_logger.info(line)


def install_console_line(trainer) -> ConsoleLineCallback:
    """Replace transformers' `PrinterCallback` / `ProgressCallback` on `trainer` by a `ConsoleLineCallback`."""
    # by class: removes the instance transformers added (trainer.py:599; its notebook bar where that is the default,
    # trainer.py:187-192)
    for callback in {PrinterCallback, ProgressCallback, DEFAULT_PROGRESS_CALLBACK}:
        trainer.remove_callback(callback)
    callback = ConsoleLineCallback()
    trainer.add_callback(callback)
    return callback


def _row_step(line: str) -> int | None:
    """The integer `step` of one completions.jsonl line; None when it is not a JSON object with one."""
    try:
        row = json.loads(line)
    except ValueError:
        return None
    step = row.get("step") if isinstance(row, dict) else None
    return step if isinstance(step, int) and not isinstance(step, bool) else None


def _mean(values) -> float | None:
    """TRL's averaging of one metric (NaN filtered out, grpo_trainer.py:3305-3312); None when nothing is left."""
    valid = [v for v in values or [] if v is not None and not math.isnan(v)]
    return math.fsum(valid) / len(valid) if valid else None


def _finite(value) -> float | None:
    value = float(value)
    return value if math.isfinite(value) else None
