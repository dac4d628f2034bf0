"""The content-addressed cache of SFT checkpoints (`procrl.trainers.sft`): identities, the key, atomic publishing.

A checkpoint lives in `<root>/<key>/` (root: `$PROCRL_CACHE/sft`, `procrl.models.cache_dir()`), where `key` is the
first 16 hex digits of the SHA-256 of (docs/architecture.md "SFT warm starts"):

- `KEY_VERSION` (raised when what a key means changes);
- the base model's identity (`model_identity`): a local directory by its content (`directory_fingerprint`: the
  SHA-256 of the names, sizes and bytes of its weight, config and tokenizer files, so a copy elsewhere has the same
  identity and a retrained checkpoint at the same path another one); a `scratch:` organism by its architecture
  fields and its tokenizer's files; a hub id by id and revision (its content is not read);
- the training rows actually used: the SHA-256 of the (prompt, completion) message lists in training order, and
  their number (`data_digest`), not the set's name or row range, so the same rows from another file hit;
- the training settings that change the trained weights: every `SFTConfig` field but `UNKEYED_TRAINING_FIELDS`
  (where output goes, logging, saving, evaluation, the hub, data-loading workers, activation checkpointing) and every
  `ModelConfig` field but `model_name_or_path` (`keyed_settings`), with the number of processes (the global
  batch).

A directory holds a finished checkpoint exactly when its manifest `sft.json` is there (`is_complete`): training
writes into a hidden sibling `.tmp-<key>-*` (`staging_dir`) and `publish` renames it into place at the end (one
`rename` on one file system), so an interrupted run leaves at most a `.tmp-*` directory, which is never taken for a
checkpoint (delete it at will).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from procrl.experiment.provenance import config_record
from procrl.generation.runtime import stable_hash
from procrl.models import cache_dir, resolve_model
from procrl.scratch_models import is_scratch_spec, parse_scratch_spec
from procrl.utils import get_logger, json_safe

logger = get_logger(__name__)

__all__ = [
    "KEY_VERSION",
    "MANIFEST",
    "UNKEYED_TRAINING_FIELDS",
    "cache_key",
    "data_digest",
    "directory_fingerprint",
    "is_complete",
    "keyed_settings",
    "model_identity",
    "publish",
    "sft_cache_root",
    "staging_dir",
]

KEY_VERSION = 1
KEY_LENGTH = 16  # hex digits of the key (64 bits)
MANIFEST = "sft.json"  # written last into a checkpoint: its presence marks the checkpoint finished
# The files of a model directory that make its identity: weights, configs, tokenizer files, custom code.
IDENTITY_SUFFIXES = tuple(".safetensors .bin .pt .pth .gguf .json .jinja .txt .model .tiktoken .py".split())
IDENTITY_SKIP = ("run.json",)  # a run record beside a checkpoint (train_grpo.py output) is not the model
TOKENIZER_PREFIXES = ("tokenizer", "special_tokens_map", "added_tokens", "vocab", "merges", "chat_template")
_CHUNK = 1 << 24

# SFTConfig fields that do not change the trained weights: where output goes, logging, checkpoint saving, evaluation,
# the hub and trackers, data-loading workers, activation checkpointing (recomputes the same activations).
UNKEYED_TRAINING_FIELDS = frozenset(
    {
        "output_dir", "run_name", "project", "report_to", "disable_tqdm", "skip_memory_metrics",
        "logging_steps", "logging_strategy", "logging_first_step", "logging_nan_inf_filter", "log_level",
        "log_level_replica", "log_on_each_node", "include_num_input_tokens_seen",
        "save_steps", "save_strategy", "save_total_limit", "save_on_each_node", "save_only_model",
        "resume_from_checkpoint", "restore_callback_states_from_checkpoint", "enable_jit_checkpoint",
        "do_train", "do_eval", "do_predict", "eval_strategy", "eval_steps", "eval_delay", "eval_on_start",
        "eval_accumulation_steps", "eval_do_concat_batches", "eval_use_gather_object", "eval_packing",
        "per_device_eval_batch_size", "batch_eval_metrics", "bf16_full_eval", "fp16_full_eval", "include_for_metrics",
        "metric_for_best_model", "greater_is_better", "load_best_model_at_end", "prediction_loss_only", "label_names",
        "push_to_hub", "hub_model_id", "hub_strategy", "hub_token", "hub_private_repo", "hub_always_push",
        "hub_revision", "trackio_space_id", "trackio_bucket_id", "trackio_static_space_id",
        "dataloader_num_workers", "dataloader_pin_memory", "dataloader_persistent_workers",
        "dataloader_prefetch_factor", "dataloader_multiprocessing_context", "dataset_num_proc",
        "ddp_timeout", "local_rank", "torch_empty_cache_steps",
        "gradient_checkpointing", "gradient_checkpointing_kwargs", "activation_checkpointing",
        "activation_checkpointing_kwargs", "activation_offloading",
    }
)  # fmt: skip


def sft_cache_root(override: str | None = None) -> Path:
    """Where SFT checkpoints live: `override` if given, else `$PROCRL_CACHE/sft` (`procrl.models.cache_dir`)."""
    return Path(override).expanduser() if override else cache_dir() / "sft"


def _file_digest(digest: Any, path: Path) -> None:
    digest.update(f"{path.name}\0{path.stat().st_size}\0".encode())
    with path.open("rb") as handle:
        while block := handle.read(_CHUNK):
            digest.update(block)


def directory_fingerprint(path: str | Path, *, tokenizer_only: bool = False) -> str:
    """SHA-256 (hex) of a model directory's identity files: names, sizes and full contents, in name order.

    The files are those directly in `path` with a suffix of `IDENTITY_SUFFIXES` (weights, configs, tokenizer
    files, custom code), but hidden files and `IDENTITY_SKIP`; with `tokenizer_only`, only tokenizer files (names
    starting with one of `TOKENIZER_PREFIXES`). Reading is the cost: ~1 s for SmolLM2-135M's 540 MB.

    Raises:
        ValueError: no such file in `path` (not a model or tokenizer directory).
    """
    path = Path(path)
    files = sorted(
        p
        for p in path.iterdir()
        if p.is_file() and p.suffix in IDENTITY_SUFFIXES and not p.name.startswith(".") and p.name not in IDENTITY_SKIP
    )
    if tokenizer_only:
        files = [p for p in files if p.name.startswith(TOKENIZER_PREFIXES)]
    if not files:
        kind = "tokenizer" if tokenizer_only else "model"
        raise ValueError(f"{path} holds no {kind} files (e.g. config.json, tokenizer.json); is it a {kind} directory?")
    digest = hashlib.sha256()
    for file in files:
        _file_digest(digest, file)
    return digest.hexdigest()


def _source_identity(name: str, revision: str | None, *, tokenizer_only: bool = False) -> dict[str, Any]:
    path = resolve_model(name)
    if Path(path).is_dir():
        return {"sha256": directory_fingerprint(path, tokenizer_only=tokenizer_only)}
    logger.warning("%s is not a local directory: it is keyed by its id and revision, not its content", path)
    return {"hub": path, "revision": revision or "main"}


def model_identity(name_or_path: str, revision: str | None = None) -> dict[str, Any]:
    """The base model's part of the key (module docstring): {"sha256": ...} of a local directory ("default" and
    the other names `procrl.models.resolve_model` knows are resolved first), {"scratch": architecture fields,
    "tokenizer": its identity} of a `scratch:` spec, or {"hub": id, "revision": ...}.

    Raises:
        ValueError: a bad `scratch:` spec, or a directory without model files.
    """
    if is_scratch_spec(name_or_path):
        spec = parse_scratch_spec(name_or_path)
        return {
            "scratch": spec.architecture(),
            "tokenizer": _source_identity(spec.tokenizer, None, tokenizer_only=True),
        }
    return _source_identity(name_or_path, revision)


def data_digest(rows: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """{"sha256", "rows"} of the training examples in order: each row's `prompt` and `completion` (message lists)
    as canonical JSON (`procrl.generation.runtime.stable_hash`)."""
    pairs = [[row["prompt"], row["completion"]] for row in rows]
    return {"sha256": stable_hash(pairs), "rows": len(pairs)}


def keyed_settings(training_args: Any, model_args: Any) -> dict[str, Any]:
    """The settings in the key, as the run record writes them (`procrl.experiment.provenance.config_record`):
    {"training": the `SFTConfig` fields but `UNKEYED_TRAINING_FIELDS`, "model": the `ModelConfig` fields but
    `model_name_or_path`}."""
    training, model = config_record([training_args, model_args]).values()
    training = {k: v for k, v in training.items() if k not in UNKEYED_TRAINING_FIELDS}
    return {"training": training, "model": {k: v for k, v in model.items() if k != "model_name_or_path"}}


def cache_key(
    identity: Mapping[str, Any], data: Mapping[str, Any], settings: Mapping[str, Any], world_size: int
) -> str:
    """The checkpoint's key: the first 16 hex digits of the SHA-256 of its inputs (module docstring).

    >>> key = cache_key({"sha256": "ab"}, {"sha256": "cd", "rows": 2}, {"training": {"seed": 0}}, 1)
    >>> len(key), key == cache_key({"sha256": "ab"}, {"sha256": "cd", "rows": 2}, {"training": {"seed": 1}}, 1)
    (16, False)
    """
    inputs = {"version": KEY_VERSION, "model": identity, "data": data, "settings": settings, "world_size": world_size}
    return stable_hash(json_safe(inputs))[:KEY_LENGTH]


def is_complete(path: Path) -> bool:
    """Whether `path` holds a finished checkpoint (its manifest is there)."""
    return (path / MANIFEST).is_file()


def staging_dir(root: Path, key: str) -> Path:
    """A new empty hidden directory `<root>/.tmp-<key>-*` to train into (same file system as the target)."""
    root.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".tmp-{key}-", dir=root))


def publish(staging: Path, target: Path, *, replace: bool = False) -> Path:
    """Move a finished checkpoint from `staging` to `target` atomically; returns `target`.

    A finished checkpoint already at `target` (another run of the same key finished first) is kept and `staging`
    deleted, unless `replace` (`--force`): then it is swapped out and deleted after the new one is in place. An
    unfinished directory at `target` (no manifest) is deleted first.

    Raises:
        ValueError: `staging` holds no manifest (never publish an unfinished checkpoint).
    """
    if not is_complete(staging):
        raise ValueError(f"{staging} has no {MANIFEST}: it is not a finished checkpoint")
    old = None
    if is_complete(target):
        if not replace:
            logger.info("%s was finished by another run meanwhile; keeping it", target)
            shutil.rmtree(staging, ignore_errors=True)
            return target
        old = target.with_name(f".old-{target.name}-{os.getpid()}")
        target.rename(old)
    elif target.exists():
        logger.warning("%s holds an unfinished checkpoint (no %s); replacing it", target, MANIFEST)
        shutil.rmtree(target)
    try:
        staging.rename(target)
    except OSError:  # another run renamed its checkpoint in between: the same key, so the same content
        if not is_complete(target):
            raise
        logger.info("%s was finished by another run meanwhile; keeping it", target)
        shutil.rmtree(staging, ignore_errors=True)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return target
