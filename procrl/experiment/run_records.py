"""Load run records without any server: `run.json` files (procrl.experiment.tracking, schema version 1) and offline wandb runs
(`wandb/offline-run-*/run-<id>.wandb`), the latter turned into the same record shape.

    runs = load_runs(["runs/sweeps/reward_ablation"])   # every run.json and offline wandb run below the directory
    metric = sweep_metric("runs/sweeps/reward_ablation")  # {"name": "task/accuracy", "goal": "maximize"} or None

wandb keeps a run's data in one `.wandb` file: a LevelDB-style log of protobuf `wandb.proto.wandb_internal_pb2.Record`
messages. The installed wandb no longer ships a Python reader (its Go core `wandb-core` writes and syncs the file;
the old `wandb/sdk/internal/datastore.py` is gone), so the format is read here, as that reader did:

    file   := header block*             header := ":W&B" (4 bytes), magic 0xBEE1 (uint16 LE), version 0 (uint8)
    block  := record* zero-padding      (32 KiB blocks; a record header never straddles a block: the tail of a block
                                         shorter than 7 bytes is zero padding)
    record := crc32 (uint32 LE) length (uint16 LE) type (uint8) data[length]
              type: 1 FULL, 2 FIRST, 3 MIDDLE, 4 LAST (a message longer than a block is split FIRST MIDDLE* LAST)
              crc32 = zlib.crc32(data, zlib.crc32(bytes([type]))) -- zlib's CRC-32, not LevelDB's crc32c

`load_wandb_run` turns the records into the shape of `run.json` (procrl.experiment.tracking, schema version 1): config (the
run's config: `run` and `config` records), metrics (the final summary: `summary` records), history (one row per
`history` record), status and wall time (the `exit` record), git/machine (the `run` and `environment` records).
"""

from __future__ import annotations

import json
import math
import struct
import zlib
from collections.abc import Iterable, Iterator
from datetime import UTC
from pathlib import Path
from typing import Any

from procrl.utils import get_logger

__all__ = [
    "SCHEMA_VERSION",
    "find_wandb_file",
    "is_number",
    "load_runs",
    "load_wandb_run",
    "read_wandb_records",
    "sweep_metric",
]

logger = get_logger(__name__)

SCHEMA_VERSION = 1  # the run.json schema this module reads (procrl.experiment.tracking)
HEADER = struct.Struct("<4sHB")  # ident, magic, version
RECORD_HEADER = struct.Struct("<IHB")  # crc32, length, type
IDENT, MAGIC, VERSION = b":W&B", 0xBEE1, 0
BLOCK_LEN = 32768
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4
_TYPE_CRC = {t: zlib.crc32(bytes([t])) for t in (FULL, FIRST, MIDDLE, LAST)}
# transformers' WandbCallback logs `train/<key>` for every training log key (transformers/integrations/
# integration_utils.py:550 `rewrite_logs`) and its step as `train/global_step` (ibid. :771, :900): the report keys
# are the trainer's own (`reward`, `task/accuracy`), so that prefix is removed; `eval/...` keys stay.
TRAIN_PREFIX = "train/"
STEP_KEYS = ("train/global_step", "_step")  # the first present is the row's step
# procrl.experiment.tracking puts the record's static part into the wandb config under "procrl" (tracking.py `_start_wandb`)
TRACKING_KEY = "procrl"


def is_number(value: Any) -> bool:
    """Whether `value` is a finite int or float and not a bool: the one test of what counts as a metric value in a
    run record (procrl.experiment.tracking writes them, this module and procrl.experiment.run_report read them).

    >>> [is_number(v) for v in (3, 0.5, True, float("nan"), float("inf"), "1", None)]
    [True, True, False, False, False, False, False]
    """
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


# ----------------------------------------------------------------------------------------------------------------------
# run.json files and directories of runs
# ----------------------------------------------------------------------------------------------------------------------


def load_runs(paths: Iterable[str | Path], include_unfinished: bool = True) -> list[dict[str, Any]]:
    """The run records below `paths`, each a `run.json` dict plus `path` (its directory) and `source`
    ("run.json" | "wandb").

    Each path is a `run.json` file, a run directory (with `run.json`), a wandb run directory (with a `.wandb` file), or
    any directory: then every `run.json` below it and every `offline-run-*` wandb directory below it that is not
    inside a directory with a `run.json` (that record already has the run; procrl.experiment.tracking copies it to wandb).
    A run found twice is read once.

    Raises:
        FileNotFoundError: a path that does not exist, or a directory with no run below it.
        ValueError: a `run.json` that is not a JSON object or has another `schema_version` (`procrl.experiment.tracking`).
    """
    runs: dict[Path, dict[str, Any]] = {}
    for path in map(Path, paths):
        for run_dir, source in _find_runs(path):
            key = run_dir.resolve()
            if key not in runs:
                runs[key] = _read_run_json(run_dir) if source == "run.json" else load_wandb_run(run_dir)
    records = list(runs.values())
    if not include_unfinished:
        left_out = [r["path"] for r in records if r.get("status") != "finished"]
        if left_out:
            logger.info("left out %d unfinished runs: %s", len(left_out), ", ".join(left_out))
        records = [r for r in records if r.get("status") == "finished"]
    return records


def _find_runs(path: Path) -> list[tuple[Path, str]]:
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist: give run directories (with run.json) or a sweep directory")
    if path.is_file():
        if path.name == "run.json":
            return [(path.parent, "run.json")]
        if path.suffix == ".wandb":
            return [(path.parent, "wandb")]
        raise FileNotFoundError(f"{path} is neither a run.json nor a .wandb file")
    if (path / "run.json").is_file():
        return [(path, "run.json")]
    if any(path.glob("*.wandb")):
        return [(path, "wandb")]
    found = [(p.parent, "run.json") for p in sorted(path.rglob("run.json"))]
    recorded = {d.resolve() for d, _ in found}
    for wandb_dir in sorted(path.rglob("offline-run-*")):
        inside_recorded = any(parent.resolve() in recorded for parent in wandb_dir.parents)
        if wandb_dir.is_dir() and any(wandb_dir.glob("*.wandb")) and not inside_recorded:
            found.append((wandb_dir, "wandb"))
    if not found:
        raise FileNotFoundError(
            f"{path}: no run.json and no wandb/offline-run-* directory below it; give a run's output directory, a "
            "sweep directory, or a wandb run directory"
        )
    return found


def _read_run_json(run_dir: Path) -> dict[str, Any]:
    file = run_dir / "run.json"
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
    return {**record, "path": str(run_dir), "source": "run.json"}


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


# ----------------------------------------------------------------------------------------------------------------------
# Offline wandb runs
# ----------------------------------------------------------------------------------------------------------------------


def find_wandb_file(run_dir: str | Path) -> Path:
    """The `.wandb` file of a wandb run directory (`.../wandb/offline-run-<time>-<id>`).

    Raises:
        FileNotFoundError: none, or more than one (name them).
    """
    files = sorted(Path(run_dir).glob("*.wandb"))
    if len(files) != 1:
        what = "no .wandb file" if not files else f"{len(files)} .wandb files ({', '.join(f.name for f in files)})"
        raise FileNotFoundError(f"{run_dir}: {what}; give a wandb run directory (wandb/offline-run-*)")
    return files[0]


def read_wandb_records(path: str | Path) -> Iterator[Any]:
    """The `wandb_internal_pb2.Record` messages of a `.wandb` file, in order.

    A file whose last message is cut off (the run is still writing, or its process was killed) yields the complete
    messages before it and logs a warning.

    Raises:
        ValueError: not a wandb log (wrong header), or a record whose checksum or framing is wrong (corrupt file).
    """
    from wandb.proto import wandb_internal_pb2  # optional heavy dependency: only to read wandb runs

    data = Path(path).read_bytes()
    if len(data) < HEADER.size or HEADER.unpack_from(data) != (IDENT, MAGIC, VERSION):
        raise ValueError(f"{path}: not a wandb run log (header {data[:7]!r}, expected {IDENT!r} {MAGIC:#x} v{VERSION})")
    offset, parts = HEADER.size, []
    while offset < len(data):
        left_in_block = BLOCK_LEN - offset % BLOCK_LEN
        if left_in_block < RECORD_HEADER.size:  # block trailer: zero padding
            offset += left_in_block
            continue
        if offset + RECORD_HEADER.size > len(data):
            break
        crc, length, kind = RECORD_HEADER.unpack_from(data, offset)
        if kind == 0 and length == 0 and crc == 0:  # zero padding of a preallocated or partial block
            offset += left_in_block
            continue
        start, end = offset + RECORD_HEADER.size, offset + RECORD_HEADER.size + length
        if end > len(data):
            break
        chunk = data[start:end]
        if kind not in _TYPE_CRC or zlib.crc32(chunk, _TYPE_CRC[kind]) != crc:
            raise ValueError(f"{path}: corrupt record at byte {offset} (type {kind}, checksum mismatch)")
        offset = end
        if kind in (FULL, FIRST) and parts:
            raise ValueError(f"{path}: record at byte {offset} starts a message inside another one")
        if kind in (MIDDLE, LAST) and not parts:
            raise ValueError(f"{path}: record at byte {offset} continues a message that never started")
        parts.append(chunk)
        if kind in (FULL, LAST):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(b"".join(parts))
            parts = []
            yield record
    if offset < len(data) or parts:
        logger.warning("%s: the last message is incomplete (run still writing, or killed); read up to it", path)


def load_wandb_run(run_dir: str | Path) -> dict[str, Any]:
    """A wandb run directory as a run record (the `run.json` shape, schema version 1), plus `path` and `source`.

    Fields: a run that procrl.experiment.tracking started has its record in the config under "procrl": its `command`, `argv`,
    `config`, `git`, `packages`, `machine` and `variant` are taken from there, and the rest of the wandb config (e.g.
    what transformers' WandbCallback adds) is `config["wandb"]`; for any other run `config` = {"wandb": its config}
    (wandb's internal `_wandb` left out) and git/machine come from wandb's own run and environment records;
    `metrics` = the final summary's numbers; `history` = one row per logged step, `{"step": int, key: number}`, with
    the step from `train/global_step` when logged (transformers' WandbCallback), else wandb's `_step`; keys lose the
    `train/` prefix transformers adds. Non-numbers (tables, images, text) and non-finite values are left out of
    metrics and history; keys starting with "_" are wandb's own. `status`: "finished" (exit code 0), "failed"
    (another exit code; `error` says which) or "running" (no exit record: still running, or killed).
    `wall_time_s`: procrl.experiment.tracking's, else the summary's `_runtime` (seconds), else the exit record's.
    """
    run_dir = Path(run_dir)
    config: dict[str, Any] = {}
    summary: dict[str, Any] = {}
    history: list[dict[str, Any]] = []
    run_info: Any = None
    environment: Any = None  # wandb-core writes several environment records (host first, hardware later): merged
    exit_record: Any = None
    for record in read_wandb_records(find_wandb_file(run_dir)):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            run_info = record.run
            _apply(config, record.run.config.update, record.run.config.remove)
            _apply(summary, record.run.summary.update, record.run.summary.remove)
        elif kind == "config":
            _apply(config, record.config.update, record.config.remove)
        elif kind == "summary":
            _apply(summary, record.summary.update, record.summary.remove)
        elif kind == "history":
            history.append({_item_key(item): _history_value(item) for item in record.history.item})
        elif kind == "environment":
            if environment is None:
                environment = type(record.environment)()
            environment.MergeFrom(record.environment)
        elif kind == "exit":
            exit_record = record.exit
    config.pop("_wandb", None)
    own = config.pop(TRACKING_KEY) if isinstance(config.get(TRACKING_KEY), dict) else {}
    runtime = own.get("wall_time_s") if is_number(own.get("wall_time_s")) else summary.get("_runtime")
    if not is_number(runtime) and exit_record is not None:
        runtime = exit_record.runtime
    status, error = "running", None
    if exit_record is not None:
        status = "finished" if exit_record.exit_code == 0 else "failed"
        error = None if exit_record.exit_code == 0 else own.get("error") or f"wandb exit code {exit_record.exit_code}"
    started_at = None
    if run_info is not None and run_info.HasField("start_time"):
        started_at = run_info.start_time.ToDatetime(tzinfo=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    git = own.get("git") or {"commit": (run_info.git.commit or None) if run_info else None, "dirty": None}
    return {
        "schema_version": 1,
        "command": own.get("command") if isinstance(own.get("command"), str) else None,
        "argv": own.get("argv") or (list(environment.args) if environment is not None else []),
        "status": status,
        "error": error,
        "started_at": started_at,
        "finished_at": None,
        "wall_time_s": float(runtime) if is_number(runtime) else None,
        "config": {**(own.get("config") or {}), **({"wandb": config} if config or not own else {})},
        "git": git,
        "packages": own.get("packages") or {},
        "machine": own.get("machine") or _machine(environment),
        "variant": own.get("variant") if isinstance(own.get("variant"), dict) else None,
        "metrics": _numbers(summary),
        "history": [_history_row(row) for row in history],
        "path": str(run_dir),
        "source": "wandb",
    }


def _item_key(item: Any) -> str:
    """A config/summary/history item's key: `key`, or its `nested_key` path joined by "/"."""
    return item.key or "/".join(item.nested_key)


def _apply(target: dict[str, Any], updates: Any, removes: Any) -> None:
    for item in updates:
        target[_item_key(item)] = json.loads(item.value_json) if item.value_json else None
    for item in removes:
        target.pop(_item_key(item), None)


def _history_value(item: Any) -> Any:
    """A history item's value: its JSON form, or the typed scalar that newer wandb writes instead
    (wandb/sdk/interface/history_value.py `set_history_value`)."""
    if item.value_json:
        return json.loads(item.value_json)  # Python's json reads wandb's NaN / Infinity spellings
    which = item.WhichOneof("value")
    if which == "json":
        return json.loads(item.json)
    return None if which in (None, "none") else getattr(item, which)


def _numbers(values: dict[str, Any]) -> dict[str, float | int]:
    """The finite numbers of a summary/history row, wandb's own `_...` keys left out, `train/` prefix removed."""
    return {
        key.removeprefix(TRAIN_PREFIX): value
        for key, value in values.items()
        if not key.startswith("_") and key not in STEP_KEYS and is_number(value)
    }


def _history_row(row: dict[str, Any]) -> dict[str, Any]:
    step = next((row[key] for key in STEP_KEYS if is_number(row.get(key))), None)
    return {"step": int(step) if step is not None else None, **_numbers(row)}


def _machine(environment: Any) -> dict[str, Any]:
    if environment is None:
        return {}
    return {
        "platform": environment.os or None,
        "python": environment.python or None,
        "cpu": environment.cpu.model or None,
        "cpu_count": environment.cpu_count or None,
        "gpus": [environment.gpu_type] * environment.gpu_count if environment.gpu_type else [],
        "world_size": None,
    }
