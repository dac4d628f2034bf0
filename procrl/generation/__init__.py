"""Generation primitives (core layer): prompt rendering, batched `generate` with log-probs kept, teacher-forced
log-probs, rollout engines, the settings that choose an engine (`EngineArguments`), the one stop rule and the one
raw-distribution rule (`procrl.generation.sampling`).

The modules, by job: `runtime` (where generation runs: `EngineArguments`, device, dtype, bf16, seeds, weight
fingerprints), `sampling` (what an engine is asked and returns: `SamplingParams`, `Rollout`, `RolloutEngine`; where
a completion ends; whether a sampler draws from the raw distribution), `hf` (token log-probs of a transformers
model: `generate` keeping the sampler's, teacher-forced `sequence_logps` and `sequence_self_certainty`),
`transformers_engine` and `vllm_engine` (the two engines; `auto_engine`: what "auto" means here) and `engines`
(`make_engine`, `make_engine_from`: build the engine a command's settings name).

The names below are imported from their module on first use (PEP 562), so importing one module (a command's settings,
the GRPO trainer's vLLM path) loads none of the others.
"""

from procrl.utils import lazy_exports

# public name -> its module in this package
_EXPORTS = {
    "EngineArguments": "runtime",
    "GENERATION_BACKENDS": "runtime",
    "default_state": "runtime",
    "derive_seed": "runtime",
    "weights_fingerprint": "runtime",
    "FINISH_REASONS": "sampling",
    "Rollout": "sampling",
    "RolloutEngine": "sampling",
    "SamplingParams": "sampling",
    "completion_lengths": "sampling",
    "cut_completion": "sampling",
    "draws_raw_distribution": "sampling",
    "stop_criteria": "sampling",
    "strip_stop": "sampling",
    "GenerationOutput": "hf",
    "eos_token_ids": "hf",
    "generate_completions": "hf",
    "left_pad": "hf",
    "render_prompts": "hf",
    "plain_chat_template": "hf",
    "sequence_logps": "hf",
    "sequence_self_certainty": "hf",
    "TransformersEngine": "transformers_engine",
    "VLLMEngine": "vllm_engine",
    "auto_engine": "vllm_engine",
    "import_vllm": "vllm_engine",
    "sampled_logprobs_are_raw": "vllm_engine",
    "vllm_on_cpu": "vllm_engine",
    "make_engine": "engines",
    "make_engine_from": "engines",
}
__all__ = list(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
