"""procrl's generation hook for TRL's `GRPOTrainer(rollout_func=...)` (docs/architecture.md "Generation hook").

TRL 1.16's own transformers generation path throws the sampler's log-probabilities away, and reward functions
only see dataset columns plus the extra fields a `rollout_func` returns. So procrl generates here: one
`generate(output_logits=True, return_dict_in_generate=True)` call yields, for every sampled token,

- `logprobs`: log p_T(token) at the sampling temperature T, i.e. `log_softmax(logits / T)`, the quantity TRL
  computes for the policy in its loss (trl/trainer/grpo_trainer.py `_get_per_token_logps_and_entropies`);
- `completion_logps`: log p(token) under the RAW model distribution (temperature 1, no top-p/top-k/penalties),
  an extra field that TRL forwards to every reward function as the keyword `completion_logps` (PiCSAR, FRS).

Both come from the generation's own logits: no second forward pass of the policy. With `use_vllm` (TRL's
colocated engine or a `trl vllm-serve` server) the rollout runs on vLLM instead (`colocate_rollout`, `server_rollout`,
and `search_rollout` for search episodes through `SearchEnvironment.run_vllm`): `logprobs` are then vLLM's processed
log-probs of the sampled tokens, `completion_logps` raw ones (vLLM's own when the sampler draws from the raw
distribution, else one rescoring pass), for TRL's importance-sampling correction and the reward functions.

TRL contract (trl/trainer/grpo_trainer.py, `GRPOTrainer._generate`, TRL 1.16): the function receives the
per-process prompt slice (already repeated `num_generations` times by TRL's sampler) and the trainer, and returns
a dict with `prompt_ids`, `completion_ids`, `logprobs` (lists of lists, one row per received prompt); any other
key is merged into the inputs of the reward functions; `env_mask` (1 = model token, 0 = environment token) is
applied to the loss.

On vLLM (issue 14), the sampling settings are TRL's colocate ones (trl/generation/vllm_generation.py:649-667, TRL 1.16): `n=1`,
`repetition_penalty`, `temperature`, `top_p`, `top_k`, `min_p` (None -> 0.0), `max_tokens=max_completion_length`,
`logprobs=0`, then `generation_kwargs` over them; `vllm_structured_outputs_regex` as TRL (:669-675). procrl adds a
per-row seed and the trainer's EOS ids as `stop_token_ids` (unless `generation_kwargs` sets them).

Log-probs (natural log, one per completion token):
- `logprobs` are vLLM's processed log-probs of the sampled tokens (TRL's engine runs with
  `logprobs_mode="processed_logprobs"`, vllm_generation.py:361): after temperature, top-p/top-k, min-p and penalties,
  which is what TRL compares with the policy at the sampling temperature (grpo_trainer.py:2644-2710);
- `completion_logps` are raw: vLLM's own log-probs when the sampler draws from the raw distribution
  (`procrl.generation.sampled_logprobs_are_raw`, the one rule `draws_raw_distribution`), otherwise the completions
  are rescored once with vLLM's prompt log-probs (`VLLMEngine.rescore`, on the engine that has just been synced with
  the policy). Measured on this machine (2 CPU cores shared with other jobs, SmolLM2-135M in fp32, 16 rows of 64
  completion tokens after 43-token prompts, three alternating repeats): `engine.rescore` 17.4 s (median;
  9.6-18.7 s), one no-grad policy forward in chunks of 8 (`procrl.generation.sequence_logps`, LM head on the
  completion positions only) 32.5 s (25.8-34.6 s); the two agree to 4.5e-5. In server mode there is no local engine, so the policy forward rescores (`policy_logps`).
"""

from __future__ import annotations

from trl.extras.profiling import profiling_context
from trl.models import unwrap_model_for_generation

from procrl.generation import (
    SamplingParams,
    derive_seed,
    draws_raw_distribution,
    generate_completions,
    import_vllm,
    render_prompts,
    sampled_logprobs_are_raw,
    sequence_logps,
    vllm_on_cpu,
)
from procrl.trainers.vllm_colocate import colocate_engine, colocated, engine_dtype
from procrl.utils import get_logger, reads_completion_logps

logger = get_logger(__name__)

__all__ = [
    "ProcessRollout",
    "colocate_rollout",
    "needs_completion_logps",
    "policy_logps",
    "resolve_importance_sampling",
    "row_seeds",
    "search_rollout",
    "server_rollout",
    "trl_sampling_fields",
]


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

    With `trainer.use_vllm` it generates on vLLM (`colocate_rollout`, `server_rollout`, `search_rollout`; search
    episodes need colocate mode) with TRL's vLLM sampling settings. There
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


# ----------------------------------------------------------------------------------------------------------------
# The vLLM paths


def trl_sampling_fields(trainer) -> dict:
    """The vLLM `SamplingParams` fields of TRL's colocate path for this trainer (module doc), without a seed."""
    fields = {
        "n": 1,
        "repetition_penalty": trainer.repetition_penalty,
        "temperature": trainer.temperature,
        "top_p": trainer.top_p,
        "top_k": trainer.top_k,
        "min_p": 0.0 if trainer.min_p is None else trainer.min_p,
        "max_tokens": trainer.max_completion_length,
        "logprobs": 0,
    }
    fields.update(trainer.args.generation_kwargs or {})
    regex = trainer.args.vllm_structured_outputs_regex
    structured = fields.get("structured_outputs")
    if regex is not None or isinstance(structured, dict):
        # optional heavy dependency: vLLM (already imported by TRL when use_vllm is on)
        from vllm.sampling_params import StructuredOutputsParams

        fields["structured_outputs"] = StructuredOutputsParams(
            **({"regex": regex} if regex is not None else structured)
        )
    return fields


AUTO_MARK = "_procrl_importance_sampling_auto"  # set on args when auto resolved the field (the trainer refines it)


def resolve_importance_sampling(args, model=None) -> tuple[bool, str]:
    """`vllm_importance_sampling_correction: null` (auto) of `ProcessGRPOConfig`: whether TRL should correct for the
    sampler/policy mismatch, and why. Sets the field on `args` and returns the choice; an explicit true/false is kept.
    `ProcessGRPOConfig.__post_init__` resolves it without the model (an unknown policy dtype counts as a mismatch, so
    a plain `GRPOTrainer` gets TRL's True); `ProcessGRPOTrainer` resolves it again with the model before
    `GRPOTrainer.__init__` copies it (grpo_trainer.py:815).

    When TRL runs its extra no-grad policy forward (the "old" log-probs, trl/trainer/grpo_trainer.py:2642-2657,
    TRL 1.16): (a) `gradient_accumulation_steps % (steps_per_generation * num_iterations) != 0` (samples from an
    earlier policy), or (b) `use_vllm` with `vllm_importance_sampling_correction`. Condition (a) is TRL's own and
    stays. Condition (b) pays off only when vLLM samples from another distribution than the policy the loss sees.
    Auto turns it off where the sampler is the policy: the colocated engine on the CPU build (weights synced before
    every rollout, grpo_trainer.py:2200-2205), fp32 on both sides (no bf16/fp16 autocast, engine dtype float32), and
    sampling that changes nothing but `temperature` (which TRL's loss applies too; a different temperature in
    `generation_kwargs` counts as a change). It is also off under a grammar (`vllm_structured_outputs_regex` or
    `structured_outputs`): TRL's ratio would compare the masked sampler with the unconstrained policy and can mask
    every token (`finish_vllm_setup` warns). Everywhere else (GPU engines, a server, bf16, top-p/top-k/min-p,
    penalties) it is on, as in TRL.
    """
    if args is None:
        return True, "TRL's default config"
    value = getattr(args, "vllm_importance_sampling_correction", None)
    if value is not None and not getattr(args, AUTO_MARK, False):
        return bool(value), "set explicitly"
    kwargs = args.generation_kwargs or {}
    on, reason = True, ""
    if not getattr(args, "use_vllm", False):
        on, reason = False, "no vLLM sampler (the policy generates)"
    elif not colocated(args):
        reason = "vLLM server: a separate engine"
    elif args.vllm_structured_outputs_regex or kwargs.get("structured_outputs"):
        on, reason = False, "a grammar constrains the sampler: the ratio would mask every token"
    elif not vllm_on_cpu():
        reason = "GPU engine: its kernels differ from the training forward"
    elif args.bf16 or args.fp16 or engine_dtype(args, model) != "float32":
        reason = "bf16/fp16 on the policy or the engine, or the policy's dtype not known yet"
    elif not _tempered_only(args):
        reason = "sampling settings beyond the loss's temperature (top-p/top-k/min-p, penalties, min_tokens, ...)"
    else:
        on, reason = False, "the colocated fp32 CPU engine samples from the policy itself"
    if value != on:
        logger.info("vllm_importance_sampling_correction auto -> %s (%s)", on, reason)
    args.vllm_importance_sampling_correction = on
    setattr(args, AUTO_MARK, True)
    return on, reason


def _tempered_only(args) -> bool:
    """Whether TRL's vLLM sampling fields (trl_sampling_fields) differ from the raw distribution only by
    `args.temperature`, the temperature TRL's loss applies."""
    fields = {
        "repetition_penalty": args.repetition_penalty,
        "top_p": args.top_p,
        "top_k": args.top_k,
        "min_p": args.min_p,
        **(args.generation_kwargs or {}),
    }
    if fields.pop("temperature", args.temperature) != args.temperature:
        return False
    return draws_raw_distribution(fields)


def row_seeds(trainer, num_rows: int, call: int) -> list[int]:
    """One seed per row from (args.seed, train/eval, global_step, call within the step, process index, row), so a
    row's sample does not depend on which rows share its batch and no two generation batches share seeds."""
    mode = "train" if trainer.model.training else "eval"
    base = (trainer.args.seed, mode, trainer.state.global_step, call, trainer.accelerator.process_index)
    return [derive_seed(*base, row) for row in range(num_rows)]


def policy_logps(trainer, prompt_ids: list[list[int]], completion_ids: list[list[int]]) -> list[list[float]]:
    """Raw (T = 1) natural-log probabilities `(L_i,)` of each completion under the current policy: one no-grad
    forward (eval mode, batches of `per_device_train_batch_size`, `procrl.generation.sequence_logps`)."""
    tokenizer = getattr(trainer.processing_class, "tokenizer", trainer.processing_class)
    with (
        profiling_context(trainer, "procrl.policy_logps"),
        unwrap_model_for_generation(
            trainer.model_wrapped,
            trainer.accelerator,
            gather_deepspeed3_params=trainer.args.ds3_gather_for_generation,
            gradient_checkpointing_kwargs=trainer.args.gradient_checkpointing_kwargs,
        ) as model,
    ):
        was_training = model.training
        model.eval()
        try:
            return sequence_logps(
                model,
                [list(p) + list(c) for p, c in zip(prompt_ids, completion_ids, strict=True)],
                [len(p) for p in prompt_ids],
                pad_token_id=tokenizer.pad_token_id,
                batch_size=trainer.args.per_device_train_batch_size,
            )
        finally:
            model.train(was_training)


def colocate_rollout(trainer, prompt_ids: list[list[int]], call: int, *, raw_logps: bool = True) -> dict[str, list]:
    """Single-turn rollout on TRL's colocated engine: one completion per row of `prompt_ids` (already repeated
    `num_generations` times by TRL's sampler). Returns `prompt_ids`, `completion_ids` (cut after the first EOS),
    `logprobs` (sampler, processed) and `completion_logps` (raw), lists of `(L_i,)` rows; without `raw_logps`
    `completion_logps` is there only when the sampler's own log-probs are raw (no rescoring pass)."""
    vllm = import_vllm()
    engine = colocate_engine(trainer)
    fields = trl_sampling_fields(trainer)
    fields.setdefault("stop_token_ids", list(engine.eos_ids))
    params = [vllm.SamplingParams(**{"seed": seed, **fields}) for seed in row_seeds(trainer, len(prompt_ids), call)]
    with profiling_context(trainer, "vLLM.generate"):
        sampled = engine.sample(prompt_ids, params)
    completion_ids = [ids for ids, _, _ in sampled]
    logprobs = [logps for _, logps, _ in sampled]
    out = {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": logprobs}
    if sampled_logprobs_are_raw(engine.logprobs_mode, fields):
        out["completion_logps"] = logprobs
    elif raw_logps:
        with profiling_context(trainer, "procrl.rescore"):
            out["completion_logps"] = engine.rescore(prompt_ids, completion_ids)
    return out


def server_rollout(trainer, prompt_ids: list[list[int]], *, raw_logps: bool = True) -> dict[str, list]:
    """Single-turn rollout through a `trl vllm-serve` server: TRL's own request path
    (`trainer.vllm_generation.generate`, which gathers the prompts, sends each distinct prompt once with
    n=num_generations from the main process and hands every rank its slice; vllm_generation.py:581-640), the
    sampled tokens' log-probs (top-1 entry) as `logprobs`, and, with `raw_logps`, `completion_logps` from one policy
    forward."""
    num_generations = trainer.num_generations if trainer.model.training else trainer.num_generations_eval
    _, completion_ids, logprobs, _ = trainer.vllm_generation.generate(
        prompts=prompt_ids,
        images=None,
        num_generations=num_generations,
        profiler=profiling_context(trainer, "vLLM.generate"),
    )
    completion_ids = [list(ids) for ids in completion_ids]
    logprobs = [[lp[0] for lp in row] for row in logprobs]  # as TRL (grpo_trainer.py:1782)
    out = {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": logprobs}
    if raw_logps:
        out["completion_logps"] = policy_logps(trainer, prompt_ids, completion_ids)
    return out


def search_rollout(
    env, trainer, prompts: list, prompt_ids: list[list[int]], call: int, *, raw_logps: bool = True
) -> dict[str, list]:
    """Search episodes on TRL's colocated engine through `env.run_vllm` (`procrl.trainers.search_env`); with
    `raw_logps`, raw log-probs missing from the episodes are rescored once on the engine, environment tokens then set
    to 0.0 (`env_mask`); without it `completion_logps` holds what the episodes have (None rows where missing).

    Raises:
        NotImplementedError: the environment has no `run_vllm` (search episodes then need transformers).
    """
    if not hasattr(env, "run_vllm"):
        raise NotImplementedError(
            f"{type(env).__name__} cannot run search episodes on vLLM yet (no run_vllm); set generation_backend: "
            "transformers for task=search."
        )
    engine = colocate_engine(trainer)
    fields = trl_sampling_fields(trainer)
    sampling = SamplingParams(
        temperature=fields.pop("temperature"),
        top_p=fields.pop("top_p"),
        top_k=max(int(fields.pop("top_k") or 0), 0),
        max_new_tokens=trainer.max_completion_length,
    )
    extra = {k: v for k, v in fields.items() if k not in ("n", "max_tokens", "logprobs", "seed")}
    tokenizer = getattr(trainer.processing_class, "tokenizer", trainer.processing_class)
    episodes = env.run_vllm(
        engine,
        tokenizer,
        prompts,
        prompt_ids,
        sampling,
        max_completion_length=trainer.max_completion_length,
        seed=row_seeds(trainer, 1, call)[0],
        extra=extra,
    )
    raw = episodes.completion_logps
    missing = [i for i in range(len(prompt_ids)) if raw is None or raw[i] is None] if raw_logps else []
    if missing:
        raw = list(raw) if raw is not None else [None] * len(prompt_ids)
        with profiling_context(trainer, "procrl.rescore"):
            scored = engine.rescore([prompt_ids[i] for i in missing], [episodes.completion_ids[i] for i in missing])
        for i, logps in zip(missing, scored, strict=True):
            raw[i] = [lp if m else 0.0 for lp, m in zip(logps, episodes.env_mask[i], strict=True)]
    return {
        "prompt_ids": prompt_ids,
        "completion_ids": episodes.completion_ids,
        "logprobs": episodes.logprobs,
        "completion_logps": raw,
        "env_mask": episodes.env_mask,
        "search_trace": episodes.search_trace,
    }
