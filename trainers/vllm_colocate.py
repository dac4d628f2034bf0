"""vLLM as the GRPO generation engine (issue 14): how `ProcessGRPOConfig`'s engine fields (`procrl.generation.
EngineArguments`) resolve for GRPO, the set-up around TRL's colocated `vllm.LLM`, the CPU weight sync, and the one
`VLLMEngine` that wraps TRL's engine for procrl's rollouts.

TRL 1.16 facts this module depends on (trl/trainer/grpo_trainer.py, trl/generation/vllm_generation.py):
- with `use_vllm` GRPOTrainer.__init__ builds `self.vllm_generation = VLLMGeneration(...)` (grpo_trainer.py:1105-1139)
  after `set_seed(args.seed, device_specific=True)` (:1103); in colocate mode `_init_vllm` sets RANK, LOCAL_RANK,
  WORLD_SIZE and MASTER_ADDR/PORT (vllm_generation.py:330-335) and builds `LLM(model=model.name_or_path, ...,
  distributed_executor_backend="external_launcher", seed=process_index, logprobs_mode="processed_logprobs")`
  (:347-363) without `enforce_eager` or a KV-cache size. vLLM's external launcher then initialises
  torch.distributed itself from those variables (one gloo process on CPU), so a plain `python train_grpo.py` works
  without torchrun or accelerate. Building the LLM with a seed re-seeds torch/random/numpy globally, in-process.
- with a `rollout_func` TRL calls `self.vllm_generation.sync_weights()` whenever `global_step` changed since the last
  sync (grpo_trainer.py:2200-2205), i.e. after every optimizer step, then `rollout_func(prompts, trainer)`;
  `sync_weights` streams `_iter_named_params()` (vllm_generation.py:440-478: names as vLLM expects them, PEFT adapters
  merged, FSDP/ZeRO-3 parameters gathered) into `model.load_weights` (:507-509).

vLLM 0.30 CPU-build facts (vllm/platforms/cpu.py, vllm/v1/worker/cpu_worker.py):
- without an explicit KV-cache size, `gpu_memory_utilization` is a fraction of the machine's RAM that must be free at
  start-up (cpu_worker.py:75-96) and, minus what the process holds, becomes the KV cache (:244-260): inside a trainer
  that fails or takes gigabytes. An explicit `kv_cache_memory_bytes` skips both (:81-84, :227-242);
  `VLLM_CPU_KVCACHE_SPACE=<int GiB>` sets it too and wins over the argument (cpu.py:299-303);
- without `enforce_eager` the CPU build compiles the model with inductor (cpu.py:332-353): measured here on the tiny
  test model, 97 s to build the engine against 39 s eager, with the same generation speed;
- the CPU build repacks linear weights for its GEMM kernels and deletes the checkpoint-shaped parameters
  (vllm/model_executor/layers/linear.py:205-215) that `model.load_weights` (TRL's colocate sync) writes into;
  `procrl.generation.VLLMEngine.load_weights` goes through `reload_weights`, which re-runs the repacking;
- `dtype="auto"` downcasts an fp32 checkpoint to the platform's half type (vllm/config/model.py:2294-2296): TRL's
  engine would sample in bf16 from an fp32 policy (measured: raw log-probs 2e-3 off on the tiny test model, 1e-6
  with dtype float32), hence `vllm_dtype`.
"""

from __future__ import annotations

import contextlib
import functools
import os

import torch
import trl.generation.vllm_generation as trl_vllm_generation
from accelerate.utils import is_peft_model, set_seed

from procrl.generation import VLLMEngine, auto_engine, import_vllm, vllm_on_cpu
from procrl.utils import get_logger

logger = get_logger(__name__)

__all__ = [
    "colocate_engine",
    "colocated",
    "engine_dtype",
    "finish_vllm_setup",
    "resolve_generation_backend",
    "trl_llm_overrides",
]

ENGINE_ATTRIBUTE = "_procrl_vllm_engine"  # where `colocate_engine` keeps the trainer's one VLLMEngine


def resolve_generation_backend(args) -> None:
    """Check `ProcessGRPOConfig`'s engine fields (`EngineArguments.engine_problems`), resolve `generation_backend`
    ("auto" -> "vllm" or "transformers") and set `use_vllm` from it. "auto" is "vllm" when `use_vllm: true`, else
    `procrl.generation.auto_engine` (the one rule, with the `PROCRL_GENERATION_BACKEND` override) for the training
    device: "cpu" when `use_cpu` (or ACCELERATE_USE_CPU) is on, else the platform's. Called from
    `ProcessGRPOConfig.__post_init__`.

    Raises:
        ValueError: a bad engine field, `use_vllm: true` with `generation_backend: transformers`, or transformers
            names in `generation_kwargs` for vLLM (each message says how to fix).
        ImportError: `generation_backend: vllm` and vLLM cannot be imported (the message says how to install it).
    """
    problems = args.engine_problems()
    if problems:
        raise ValueError("; ".join(problems))
    backend = args.generation_backend
    if args.use_vllm and backend == "transformers":
        raise ValueError(
            "use_vllm: true conflicts with generation_backend: transformers. Set generation_backend: vllm (or "
            "auto), or drop use_vllm: generation_backend alone decides."
        )
    if backend == "auto":
        use_cpu = bool(args.use_cpu) or os.environ.get("ACCELERATE_USE_CPU", "").lower() in ("1", "true", "yes")
        backend, reason = ("vllm", "use_vllm: true") if args.use_vllm else auto_engine("cpu" if use_cpu else None)
        logger.info("generation_backend auto -> %s (%s)", backend, reason)
    elif backend == "vllm":
        import_vllm()  # raises ImportError with the reason and the fix
    args.generation_backend = backend
    args.use_vllm = backend == "vllm"
    # TRL hands generation_kwargs to vllm.SamplingParams on this path (trl/generation/vllm_generation.py:672),
    # which rejects transformers' names only at the first rollout: say so now.
    hf_names = sorted(set(args.generation_kwargs or {}) & set(HF_ONLY_GENERATION_KWARGS)) if args.use_vllm else []
    if hf_names:
        renames = ", ".join(f"{name} -> {HF_ONLY_GENERATION_KWARGS[name]}" for name in hf_names)
        raise ValueError(
            f"generation_kwargs {hf_names} are transformers names, but generation_backend: vllm passes "
            f"generation_kwargs to vllm.SamplingParams; use vLLM's ({renames}) or generation_backend: transformers."
        )


HF_ONLY_GENERATION_KWARGS = {
    "min_new_tokens": "min_tokens",
    "max_new_tokens": "max_tokens (set max_completion_length instead)",
    "do_sample": "temperature (0 = greedy)",
    "num_beams": "no beam search in TRL's vLLM path",
    "no_repeat_ngram_size": "no vLLM equivalent",
}


def colocated(args) -> bool:
    """Whether `args` put TRL's vLLM engine in this process (`use_vllm` with `vllm_mode: colocate`)."""
    return bool(getattr(args, "use_vllm", False)) and getattr(args, "vllm_mode", "colocate") == "colocate"


@contextlib.contextmanager
def trl_llm_overrides(args, model=None):
    """While TRL builds its colocated `vllm.LLM` (inside `GRPOTrainer.__init__`), add to its arguments the engine
    dtype (`args.vllm_dtype`; "auto" on the CPU build = the dtype of `model`'s parameters, since vLLM's own "auto"
    downcasts an fp32 checkpoint to the platform's half type, vllm/config/model.py:2294-2296) and, on the CPU build,
    `enforce_eager=True` and an explicit KV cache of `args.vllm_kv_cache_gib` GiB (module doc: no inductor compile, no
    `gpu_memory_utilization` RAM check). TRL's `LLM` name is restored on exit. Also makes vLLM run in-process
    (`import_vllm`). A no-op without `use_vllm` and in server mode."""
    if not colocated(args):
        yield
        return
    import_vllm()  # VLLM_ENABLE_V1_MULTIPROCESSING=0: the engine core lives in this (trainer) process
    on_cpu = vllm_on_cpu()
    extra = {}
    dtype = engine_dtype(args, model) if on_cpu else getattr(args, "vllm_dtype", "auto")
    if dtype != "auto":
        extra["dtype"] = dtype
    if on_cpu:
        extra["enforce_eager"] = True
        if os.environ.get("VLLM_CPU_KVCACHE_SPACE", "") == "":
            extra["kv_cache_memory_bytes"] = int(float(getattr(args, "vllm_kv_cache_gib", 1.0)) * 2**30)
        else:
            logger.info("VLLM_CPU_KVCACHE_SPACE=%s GiB sizes the KV cache", os.environ["VLLM_CPU_KVCACHE_SPACE"])
    if not extra:
        yield
        return
    original = trl_vllm_generation.LLM

    @functools.wraps(original)
    def build(*llm_args, **llm_kwargs):
        return original(*llm_args, **{**llm_kwargs, **extra})

    trl_vllm_generation.LLM = build
    try:
        yield
    finally:
        trl_vllm_generation.LLM = original


def engine_dtype(args, model=None) -> str:
    """The colocated CPU engine's dtype: `args.vllm_dtype` when set; "auto" = "bfloat16" when the policy trains in
    bf16 autocast (`args.bf16`, resolved), else the dtype of `model`'s parameters ("auto" without a model)."""
    dtype = getattr(args, "vllm_dtype", "auto")
    if dtype != "auto":
        return dtype
    if getattr(args, "bf16", False) is True:
        return "bfloat16"
    if isinstance(model, torch.nn.Module):
        return str(next(model.parameters()).dtype).removeprefix("torch.")
    return "auto"


def finish_vllm_setup(trainer) -> None:
    """After `GRPOTrainer.__init__` with `use_vllm`: re-seed as TRL did before building the LLM (grpo_trainer.py:1103;
    building it re-seeded the global RNG with the process index), and on the CPU build in colocate mode replace
    `trainer.vllm_generation.sync_weights` (this instance only) by a sync through `VLLMEngine.load_weights`, fed by
    TRL's `_iter_named_params()`. A no-op without `use_vllm`."""
    if not trainer.use_vllm:
        return
    set_seed(trainer.args.seed, device_specific=True)
    if trainer.args.vllm_structured_outputs_regex and trainer.args.vllm_importance_sampling_correction:
        # The sampler's log-probs are over the grammar-restricted distribution, the policy's are not: TRL's ratio
        # exp(policy - sampler) then collapses (measured: 0 for every token of a tiny model, so no gradient).
        logger.warning(
            "vllm_structured_outputs_regex with vllm_importance_sampling_correction: the importance ratios compare "
            "a constrained sampler with an unconstrained policy and can mask every token; set "
            "vllm_importance_sampling_correction: false when the grammar constrains the completions."
        )
    if trainer.vllm_mode == "colocate" and vllm_on_cpu():
        trainer.vllm_generation.sync_weights = functools.partial(_sync_through_engine, trainer)


def _sync_through_engine(trainer) -> None:
    """CPU colocate weight sync: every parameter, under vLLM's names, into the engine (`reload_weights`). A tied LM
    head, which `_iter_named_params` lists once (as the input embedding), is completed by `VLLMEngine.load_weights`
    itself."""
    generation = trainer.vllm_generation
    peft = is_peft_model(generation.model)
    # private TRL 1.16 API (tests/trainers/test_grpo_vllm.py spies on it). With PEFT the generator merges the
    # adapters, yields the live tensors and unmerges them in place afterwards, so each is copied while merged.
    named = [(n, t.detach().clone() if peft else t) for n, t in generation._iter_named_params()]
    colocate_engine(trainer).load_weights(named)


def colocate_engine(trainer) -> VLLMEngine:
    """The trainer's colocated vLLM engine (`trainer.vllm_generation.llm`, built by TRL) as a `VLLMEngine`, wrapped
    once and kept on the trainer; its EOS ids are the trainer's (`trainer.eos_token_ids`), so completions end where
    the transformers path ends them.

    Raises:
        ValueError: the trainer has no colocated engine (`use_vllm` off, or `vllm_mode: server`).
    """
    engine = getattr(trainer, ENGINE_ATTRIBUTE, None)
    if engine is not None:
        return engine
    if not getattr(trainer, "use_vllm", False) or getattr(trainer, "vllm_mode", None) != "colocate":
        raise ValueError("colocate_engine needs a trainer with use_vllm and vllm_mode: colocate.")
    tokenizer = getattr(trainer.processing_class, "tokenizer", trainer.processing_class)
    llm = trainer.vllm_generation.llm
    model_id = f"vllm-colocate:{llm.llm_engine.model_config.model}:{trainer.accelerator.process_index}"
    engine = VLLMEngine.from_llm(llm, tokenizer, model_id=model_id)
    engine.eos_ids = list(trainer.eos_token_ids)
    setattr(trainer, ENGINE_ATTRIBUTE, engine)
    return engine
