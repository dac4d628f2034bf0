"""Load run records without any server: the `run.json` files every procrl command writes (procrl.experiment.tracking,
schema version 1; a run that also reported to wandb has the same record in its run.json).

    runs = load_runs(["runs/sweeps/reward_ablation"])   # every run.json below the directory
    metric = sweep_metric("runs/sweeps/reward_ablation")  # {"name": "task/accuracy", "goal": "maximize"} or None
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from procrl.experiment.tracking import RUN_FILE, SCHEMA_VERSION
from procrl.utils import get_logger

__all__ = ["load_runs", "sweep_metric"]

logger = get_logger(__name__)


def load_runs(paths: Iterable[str | Path], include_unfinished: bool = True) -> list[dict[str, Any]]:
    """The run records below `paths`, each a `run.json` dict plus `path` (its directory).

    Each path is a `run.json` file, a run directory (with `run.json`), or any directory: then every `run.json` below
    it. A run found twice is read once.

    Raises:
        FileNotFoundError: a path that does not exist, a file that is not a run.json, or a directory with no run.json
            below it.
        ValueError: a `run.json` that is not a JSON object or has another `schema_version` (`procrl.experiment.tracking`).
    """
    runs: dict[Path, dict[str, Any]] = {}
    for path in map(Path, paths):
        for run_dir in _find_runs(path):
            if (key := run_dir.resolve()) not in runs:
                runs[key] = _read_run_json(run_dir)
    records = list(runs.values())
    if not include_unfinished:
        left_out = [r["path"] for r in records if r.get("status") != "finished"]
        if left_out:
            logger.info("left out %d unfinished runs: %s", len(left_out), ", ".join(left_out))
        records = [r for r in records if r.get("status") == "finished"]
    return records


def _find_runs(path: Path) -> list[Path]:
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist: give run directories (with run.json) or a sweep directory")
    if path.is_file():
        if path.name != RUN_FILE:
            raise FileNotFoundError(f"{path} is not a run.json; give a run's run.json or its directory")
        return [path.parent]
    if (path / RUN_FILE).is_file():
        return [path]
    found = [p.parent for p in sorted(path.rglob(RUN_FILE))]
    if not found:
        raise FileNotFoundError(f"{path}: no run.json below it; give a run's output directory or a sweep directory")
    return found


def _read_run_json(run_dir: Path) -> dict[str, Any]:
    file = run_dir / RUN_FILE
    try:
        record = json.loads(file.read_text())
    except json.JSONDecodeError as error:
        raise ValueError(f"{file}: not valid JSON ({error}); was it written by procrl.experiment.tracking?") from error
    if not isinstance(record, dict) or record.get("schema_version") != SCHEMA_VERSION:
        version = record.get("schema_version") if isinstance(record, dict) else None
        raise ValueError(
            f"{file}: schema_version {version!r}, this report reads version {SCHEMA_VERSION}; "
            "rerun the run or update procrl"
        )
    return {**record, "path": str(run_dir)}


def sweep_metric(directory: str | Path) -> dict[str, str] | None:
    """The sweep's `metric` ({"name": ..., "goal": "maximize" | "minimize"}, goal "minimize" when not given, as in
    wandb's sweep format and procrl.experiment.sweeps) from `<directory>/sweep.json` (procrl sweep writes it), at its top
    level or under `config` / `sweep`; None without a sweep.json or a metric.

    Raises:
        ValueError: a sweep.json that cannot be read, is not JSON or not a JSON object, or whose metric's goal is
            neither "maximize" nor "minimize".
    """
    file = Path(directory) / "sweep.json"
    if not file.is_file():
        return None
    try:
        data = json.loads(file.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(
            f"{file}: not a readable JSON file ({error}); procrl sweep writes it: rerun the sweep"
        ) from error
    if not isinstance(data, dict):
        raise ValueError(f"{file}: a JSON {type(data).__name__}, expected an object (what procrl sweep writes)")
    for holder in (data, data.get("config"), data.get("sweep")):
        if isinstance(holder, dict) and isinstance(holder.get("metric"), dict) and holder["metric"].get("name"):
            goal = holder["metric"].get("goal") or "minimize"
            if goal not in ("maximize", "minimize"):
                raise ValueError(f"{file}: metric goal {goal!r}: use maximize or minimize")
            return {"name": str(holder["metric"]["name"]), "goal": goal}
    return None
