"""`TransformersEngine`: batched transformers `generate` as a rollout engine (core layer).

Left padding and the KV cache, reusing `procrl.generation.generate_completions`; prompts sorted by length into
batches to cut padding. Determinism: each batch is sampled after `torch.manual_seed` of a seed derived from (seed,
batch index), inside `torch.random.fork_rng` so the caller's RNG is untouched, and batches are a fixed function of
the rows. The same machine, library versions, dtype, batch size and thread count therefore reproduce a call exactly;
another CPU model (e.g. AMX or AVX-512 matmul kernels) or GPU rounds the logits differently (log-probs differ in the
last bits and, rarely, a token where two candidates were nearly tied).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

from procrl.generation.hf import eos_token_ids, generate_completions
from procrl.generation.runtime import default_device, derive_seed, resolve_dtype, weights_fingerprint
from procrl.generation.sampling import Rollout, RolloutEngine, SamplingParams, cut_completion, stop_criteria
from procrl.models import resolve_model

__all__ = ["TransformersEngine"]


class TransformersEngine(RolloutEngine):
    """Batched transformers generation: left padding, KV cache, log-probs from the generation's own raw logits.

    Prompts are sorted by length (stable) into batches of `batch_size` rows, which cuts padding; results come back in
    input order. Sampling is controlled by `SamplingParams` only: the model's own `generation_config` sampling
    defaults (repetition penalty, typical-p, ...) are overridden with neutral values.

    Args:
        model_name_or_path: "default" (the embedded SmolLM2-135M-Instruct), a local directory or a hub id.
        device: "cpu", "cuda", "cuda:1", ...; default: this process's accelerator (accelerate's
            `PartialState().device`) when CUDA is available, else "cpu".
        dtype: "auto" (bfloat16 on a GPU that supports it, else float16 on GPU, float32 on CPU), "float32",
            "bfloat16" or "float16".
        batch_size: rows per `generate` call (part of the cache key: it fixes which rows share the sampler's RNG).
        model / tokenizer: already-built objects (tests); the model is used as is (not moved, not cast).
        model_id: override the identity used in cache keys (default: derived from the path, dtype and weights).

    Raises:
        ValueError: batch_size < 1, or neither the tokenizer nor the generation config defines an EOS token.
    """

    def __init__(
        self,
        model_name_or_path: str = "default",
        *,
        device: str | None = None,
        dtype: str = "auto",
        batch_size: int = 16,
        model=None,
        tokenizer=None,
        model_id: str | None = None,
    ):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}.")
        self.batch_size = int(batch_size)
        if model is None:
            source = str(resolve_model(model_name_or_path))
            self.device = torch.device(device) if device is not None else default_device()
            model = AutoModelForCausalLM.from_pretrained(source, dtype=resolve_dtype(dtype, self.device))
            model = model.to(self.device).eval()
            # Sampling is governed by SamplingParams alone: drop the checkpoint's sampling defaults (min_p, ...),
            # which generate() would otherwise fill in; keep its special token ids.
            gc = model.generation_config
            model.generation_config = GenerationConfig(
                bos_token_id=gc.bos_token_id, eos_token_id=gc.eos_token_id, pad_token_id=gc.pad_token_id
            )
            fingerprint = weights_fingerprint(source)
        else:
            source = model_name_or_path if model_name_or_path != "default" else model.name_or_path or "in-memory"
            self.device = torch.device(device) if device is not None else next(model.parameters()).device
            fingerprint = weights_fingerprint(None, model)
        self.model = model
        self.tokenizer = tokenizer if tokenizer is not None else AutoTokenizer.from_pretrained(source)
        self.eos_ids = eos_token_ids(self.tokenizer, getattr(model, "generation_config", None))
        if not self.eos_ids:
            raise ValueError(f"{source}: neither the tokenizer nor the generation config defines an EOS token.")
        self.pad_token_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.eos_ids[0]
        dtype_name = str(next(model.parameters()).dtype).removeprefix("torch.")
        self.model_id = model_id or f"transformers:{source}:{dtype_name}:{fingerprint}"

    def cache_key(self) -> str:
        # The device type (not its index: ranks on cuda:0 and cuda:1 must agree) and the batch size change samples.
        return f"{self.model_id}|device={self.device.type}|batch_size={self.batch_size}"

    def generate(self, prompt_ids: Sequence[Sequence[int]], params: SamplingParams, *, seed: int) -> list[Rollout]:
        """One rollout per row, in input order (see `RolloutEngine.generate`).

        Raises:
            ValueError: a row without token ids.
        """
        rows = [[int(t) for t in row] for row in prompt_ids]
        if any(not row for row in rows):
            raise ValueError("Every prompt row needs at least one token id.")
        config = self._generation_config(params)
        order = sorted(range(len(rows)), key=lambda i: (len(rows[i]), i))
        results: list[Rollout | None] = [None] * len(rows)
        fork_devices = [self.device] if self.device.type == "cuda" else []
        for batch_index, start in enumerate(range(0, len(order), self.batch_size)):
            indices = order[start : start + self.batch_size]
            batch = [rows[i] for i in indices]
            criteria = stop_criteria(self.tokenizer, params.stop, max(map(len, batch))) if params.stop else None
            with torch.random.fork_rng(devices=fork_devices):
                torch.manual_seed(derive_seed(seed, batch_index))
                out = generate_completions(
                    self.model,
                    batch,
                    config,
                    pad_token_id=self.pad_token_id,
                    eos_ids=self.eos_ids,
                    device=self.device,
                    stopping_criteria=criteria,
                )
            for j, i in enumerate(indices):
                ids, logps = out.completion_ids[j], out.completion_logps[j]
                cut, reason = cut_completion(ids, eos_ids=self.eos_ids, stop=params.stop, tokenizer=self.tokenizer)
                results[i] = Rollout(
                    token_ids=ids[:cut],
                    text=self.tokenizer.decode(ids[:cut], skip_special_tokens=True),
                    logprobs=logps[:cut],
                    finish_reason=reason,
                )
        return results  # type: ignore[return-value]

    def _generation_config(self, params: SamplingParams) -> GenerationConfig:
        # Greedy: the warpers are not applied (transformers/generation/utils.py, _get_logits_processor adds them only
        # when sampling), so temperature/top-p/top-k stay unset (setting them only triggers "not valid" warnings).
        sampling = (
            {"do_sample": False}
            if params.greedy
            else {
                "do_sample": True,
                "temperature": params.temperature,
                "top_p": params.top_p,
                "top_k": params.top_k,  # 0 = no TopKLogitsWarper (transformers/generation/utils.py, _get_logits_processor)
            }
        )
        return GenerationConfig(
            max_new_tokens=params.max_new_tokens,
            min_new_tokens=params.min_new_tokens or None,
            eos_token_id=list(self.eos_ids),
            pad_token_id=self.pad_token_id,
            # Explicit neutral values: a None would be filled from the model's generation_config, then from
            # transformers' global defaults (top_k = 50!) in GenerationMixin._prepare_generation_config.
            repetition_penalty=1.0,
            typical_p=1.0,
            epsilon_cutoff=0.0,
            eta_cutoff=0.0,
            no_repeat_ngram_size=0,
            **sampling,
        )
