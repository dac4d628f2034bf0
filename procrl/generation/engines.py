"""Building a rollout engine (core layer; docs/architecture.md "Engines", issue 3 "Rollout engine"): one interface,
two engines, built from a command's settings (`procrl.generation.runtime.EngineArguments`, the `generation_backend`
of every command).

- `TransformersEngine` (`procrl.generation.transformers_engine`): batched `generate` with left padding and the KV
  cache (reusing `procrl.generation.generate_completions`), prompts sorted by length into batches to cut padding;
- `VLLMEngine` (`procrl.generation.vllm_engine`): vLLM's offline `LLM` (CUDA or the CPU build), the default
  ("auto", `procrl.generation.vllm_engine.auto_engine`) wherever vLLM imports (the import is lazy).

Both return one `Rollout` per prompt row: the sampled token ids cut after the first EOS (kept) or after the first
token that completes a stop string (kept), their text, and their log-probabilities under the RAW model distribution
(temperature 1, no top-p/top-k; natural log), whatever the sampling settings were. The sharded, resumable runner
that the data builders call is `procrl.data_builders.rollouts.run_rollouts`.

    >>> engine = make_engine("default")                                  # doctest: +SKIP
    >>> rollouts = engine.generate([prompt_ids], SamplingParams(temperature=0.7), seed=0)  # doctest: +SKIP
"""

from __future__ import annotations

from procrl.generation.runtime import GENERATION_BACKENDS, EngineArguments
from procrl.generation.sampling import RolloutEngine
from procrl.generation.transformers_engine import TransformersEngine
from procrl.generation.vllm_engine import VLLMEngine, auto_engine
from procrl.utils import get_logger

logger = get_logger(__name__)

__all__ = ["make_engine", "make_engine_from"]

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


def make_engine_from(
    settings: EngineArguments, model_name_or_path: str, *, dtype: str = "auto", **kwargs
) -> RolloutEngine:
    """`make_engine` with a command's engine settings: `generation_backend`, `vllm_dtype` and a KV cache of
    `vllm_kv_cache_gib` GiB (vLLM only) from `settings` (an `EngineArguments`, or a config that extends it);
    `dtype` and `kwargs` (`device`, `batch_size`, `tokenizer`, ...) as `make_engine` takes them.

    Raises:
        ValueError, ImportError: as `make_engine`.
    """
    return make_engine(
        model_name_or_path,
        generation_backend=settings.generation_backend,
        vllm_dtype=settings.vllm_dtype,
        dtype=dtype,
        kv_cache_gib=settings.vllm_kv_cache_gib,
        **kwargs,
    )
