"""The offline runner of `procrl sweep` (procrl/scripts/sweep.py's docstring): the variants one after another, each
a child process in its own process group and folder, resumable by run.json's status and variant fingerprint."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from tqdm import tqdm

from procrl.experiment.sweeps import Sweep, Variant
from procrl.experiment.tracking import (  # the one atomic writer (temp file, fsync, os.replace)
    RUN_FILE,
    write_json_atomic,
)
from procrl.utils import get_logger

__all__ = ["EXIT_FAILED", "EXIT_INTERRUPTED", "PREVIOUS_RUN_FILE", "read_run_record", "run_offline", "run_state"]

logger = get_logger(__name__)

EXIT_FAILED, EXIT_INTERRUPTED = 1, 130
PREVIOUS_RUN_FILE = f"{RUN_FILE}.prev"


def read_run_record(path: Path) -> dict | None:
    """The run.json at `path`, or None when there is no readable JSON object."""
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def read_run_status(path: Path) -> str | None:
    """run.json's `status` ("running" | "finished" | "failed"), or None when there is no readable record."""
    record = read_run_record(path)
    return None if record is None else record.get("status")


def run_state(folder: Path, settings: str) -> str:
    """A variant folder's state: "finished" (run.json finished with fingerprint `settings`: skipped), "changed"
    (finished with another fingerprint or none), else run.json's status ("running", "failed") or "not run"."""
    record = read_run_record(folder / RUN_FILE)
    if record is None:
        return "not run"
    if record.get("status") != "finished":
        return str(record.get("status"))
    variant = record.get("variant")
    return "finished" if isinstance(variant, dict) and variant.get("fingerprint") == settings else "changed"


class _Stopped(Exception):
    """SIGINT or SIGTERM arrived while a variant ran."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def run_offline(
    sweep: Sweep, plan: list[tuple[Variant, Path, list[str], str]], sweep_dir: Path, stop_timeout: float
) -> int:
    """Run the (variant, folder, argv, fingerprint)s one after another (see the module docstring): a folder whose
    `run_state` is "finished" is skipped, any other runs (an earlier run.json moved to run.json.prev first); returns
    0, 1 (a variant failed) or 130."""
    sweep_dir.mkdir(parents=True, exist_ok=True)
    rows = [
        {"name": v.name, "dir": str(d), "parameters": v.parameters, "seed": v.seed, "argv": a, "state": "pending"}
        for v, d, a, _ in plan
    ]
    record = {"sweep": sweep.name, "method": sweep.method, "metric": sweep.metric, "variants": rows}
    previous = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    for signum in previous:
        signal.signal(signum, _raise_stopped)
    try:  # a signal between two variants (no child running) stops the sweep too
        with tqdm(total=len(plan), desc=sweep.name, unit="variant", file=sys.stderr) as bar:
            for (variant, folder, argv, settings), row in zip(plan, rows, strict=True):
                bar.set_postfix_str(variant.name)
                if run_state(folder, settings) == "finished":
                    row.update(state="finished", skipped=True)
                else:
                    row.update(state="running", started_at=_now(), skipped=False)
                    write_json_atomic(sweep_dir / "sweep.json", record)
                    _set_aside(folder)
                    row.update(_run_variant(sweep.name, variant, folder, argv, stop_timeout, settings))
                write_json_atomic(sweep_dir / "sweep.json", record)
                bar.update()
                if row["state"] == "interrupted":
                    break
    except _Stopped:
        pass
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        write_json_atomic(sweep_dir / "sweep.json", record)
    stopped = [row["name"] for row in rows if row["state"] in ("interrupted", "running")]
    if stopped or any(row["state"] == "pending" for row in rows):
        where = ", ".join(stopped) or "between variants"
        logger.warning("sweep interrupted (%s); run the same command again to resume", where)
        return EXIT_INTERRUPTED
    failed = [row["name"] for row in rows if row["state"] != "finished"]
    if failed:
        logger.warning("%d of %d variants failed: %s (see their log.txt)", len(failed), len(rows), ", ".join(failed))
    return EXIT_FAILED if failed else 0


def _set_aside(folder: Path) -> None:
    """Move an earlier attempt's run.json to run.json.prev (replacing an older one)."""
    with contextlib.suppress(FileNotFoundError):
        os.replace(folder / RUN_FILE, folder / PREVIOUS_RUN_FILE)
        logger.info("%s: the earlier attempt's %s is now %s", folder, RUN_FILE, PREVIOUS_RUN_FILE)


def _run_variant(
    sweep: str, variant: Variant, folder: Path, argv: list[str], stop_timeout: float, settings: str
) -> dict:
    """One variant as a child process in its own process group; returns its row's new fields."""
    folder.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PROCRL_VARIANT": json.dumps(variant.record(sweep, settings))}
    proc = None
    with (folder / "log.txt").open("ab") as log:
        log.write(f"\n=== {_now()} procrl sweep {sweep}: {shlex.join(argv)}\n".encode())
        log.flush()
        try:
            proc = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True
            )
            returncode = proc.wait()
        except OSError as error:  # a program that does not exist or cannot run
            error_text = f"{type(error).__name__}: {error}"
            return {"state": "failed", "returncode": None, "error": error_text, "finished_at": _now()}
        except _Stopped as stop:
            if proc is not None:
                _stop_group(proc, stop.signum, stop_timeout)
            returncode = proc.returncode if proc is not None else None
            error_text = f"stopped by {stop}"
            return {"state": "interrupted", "returncode": returncode, "error": error_text, "finished_at": _now()}
    status = read_run_status(folder / RUN_FILE)
    row = {"returncode": returncode, "finished_at": _now(), "error": None}
    if returncode == 0 and status == "finished":
        return {**row, "state": "finished"}
    if returncode == 0:
        row["error"] = f"exited 0 but {folder / RUN_FILE} says {status!r}, not 'finished'"
    else:
        row["error"] = _run_error(folder / RUN_FILE) or f"exit status {returncode}; see {folder / 'log.txt'}"
    logger.warning("variant %s failed: %s", variant.name, row["error"])
    return {**row, "state": "failed"}


def _stop_group(proc: subprocess.Popen, signum: int, timeout: float) -> None:
    """SIGINT (Ctrl-C) or SIGTERM to the variant's process group, SIGKILL after `timeout` s or a second signal;
    then SIGKILL to whatever of the group is left (a server the variant started)."""
    try:
        os.killpg(proc.pid, signum)
        proc.wait(timeout=timeout)
    except (subprocess.TimeoutExpired, _Stopped):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        proc.wait()
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def _raise_stopped(signum, frame) -> None:
    raise _Stopped(signum)


def _run_error(path: Path) -> str | None:
    """run.json's `error` ("<ExceptionType: message>"), if it has one."""
    try:
        error = json.loads(path.read_text()).get("error")
    except (OSError, ValueError, AttributeError):
        return None
    return error if isinstance(error, str) else None


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
