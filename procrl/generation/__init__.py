"""Generation primitives (core layer): prompt rendering, batched `generate` with log-probs kept, rollout engines,
the settings that choose an engine (`EngineArguments`), the one stop rule (`procrl.generation.stopping`) and the one
raw-distribution rule (`draws_raw_distribution`).

`procrl.generation.hf` drives transformers `generate`; the rollout engines of the data builders
(`procrl.generation.engines`: transformers and vLLM) build on it.
"""

from procrl.generation.engines import (
    FINISH_REASONS,
    GENERATION_BACKENDS,
    EngineArguments,
    Rollout,
    RolloutEngine,
    SamplingParams,
    TransformersEngine,
    VLLMEngine,
    auto_engine,
    default_state,
    derive_seed,
    draws_raw_distribution,
    import_vllm,
    make_engine,
    sampled_logprobs_are_raw,
    vllm_on_cpu,
    weights_fingerprint,
)
from procrl.generation.hf import GenerationOutput, eos_token_ids, generate_completions, left_pad, render_prompts
from procrl.generation.stopping import completion_lengths, cut_completion, stop_criteria

__all__ = [
    "EngineArguments",
    "FINISH_REASONS",
    "GENERATION_BACKENDS",
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
    "draws_raw_distribution",
    "eos_token_ids",
    "generate_completions",
    "left_pad",
    "import_vllm",
    "make_engine",
    "render_prompts",
    "sampled_logprobs_are_raw",
    "stop_criteria",
    "vllm_on_cpu",
    "weights_fingerprint",
]
