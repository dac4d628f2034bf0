"""Where generation runs and what makes it reproducible (core layer): the accelerate process state, the device and
dtype of an engine, derived seeds, and fingerprints of model weights (for cache keys)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import torch
from accelerate import PartialState
from accelerate.utils import parse_flag_from_env

__all__ = ["default_device", "default_state", "derive_seed", "resolve_dtype", "stable_hash", "weights_fingerprint"]

DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}


def default_state() -> PartialState:
    """accelerate's `PartialState`, on CPU when `ACCELERATE_USE_CPU` is set or no CUDA GPU is visible.

    A bare `PartialState()` ignores `ACCELERATE_USE_CPU` (only `Accelerator` reads it) and, without a GPU, stays
    single-process even under `torchrun --nproc_per_node 2`; `PartialState(cpu=True)` sets up gloo there. The state
    is a singleton: whichever call comes first in a process decides, so builders should create it through this.
    """
    return PartialState(cpu=parse_flag_from_env("ACCELERATE_USE_CPU") or not torch.cuda.is_available())


def default_device() -> torch.device:
    """This rank's GPU (accelerate launch / torchrun) when CUDA is available and `ACCELERATE_USE_CPU` is not set,
    else the CPU."""
    if torch.cuda.is_available() and os.environ.get("ACCELERATE_USE_CPU", "").lower() not in ("1", "true", "yes"):
        return default_state().device  # this rank's GPU under accelerate launch / torchrun
    return torch.device("cpu")


def resolve_dtype(dtype: str | torch.dtype, device: torch.device) -> torch.dtype:
    """A torch dtype from a name: "auto" is bfloat16 on a GPU that supports it, else float16 on GPU, float32 on CPU.

    Raises:
        ValueError: a name that is neither "auto" nor one of `DTYPES`.
    """
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "auto":
        if device.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.float32
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be 'auto' or one of {sorted(DTYPES)}, got {dtype!r}.")
    return DTYPES[dtype]


def stable_hash(obj: Any) -> str:
    """SHA-256 hex digest of `obj` as canonical JSON (sorted keys, no spaces): the same on every process."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def derive_seed(*parts: Any) -> int:
    """A seed in [0, 2**63) derived from `parts` by SHA-256 (stable across processes and Python versions).

    >>> derive_seed(0, "shard") == derive_seed(0, "shard") != derive_seed(1, "shard")
    True
    """
    return int.from_bytes(hashlib.sha256(json.dumps(parts).encode()).digest()[:8], "big") >> 1


def weights_fingerprint(source, model=None) -> str:
    """Short hash that changes when the weights change. An in-memory model: SHA-256 of its parameters' names, dtypes,
    shapes and raw bytes (exact: a float sum would depend on the reduction order of the CPU's or GPU's kernels and
    thread count, so two ranks holding the same weights could name the same shard differently and wait for each
    other forever). So two models with the same parameter names, dtypes, shapes and bits get the same fingerprint,
    wherever they live (the bytes are read on the CPU: a copy on another device, or a deepcopy, gives the same one),
    and any difference gives another (but for a collision of the 48-bit hash): one ulp in one parameter, or another dtype, even one that holds the same
    values exactly (float32 weights converted to float64 are another model here). Buffers and `requires_grad` are
    not hashed. A local directory: names, sizes and modification times of its weight and config files (a
    retrained checkpoint written to the same path gets new keys). A hub id: "hub" (pin a revision by downloading it
    to a directory)."""
    if model is not None:
        digest = hashlib.sha256()
        with torch.no_grad():
            for name, p in model.named_parameters():
                digest.update(json.dumps([name, str(p.dtype), list(p.shape)]).encode())
                digest.update(p.detach().reshape(-1).contiguous().cpu().view(torch.uint8).numpy())
        return "params-" + digest.hexdigest()[:12]
    path = Path(str(source))
    if path.is_dir():
        entries = sorted(
            (p.name, p.stat().st_size, p.stat().st_mtime_ns)
            for p in path.iterdir()
            if p.is_file() and p.suffix in (".safetensors", ".bin", ".json", ".gguf", ".pt")
        )
        return stable_hash(entries)[:12]
    return "hub"
