"""Rollout engines (core layer; DESIGN §5, issue 3 "Rollout engine"): one interface, two engines.

- `TransformersEngine` (`procrl.generation.transformers_engine`): batched `generate` with left padding and the KV
  cache (reusing `procrl.generation.generate_completions`), prompts sorted by length into batches to cut padding;
- `VLLMEngine` (`procrl.generation.vllm_engine`): vLLM's offline `LLM`, used when `vllm` is importable (the import
  is lazy).

Both return one `Rollout` per prompt row: the sampled token ids cut after the first EOS (kept) or after the first
token that completes a stop string (kept), their text, and their log-probabilities under the RAW model distribution
(temperature 1, no top-p/top-k; natural log), whatever the sampling settings were. The sharded, resumable runner
that the data builders call is `procrl.data_builders.rollouts.run_rollouts`.

    >>> engine = make_engine("default")                                  # doctest: +SKIP
    >>> rollouts = engine.generate([prompt_ids], SamplingParams(temperature=0.7), seed=0)  # doctest: +SKIP
"""

from __future__ import annotations

import importlib.util

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
from procrl.generation.vllm_engine import VLLMEngine
from procrl.utils import get_logger

logger = get_logger(__name__)

__all__ = [
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
    "make_engine",
    "resolve_dtype",
    "stable_hash",
    "stop_criteria",
    "weights_fingerprint",
]

ENGINES = ("auto", "transformers", "vllm")


def make_engine(model_name_or_path: str = "default", *, engine: str = "auto", **kwargs) -> RolloutEngine:
    """Build a rollout engine: "vllm", "transformers", or "auto" (vLLM when it is importable and a CUDA GPU is
    visible, else transformers). `kwargs` go to the engine's constructor (`device`, `dtype`, `batch_size`, ...).

    Raises:
        ValueError: an engine name not in `ENGINES`.
        ImportError: engine="vllm" without vLLM installed.
    """
    if engine not in ENGINES:
        raise ValueError(f"engine must be 'auto', 'transformers' or 'vllm', got {engine!r}.")
    if engine == "auto":
        has_vllm = importlib.util.find_spec("vllm") is not None
        on_gpu = torch.cuda.is_available() and str(kwargs.get("device") or "cuda").startswith("cuda")
        engine = "vllm" if has_vllm and on_gpu else "transformers"
        logger.info("Rollout engine: %s (vllm %s)", engine, "importable" if has_vllm else "not installed")
    if engine == "vllm":
        return VLLMEngine(model_name_or_path, **kwargs)
    return TransformersEngine(model_name_or_path, **kwargs)
