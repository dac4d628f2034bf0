"""Generation primitives (core layer): prompt rendering, batched `generate` with log-probs kept.

`procrl.generation.hf` drives transformers `generate`; the rollout engines of the data builders (transformers and
vLLM) build on it.
"""

from procrl.generation.hf import (
    GenerationOutput,
    completion_lengths,
    eos_token_ids,
    generate_completions,
    left_pad,
    render_prompts,
)

__all__ = [
    "GenerationOutput",
    "completion_lengths",
    "eos_token_ids",
    "generate_completions",
    "left_pad",
    "render_prompts",
]
