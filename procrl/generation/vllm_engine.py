"""`VLLMEngine`: vLLM's offline `LLM` as a rollout engine (core layer; vLLM is optional and imported lazily)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import AutoTokenizer, GenerationConfig

from procrl.generation.hf import eos_token_ids
from procrl.generation.runtime import default_state, derive_seed, resolve_dtype, weights_fingerprint
from procrl.generation.sampling import Rollout, RolloutEngine, SamplingParams
from procrl.generation.stopping import cut_completion
from procrl.models import resolve_model

__all__ = ["VLLMEngine"]


class VLLMEngine(RolloutEngine):
    """vLLM offline generation with the same interface (requires `pip install vllm` and a GPU).

    Each row gets its own seed, derived from (seed, row index), so a row's sample does not depend on which rows share
    its batch (up to GPU numerics). Log-probs: vLLM's sampled-token log-probs equal the raw distribution only when the
    sampler draws from it (T = 1, top_p = 1, top_k = 0, min_new_tokens = 0); otherwise the completions are rescored with one extra
    prompt-log-prob pass (`prompt_logprobs=0` on prompt + completion, temperature 1), as DESIGN §3 requires.
    Stop strings are applied by vLLM (`include_stop_str_in_output=True`), then `cut_completion` recomputes the end
    and the text from the token ids, so both engines follow one rule. With several accelerate processes each rank
    runs its own engine on its own GPU (`distributed_executor_backend="external_launcher"`, as TRL's colocate mode).

    Args:
        model_name_or_path: "default", a local directory or a hub id.
        dtype: "auto" (bfloat16 when supported, else float16), "float32", "bfloat16" or "float16".
        batch_size: accepted so one config drives both engines, and ignored: all rows `generate` receives (one
            `run_rollouts` shard) go to vLLM in one call and vLLM schedules its own batches. Per-row seeds make
            results independent of that, so with vLLM pass a large `shard_size` (e.g. 1024) to keep the GPU busy.
        tokenizer: optional tokenizer object (default: loaded from the model path).
        **llm_kwargs: passed to `vllm.LLM` (`gpu_memory_utilization`, `max_model_len`, `tensor_parallel_size`, ...).

    Raises:
        ImportError: vLLM is not installed (the message says how to install it or which engine to use instead).
        ValueError: a device that is not a CUDA GPU.
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
        **llm_kwargs,
    ):
        try:
            # optional heavy dependency: only this engine needs vLLM (pip install vllm), and it needs a GPU
            from vllm import LLM
        except ImportError as err:
            raise ImportError("VLLMEngine needs vLLM: pip install vllm (or use engine='transformers').") from err

        if device is not None and not str(device).startswith("cuda"):
            raise ValueError(f"VLLMEngine runs on CUDA GPUs only, got device={device!r}; use engine='transformers'.")
        source = str(resolve_model(model_name_or_path))
        torch_dtype = resolve_dtype(dtype, torch.device("cuda"))
        self.tokenizer = tokenizer if tokenizer is not None else AutoTokenizer.from_pretrained(source)
        try:
            generation_config = GenerationConfig.from_pretrained(source)
        except OSError:
            generation_config = None
        self.eos_ids = eos_token_ids(self.tokenizer, generation_config)
        llm_kwargs.setdefault("seed", 0)
        llm_kwargs.setdefault("generation_config", "vllm")  # sampling comes from SamplingParams, not the checkpoint
        if default_state().num_processes > 1:
            llm_kwargs.setdefault("distributed_executor_backend", "external_launcher")
        self.llm = LLM(model=source, dtype=str(torch_dtype).removeprefix("torch."), **llm_kwargs)
        self.model_id = (
            model_id or f"vllm:{source}:{str(torch_dtype).removeprefix('torch.')}:{weights_fingerprint(source)}"
        )

    def generate(self, prompt_ids: Sequence[Sequence[int]], params: SamplingParams, *, seed: int) -> list[Rollout]:
        """One rollout per row, in input order (see `RolloutEngine.generate` and the class docstring)."""
        # optional heavy dependency: vLLM is present whenever this engine was built (see __init__)
        from vllm import SamplingParams as VSamplingParams

        rows = [[int(t) for t in row] for row in prompt_ids]
        # Sampled-token log-probs are raw only if nothing reshapes the distribution (min_tokens masks EOS, which
        # renormalises vLLM's "processed" log-probs); otherwise rescore.
        raw = params.samples_raw_distribution and params.min_new_tokens == 0
        sampling = [
            VSamplingParams(
                n=1,
                temperature=params.temperature,
                top_p=params.top_p,
                top_k=params.top_k if params.top_k > 0 else -1,  # -1 = off in every vLLM version
                max_tokens=params.max_new_tokens,
                min_tokens=params.min_new_tokens,
                stop=list(params.stop) or None,
                include_stop_str_in_output=True,
                stop_token_ids=list(self.eos_ids),
                logprobs=0 if raw else None,
                seed=derive_seed(seed, j),
            )
            for j in range(len(rows))
        ]
        outputs = self.llm.generate([{"prompt_token_ids": r} for r in rows], sampling, use_tqdm=False)

        cuts, all_ids, all_logps = [], [], []
        for out in outputs:
            completion = out.outputs[0]
            ids = list(completion.token_ids)
            cut, reason = cut_completion(ids, eos_ids=self.eos_ids, stop=params.stop, tokenizer=self.tokenizer)
            cuts.append((cut, reason))
            all_ids.append(ids[:cut])
            all_logps.append(
                [lp[t].logprob for lp, t in zip(completion.logprobs[:cut], ids[:cut], strict=True)] if raw else None
            )
        if not raw:
            all_logps = self._rescore(rows, all_ids)
        return [
            Rollout(ids, self.tokenizer.decode(ids, skip_special_tokens=True), logps, reason)
            for ids, logps, (_, reason) in zip(all_ids, all_logps, cuts, strict=True)
        ]

    def _rescore(self, rows: list[list[int]], completions: list[list[int]]) -> list[list[float]]:
        """Raw (T = 1) log-probs of each completion given its prompt: vLLM's prompt log-probs of prompt + completion
        (entry j scores token j given tokens < j; entry 0 is None)."""
        # optional heavy dependency: vLLM is present whenever this engine was built (see __init__)
        from vllm import SamplingParams as VSamplingParams

        scored = [i for i, c in enumerate(completions) if c]
        result: list[list[float]] = [[] for _ in completions]
        params = VSamplingParams(max_tokens=1, temperature=1.0, top_p=1.0, top_k=-1, prompt_logprobs=0)
        prompts = [{"prompt_token_ids": rows[i] + completions[i]} for i in scored]
        for i, out in zip(scored, self.llm.generate(prompts, params, use_tqdm=False), strict=True):
            offset = len(rows[i])
            result[i] = [out.prompt_logprobs[offset + k][token].logprob for k, token in enumerate(completions[i])]
        return result
