"""Generation primitives (core layer): prompt rendering, batched `generate` with log-probs kept, rollout engines.

`procrl.generation.hf` drives transformers `generate`; the rollout engines of the data builders
(`procrl.generation.engines`: transformers and vLLM) build on it.
"""

from procrl.generation.engines import (
    FINISH_REASONS,
    Rollout,
    RolloutEngine,
    SamplingParams,
    TransformersEngine,
    VLLMEngine,
    auto_engine,
    cut_completion,
    default_state,
    derive_seed,
    import_vllm,
    make_engine,
    vllm_on_cpu,
    weights_fingerprint,
)
from procrl.generation.hf import (
    GenerationOutput,
    completion_lengths,
    eos_token_ids,
    generate_completions,
    left_pad,
    render_prompts,
)

__all__ = [
    "FINISH_REASONS",
    "GenerationOutput",
    "Rollout",
    "RolloutEngine",
    "SamplingParams",
    "TransformersEngine",
    "VLLMEngine",
    "auto_engine",
    "completion_lengths",
    "cut_completion",
    "default_state",
    "derive_seed",
    "eos_token_ids",
    "generate_completions",
    "left_pad",
    "import_vllm",
    "make_engine",
    "render_prompts",
    "vllm_on_cpu",
    "weights_fingerprint",
]
