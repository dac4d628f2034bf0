"""procrl's generation hook for TRL's `GRPOTrainer(rollout_func=...)` (docs/architecture.md "Generation hook").

TRL 1.16's own transformers generation path throws the sampler's log-probabilities away, and reward functions
only see dataset columns plus the extra fields a `rollout_func` returns. So procrl generates here: one
`generate(output_logits=True, return_dict_in_generate=True)` call yields, for every sampled token,

- `logprobs`: log p_T(token) at the sampling temperature T, i.e. `log_softmax(logits / T)`, the quantity TRL
  computes for the policy in its loss (trl/trainer/grpo_trainer.py `_get_per_token_logps_and_entropies`);
- `completion_logps`: log p(token) under the RAW model distribution (temperature 1, no top-p/top-k/penalties),
  an extra field that TRL forwards to every reward function as the keyword `completion_logps` (PiCSAR, FRS).

Both come from the generation's own logits: no second forward pass of the policy. With `use_vllm` (TRL's
colocated engine or a `trl vllm-serve` server) the rollout runs on vLLM instead (`procrl.trainers.vllm_rollout`):
`logprobs` are then vLLM's processed log-probs of the sampled tokens, `completion_logps` raw ones (vLLM's own when
the sampler draws from the raw distribution, else one policy forward).

TRL contract (trl/trainer/grpo_trainer.py, `GRPOTrainer._generate`, TRL 1.16): the function receives the
per-process prompt slice (already repeated `num_generations` times by TRL's sampler) and the trainer, and returns
a dict with `prompt_ids`, `completion_ids`, `logprobs` (lists of lists, one row per received prompt); any other
key is merged into the inputs of the reward functions; `env_mask` (1 = model token, 0 = environment token) is
applied to the loss.
"""

from __future__ import annotations

from trl.models import unwrap_model_for_generation

from procrl.generation import generate_completions, render_prompts
from procrl.trainers.vllm_rollout import colocate_rollout, search_rollout, server_rollout
from procrl.utils import get_logger, reads_completion_logps

logger = get_logger(__name__)


def needs_completion_logps(trainer) -> bool:
    """Whether any of the trainer's reward functions or its step scorer reads `completion_logps`
    (`procrl.utils.reads_completion_logps`): the vLLM rollouts compute raw log-probs only then. The first answer
    for a trainer is logged with the readers' names."""
    funcs = [*getattr(trainer, "reward_funcs", []), getattr(trainer, "step_reward_func", None)]
    readers = [getattr(f, "__name__", type(f).__name__) for f in funcs if f is not None and reads_completion_logps(f)]
    if not getattr(trainer, "_procrl_logps_logged", False):
        logger.info("raw log-probs (completion_logps): %s", f"computed for {readers}" if readers else "no reader")
        trainer._procrl_logps_logged = True
    return bool(readers)


class ProcessRollout:
    """The `rollout_func` procrl passes to TRL: generation with log-probs kept for the rewards.

    Call signature (TRL's): `rollout(prompts, trainer) -> dict` with `prompt_ids`, `completion_ids`,
    `logprobs` (at the sampling temperature) and the extra field `completion_logps` (raw distribution, T = 1).

    It reuses `trainer.generation_config` (built by TRL from `temperature`, `top_p`, `top_k`, `min_p`,
    `repetition_penalty`, `max_completion_length` and `generation_kwargs`), so the sampling settings are
    exactly those of `GRPOConfig`. `output_logits` is added here, never through `generation_kwargs` (TRL would
    pass it to its own path too).

    With `env` (a `procrl.trainers.search_env.SearchEnvironment`) the same function runs multi-turn search
    episodes instead of single-turn generation: it additionally returns `env_mask` (1 = model token, 0 =
    environment token; TRL masks the loss with it) and `search_trace` (one parsed `Trace` per completion), and the
    log-probs of environment tokens are 0.0. `max_completion_length` then bounds model + environment tokens.

    With `trainer.use_vllm` it generates on vLLM (`procrl.trainers.vllm_rollout`: `colocate_rollout`,
    `server_rollout`, `search_rollout`; search episodes need colocate mode) with TRL's vLLM sampling settings. There
    raw log-probs that vLLM does not hand out for free (a tempered sampler: one rescoring pass; a server: one policy
    forward) are computed only when a reward function or the step scorer reads them (`needs_completion_logps`);
    otherwise `completion_logps` is left out (or holds only the free ones, search episodes).

    Args:
        env: None (default) = single-turn generation, exactly as before; else the search environment.

    Raises:
        NotImplementedError: search episodes with `vllm_mode: server`.
    """

    __name__ = "process_rollout"

    def __init__(self, env=None):
        self.env = env
        self._step, self._calls = None, 0

    def _next_call(self, trainer) -> int:
        """How many rollouts this instance already ran at the trainer's current step and mode (seeds differ)."""
        step = (trainer.state.global_step, trainer.model.training)
        self._calls = self._calls + 1 if step == self._step else 0
        self._step = step
        return self._calls

    def __call__(self, prompts: list, trainer) -> dict[str, list]:
        tokenizer = trainer.processing_class
        tokenizer = getattr(tokenizer, "tokenizer", tokenizer)  # a processor wraps its tokenizer
        prompt_ids = render_prompts(tokenizer, prompts, getattr(trainer, "chat_template_kwargs", None))
        if getattr(trainer, "use_vllm", False):
            raw_logps = needs_completion_logps(trainer)
            if trainer.vllm_mode == "server":
                if self.env is not None:
                    raise NotImplementedError(
                        "search episodes need a local engine: use vllm_mode: colocate, or generation_backend: "
                        "transformers."
                    )
                return server_rollout(trainer, prompt_ids, raw_logps=raw_logps)
            call = self._next_call(trainer)
            if self.env is not None:
                return search_rollout(self.env, trainer, prompts, prompt_ids, call, raw_logps=raw_logps)
            return colocate_rollout(trainer, prompt_ids, call, raw_logps=raw_logps)
        with unwrap_model_for_generation(
            trainer.model_wrapped,
            trainer.accelerator,
            gather_deepspeed3_params=trainer.args.ds3_gather_for_generation,
            generation_kwargs=trainer.generation_kwargs,
            gradient_checkpointing_kwargs=trainer.args.gradient_checkpointing_kwargs,
        ) as unwrapped_model:
            if self.env is not None:
                episodes = self.env.run(
                    unwrapped_model,
                    tokenizer,
                    prompts,
                    prompt_ids,
                    trainer.generation_config,
                    max_completion_length=trainer.generation_config.max_new_tokens,
                    pad_token_id=tokenizer.pad_token_id,
                    eos_ids=trainer.eos_token_ids,
                    logprobs_temperature=trainer.temperature,
                    device=trainer.accelerator.device,
                )
                return {
                    "prompt_ids": prompt_ids,
                    "completion_ids": episodes.completion_ids,
                    "logprobs": episodes.logprobs,
                    "completion_logps": episodes.completion_logps,
                    "env_mask": episodes.env_mask,
                    "search_trace": episodes.search_trace,
                }
            out = generate_completions(
                unwrapped_model,
                prompt_ids,
                trainer.generation_config,
                pad_token_id=tokenizer.pad_token_id,
                eos_ids=trainer.eos_token_ids,
                logprobs_temperature=trainer.temperature,
                device=trainer.accelerator.device,
            )
        return {
            "prompt_ids": prompt_ids,
            "completion_ids": out.completion_ids,
            "logprobs": out.logprobs,
            "completion_logps": out.completion_logps,
        }
