"""The run record: `run.json` in a run's output directory, written by every command that produces results.

    with track_run(output_dir, command="frs", argv=argv, configs=[args], report_to=["wandb"]) as run:
        result = run_frs(args)
        run.metrics = numeric_metrics(result["report"], prefix="frs/")

`run.json` (schema version 1) holds the fully resolved settings (`config`: one entry per parsed dataclass), the git
commit of the procrl checkout and whether its tree was dirty, package versions, the machine, the sweep variant the
run belongs to (`PROCRL_VARIANT`), the status ("running" while it runs, then "finished" or "failed" with the error),
the wall time, and the command's headline `metrics` (flat numbers) and `history` (one entry per logging step). A
sweep skips a variant whose `run.json` says "finished" with its settings fingerprint; `procrl report` reads the
rest. Every write is atomic (`write_json_atomic`: a temporary file in the same directory, then `os.replace`), so a
reader never sees half a record. Only the main
process of a distributed run writes (`RANK` / `LOCAL_RANK`); on the other ranks the record is inert. Secret flag
values in `argv` (`--hub_token hf_...`) are masked (`procrl.experiment.provenance.mask_argv`). In the main thread a SIGTERM
(a scheduler's or `kill`'s stop) raises `Terminated` while the run is tracked, so the record says "failed" with an
error naming SIGTERM instead of staying "running"; the previous handler is restored at exit.

With `report_to` naming wandb, the record also goes to wandb: the run is started at entry (`project` from
`WANDB_PROJECT`, default "procrl"; offline without credentials, `procrl.utils.default_wandb_offline`) with the
record's static part as its config under "procrl", so a trainer's `WandbCallback` adopts it instead of starting its
own (transformers/integrations/integration_utils.py:761-767: `if self._wandb.run is None: init(...)`, then
`config.update`); at exit the headline metrics go to its summary and the run is finished. A wandb failure is a logged
warning, never a failed run.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from procrl.experiment import provenance
from procrl.experiment.provenance import (
    VARIANT_ENV,
    config_record,
    git_info,
    machine_info,
    mask_argv,
    package_versions,
    read_variant,
)
from procrl.utils import default_wandb_offline, get_logger, json_safe

logger = get_logger(__name__)

__all__ = [
    "REPORT_TO_HELP",
    "RUN_FILE",
    "SCHEMA_VERSION",
    "VARIANT_ENV",
    "Terminated",
    "TrackedRun",
    "TrackingArguments",
    "config_record",
    "git_info",
    "history_from_log",
    "is_main_process",
    "is_number",
    "machine_info",
    "numeric_metrics",
    "package_versions",
    "read_variant",
    "track_run",
    "write_json_atomic",
]

SCHEMA_VERSION = 1
RUN_FILE = "run.json"
REPORT_TO_CHOICES = ("none", "wandb", "all")
REPORT_TO_HELP = (
    "Also report the run record to these integrations: 'wandb' (offline without wandb credentials; project from "
    "WANDB_PROJECT, default procrl) or 'none'. run.json is always written."
)


@dataclass
class TrackingArguments:
    """Where a command that is not a trainer reports besides `run.json` (trainers use TrainingArguments'
    `report_to`)."""

    report_to: list[str] = field(
        default_factory=lambda: ["none"],
        metadata={"help": REPORT_TO_HELP},
    )

    def __post_init__(self) -> None:
        if isinstance(self.report_to, str):
            self.report_to = [self.report_to]
        unknown = [name for name in self.report_to if name not in REPORT_TO_CHOICES]
        if unknown:
            raise ValueError(
                f"--report-to {' '.join(self.report_to)}: {unknown} unknown; use --report-to wandb or --report-to none."
            )


class Terminated(SystemExit):
    """Raised by `track_run`'s SIGTERM handler: a `SystemExit` (so `except Exception` does not swallow it and Python
    exits without a traceback) with status 143 = 128 + SIGTERM, the shell's status of a process SIGTERM killed."""

    def __init__(self) -> None:
        super().__init__(128 + signal.SIGTERM)

    def __str__(self) -> str:
        return "SIGTERM received (the process was asked to stop)"


def is_main_process() -> bool:
    """Whether this process writes the record: `RANK` (torchrun, accelerate) or else `LOCAL_RANK` is 0 or unset."""
    rank = os.environ.get("RANK", os.environ.get("LOCAL_RANK", "0"))
    try:
        return int(rank) == 0
    except ValueError:
        logger.warning("RANK=%r is not an integer: this process is taken as the main process", rank)
        return True


def track_run(
    output_dir: str | Path,
    *,
    command: str,
    argv: Sequence[str] | None,
    configs: Iterable[Any] = (),
    report_to: str | Sequence[str] | None = None,
    name: str | None = None,
) -> TrackedRun:
    """A context manager that writes `<output_dir>/run.json` at entry ("running") and at exit ("finished", or
    "failed" with `error` = "Type: message"; the exception is re-raised; KeyboardInterrupt is failed with
    "KeyboardInterrupt: interrupted"; `SystemExit(0)` / `SystemExit(None)` count as finished). In the main thread,
    SIGTERM inside the block raises `Terminated` (failed, "Terminated: SIGTERM received ...", exit status 143); the
    SIGTERM handler before entry is restored at exit. Off the main thread signals cannot be handled and none is set.

    Args:
        output_dir: the run's output directory (created).
        command: the command's name, e.g. "train-grpo".
        argv: the arguments the entry point was given (None: `sys.argv[1:]`); secret flag values are masked.
        configs: the parsed dataclasses (TrainingArguments subclasses through their `to_dict()`).
        report_to: integrations, as in transformers ("wandb", "all", "none" or a list); wandb gets the record too.
        name: the wandb run name when no sweep variant names it.
    """
    return TrackedRun(
        Path(output_dir), command=command, argv=argv, configs=list(configs), report_to=report_to, name=name
    )


class TrackedRun:
    """One run's record (`track_run`). Before the `with` block ends, set `metrics` (flat {key: number}: the headline
    numbers `procrl report` and sweeps compare), `history` ([{"step": int, key: number}]), `result` (the command's
    whole JSON-able result: run.json is the one results file of a run) and `files` ({role: path} of the large
    outputs the command wrote beside it: per-sample rows, tables, figures, checkpoints; `write_rows` writes a file of
    rows and names it); `save()` writes an intermediate record."""

    def __init__(self, output_dir: Path, *, command, argv, configs, report_to, name) -> None:
        self.path = output_dir / RUN_FILE
        self.enabled = is_main_process()
        self.metrics: dict[str, float] = {}
        self.history: list[dict[str, float]] = []
        self.result: Any = None
        self.files: dict[str, str] = {}
        self._report_to = [report_to] if isinstance(report_to, str) else list(report_to or [])
        self._name = name
        self._start = 0.0
        self._wandb_run = None
        self._owns_wandb = False
        self._previous_sigterm: Any = None
        self._sigterm_installed = False
        self.record: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION,
            "command": command,
            "argv": mask_argv(sys.argv[1:] if argv is None else argv),
            "status": "running",
            "error": None,
            "started_at": None,
            "finished_at": None,
            "wall_time_s": None,
            "config": config_record(configs),
            "git": None,
            "packages": None,
            "machine": None,
            "variant": None,
            "metrics": {},
            "history": [],
            "result": None,
            "files": {},
        }

    def __enter__(self) -> TrackedRun:
        if not self.enabled:
            return self
        self._start = time.monotonic()
        self.record.update(
            started_at=_utc_now(),
            git=git_info(provenance.SOURCE_DIR),
            packages=package_versions(),
            machine=machine_info(),
            variant=read_variant(),
        )
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._install_sigterm()  # before the first write: a reader that sees "running" may send SIGTERM
        try:
            self.save()
        except BaseException:
            self._restore_sigterm()
            raise
        if "wandb" in self._report_to or "all" in self._report_to:
            self._start_wandb()
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if not self.enabled:
            return False
        self._restore_sigterm()
        failed = exc_type is not None and not (exc_type is SystemExit and exc.code in (0, None))
        error = None
        if failed:
            message = "interrupted" if exc_type is KeyboardInterrupt and not str(exc) else str(exc)
            error = f"{exc_type.__name__}: {message}"
        self.record.update(
            status="failed" if failed else "finished",
            error=error,
            finished_at=_utc_now(),
            wall_time_s=time.monotonic() - self._start,
        )
        try:
            self.save()
        finally:
            self._finish_wandb(failed)
        return False  # an exception propagates

    def write_rows(self, role: str, rows: Iterable[Any]) -> Path:
        """Write `rows` (json-safe values, e.g. one dict per problem) as JSON lines to `<output_dir>/<role>.jsonl`
        (atomically: a reader never sees half a file) and name that file in `files[role]`; returns its path. Off the
        main process nothing is written (as for the record)."""
        path = self.path.parent / f"{role}.jsonl"
        self.files[role] = str(path)
        if self.enabled:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            with tmp.open("w", encoding="utf-8") as handle:
                for row in rows:
                    handle.write(json.dumps(json_safe(row), allow_nan=False) + "\n")
            os.replace(tmp, path)
        return path

    def save(self) -> None:
        """Write the record now (atomically; a no-op off the main process). Non-number metric values are left out
        with a warning naming them; NaN and inf become null."""
        if not self.enabled:
            return
        self.record["metrics"] = _numbers_only(self.metrics, "metrics")
        self.record["history"] = [_numbers_only(entry, "history") for entry in self.history]
        self.record["result"] = json_safe(self.result)
        self.record["files"] = {role: str(path) for role, path in self.files.items()}
        write_json_atomic(self.path, self.record)

    # -- SIGTERM ----------------------------------------------------------------------------------------------------

    def _install_sigterm(self) -> None:
        # signal.signal works only in the main thread of the main interpreter (ValueError elsewhere: Python docs,
        # signal module "Signals and threads"); Python runs the handler in the main thread between bytecodes
        if threading.current_thread() is not threading.main_thread():
            return
        self._previous_sigterm = signal.signal(signal.SIGTERM, _raise_terminated)
        self._sigterm_installed = True

    def _restore_sigterm(self) -> None:
        if not self._sigterm_installed:
            return
        # getsignal/signal return None for a handler not installed from Python: the default action then
        previous = signal.SIG_DFL if self._previous_sigterm is None else self._previous_sigterm
        signal.signal(signal.SIGTERM, previous)
        self._sigterm_installed = False

    # -- wandb ------------------------------------------------------------------------------------------------------

    def _wandb_config(self) -> dict:
        keys = ("command", "argv", "config", "git", "packages", "machine", "variant")
        return json_safe({key: self.record[key] for key in keys})

    def _start_wandb(self) -> None:
        try:
            default_wandb_offline(["wandb"])
            import wandb  # optional heavy dependency: only when report_to names wandb

            static = {"procrl": self._wandb_config()}
            if wandb.run is not None:  # the caller's own run: add the record, leave it to the caller to finish
                wandb.run.config.update(static, allow_val_change=True)
                self._wandb_run = wandb.run
                return
            variant = self.record["variant"] or {}
            self._wandb_run = wandb.init(
                project=os.environ.get("WANDB_PROJECT", "procrl"),
                job_type=self.record["command"],
                name=variant.get("name") or self._name,
                dir=str(self.path.parent),
                config=static,
            )
            self._owns_wandb = True
        except Exception as error:  # wandb is a report, never the run: any failure only costs the wandb copy
            logger.warning("wandb: %s: %s (the run goes on; run.json has the record)", type(error).__name__, error)
            self._wandb_run = None

    def _finish_wandb(self, failed: bool) -> None:
        run = self._wandb_run
        if run is None:
            return
        try:
            import wandb  # optional heavy dependency: only when report_to names wandb

            if wandb.run is not run:
                logger.info("the wandb run was finished by the command: its summary lacks the record's metrics")
                return
            run.summary.update(self.record["metrics"])
            end = {key: self.record[key] for key in ("status", "error", "wall_time_s")}
            run.config.update({"procrl": {**self._wandb_config(), **end}}, allow_val_change=True)
            if self._owns_wandb:
                run.finish(exit_code=1 if failed else 0)
        except Exception as error:  # see _start_wandb
            logger.warning("wandb: %s: %s (run.json has the record)", type(error).__name__, error)


# -- metrics ---------------------------------------------------------------------------------------------------------


def is_number(value: Any) -> bool:
    """Whether `value` is a finite int or float and not a bool: the one test of what counts as a metric value in a
    run record (this module writes them, procrl.experiment.run_records and procrl.evals.run_report read them).

    >>> [is_number(v) for v in (3, 0.5, True, float("nan"), float("inf"), "1", None)]
    [True, True, False, False, False, False, False]
    """
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def numeric_metrics(values: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """Flat {prefix + key: number} from a nested mapping: nested keys joined with "/", ints and finite floats kept
    (bools as 0/1), everything else (strings, None, NaN, lists) left out.

    >>> numeric_metrics({"score": 51.5, "at_k": {10: 40.0, 20: None}, "unscored": {"refusal": 2}, "x": "a"}, "frs/")
    {'frs/score': 51.5, 'frs/at_k/10': 40.0, 'frs/unscored/refusal': 2}
    """
    out: dict[str, float] = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(numeric_metrics(value, prefix=f"{name}/"))
        elif isinstance(value, bool):
            out[name] = int(value)
        elif is_number(value):
            out[name] = value
    return out


def history_from_log(log_history: Iterable[Mapping[str, Any]]) -> list[dict[str, float]]:
    """The `history` of a trainer's `state.log_history`: the entries with an integer `step`, numbers only (strings,
    NaN and inf left out), in order."""
    history = []
    for entry in log_history:
        step = entry.get("step")
        if isinstance(step, bool) or not isinstance(step, int):
            continue
        numbers = {k: v for k, v in entry.items() if k != "step" and is_number(v)}
        history.append({"step": step, **numbers})
    return history


def _numbers_only(values: Mapping[str, Any], where: str) -> dict[str, Any]:
    bad = sorted(str(k) for k, v in values.items() if not (isinstance(v, int | float) or v is None))
    if bad:
        logger.warning("run.json %s: non-number values of %s left out", where, bad)
    kept = {
        k: int(v) if isinstance(v, bool) else v for k, v in values.items() if isinstance(v, int | float) or v is None
    }
    return json_safe(kept)


def _raise_terminated(signum: int, frame: Any) -> None:
    raise Terminated()


# -- small helpers -------------------------------------------------------------------------------------------------


def write_json_atomic(path: Path, data: Any) -> None:
    """Write `data` as JSON to `path` atomically: a temporary file in the same directory, fsync, `os.replace`."""
    handle = tempfile.NamedTemporaryFile(
        "w", encoding="utf-8", dir=path.parent, prefix=f".{path.name}.", suffix=".tmp", delete=False
    )
    try:
        with handle:
            json.dump(data, handle, indent=2, allow_nan=False)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(handle.name, path)
    except BaseException:
        Path(handle.name).unlink(missing_ok=True)
        raise


def _utc_now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
