"""The in-process judge (core layer): a transformers causal LM, greedy, chat template, batched left-padded
`generate`, each reply decoded under the JSON grammar of its schema (`procrl.judges.constrained`, llguidance) with
the top log-probabilities of every generated position kept for choice probabilities (`procrl.judges.choices`)."""

from __future__ import annotations

import asyncio
import os
import threading
from typing import Any

import torch
from pydantic import BaseModel
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig, LogitsProcessorList

from procrl.generation import completion_lengths, eos_token_ids, left_pad, render_prompts
from procrl.judges.base import Judge, JudgeResult, _schema_fingerprint, reply_result
from procrl.judges.choices import TokenAlternatives
from procrl.judges.constrained import JSON_OPTIONS, JSONSchemaLogitsProcessor, llg_tokenizer, token_alternatives
from procrl.judges.parse import T
from procrl.models import resolve_model
from procrl.utils import get_logger

logger = get_logger(__name__)

__all__ = ["TransformersJudge"]


class TransformersJudge(Judge):
    """A judge run in this process with transformers: chat template, greedy decoding, batches of `batch_size`.

    Args:
        model_name_or_path: "default" (the embedded SmolLM2-135M-Instruct, `procrl.models.resolve_model`), a hub id
            or a local directory. Loaded on first use.
        max_new_tokens: reply token limit.
        batch_size: requests generated together (left-padded).
        device: "cpu", "cuda", ...; default: CUDA when available, else CPU.
        cache_dir: on-disk cache directory; None disables caching.
        model, tokenizer: an already-loaded causal LM and tokenizer to use instead of loading (tests, or the live
            policy). The cache key then uses `model_name_or_path` as the model id: give it a name that identifies
            the weights, or no cache_dir.
        constrained: decode each reply under the JSON grammar of its request's schema (`JSONSchemaLogitsProcessor`:
            compact separators, no free whitespace, no keys outside the schema), so a reply that ends within
            `max_new_tokens` is schema-valid JSON; False: free generation, parsed and extracted as before.
        top_logprobs: log-probabilities kept per generated position (top-k of the processed, i.e. masked, scores;
            natural log, temperature 1), from which `JudgeResult.probs` is read; 0: none.

    Generation runs in a worker thread, one batch at a time; a batch that raises gives "error:<ExceptionName>" for
    its requests. A tokenizer without a chat template gets "role: content" lines and "assistant:". The constrained
    path and the probabilities need a fast (Rust-backed) tokenizer (llguidance): with a slow one, a constrained
    batch is unscored "error:ValueError" and an unconstrained one gets no probabilities. A reply cut by
    `max_new_tokens`, or whose grammar matcher failed (logged), is parsed as it stands: a typed failure.
    """

    def __init__(
        self,
        model_name_or_path: str = "default",
        *,
        max_new_tokens: int = 512,
        batch_size: int = 8,
        device: str | None = None,
        cache_dir: str | os.PathLike | None = None,
        model: Any = None,
        tokenizer: Any = None,
        constrained: bool = True,
        top_logprobs: int = 5,
    ):
        if top_logprobs < 0:
            raise ValueError(f"TransformersJudge: top_logprobs must be >= 0, got {top_logprobs}")
        if max_new_tokens < 1 or batch_size < 1:
            raise ValueError(
                f"TransformersJudge: need max_new_tokens >= 1 and batch_size >= 1, got {max_new_tokens}, {batch_size}"
            )
        if (model is None) != (tokenizer is None):
            raise ValueError("TransformersJudge: pass both model and tokenizer, or neither")
        super().__init__(name=model_name_or_path, cache_dir=cache_dir)
        self.model_name_or_path = model_name_or_path
        self.max_new_tokens = max_new_tokens
        self.batch_size = batch_size
        self.device = device
        self.constrained = bool(constrained)
        self.top_logprobs = int(top_logprobs)
        self._model = model
        self._tokenizer = tokenizer
        self._load_lock = threading.Lock()

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        del state["_load_lock"]
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._load_lock = threading.Lock()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.model_name_or_path!r}, max_new_tokens={self.max_new_tokens}, "
            f"batch_size={self.batch_size}, constrained={self.constrained}, top_logprobs={self.top_logprobs})"
        )

    def _request_payload(self, messages: list[dict], schema: type[BaseModel]) -> dict:
        return {
            "backend": "transformers.generate",
            "model": self.model_name_or_path,
            "messages": messages,
            "temperature": 0.0,
            "max_tokens": self.max_new_tokens,
            "schema": _schema_fingerprint(schema),
            "constrained": self.constrained,
            "grammar": {"library": "llguidance", "closed_objects": True, **JSON_OPTIONS} if self.constrained else None,
            "top_logprobs": self.top_logprobs,
        }

    def _load(self) -> tuple[Any, Any]:
        with self._load_lock:
            if self._model is None:
                path = resolve_model(self.model_name_or_path)
                device = self.device or ("cuda" if torch.cuda.is_available() else "cpu")
                logger.info("loading judge model %s on %s", path, device)
                self._tokenizer = AutoTokenizer.from_pretrained(path)
                self._model = AutoModelForCausalLM.from_pretrained(path).to(device).eval()
            return self._model, self._tokenizer

    async def _judge_uncached(self, requests: list[list[dict]], schemas: list[type[T]], finish) -> None:
        for start in range(0, len(requests), self.batch_size):
            batch = requests[start : start + self.batch_size]
            try:
                replies = await asyncio.to_thread(self._generate, batch, schemas[start : start + len(batch)])
            except Exception as exc:
                logger.warning("judge %s: generation failed (%s: %s)", self.name, type(exc).__name__, exc)
                for j in range(len(batch)):
                    finish(start + j, JudgeResult(value=None, unscored=f"error:{type(exc).__name__}", attempts=1))
                continue
            for j, (text, tokens) in enumerate(replies):
                finish(start + j, reply_result(text, schemas[start + j], attempts=1, tokens=tokens))

    def _generate(
        self, batch: list[list[dict]], schemas: list[type[BaseModel]]
    ) -> list[tuple[str, TokenAlternatives | None]]:
        """Greedy replies of one batch: (text, per-token alternatives or None) per request."""
        model, tokenizer = self._load()
        if getattr(tokenizer, "chat_template", None):
            prompt_ids = render_prompts(tokenizer, batch)
        else:
            texts = ["".join(f"{m['role']}: {m['content']}\n" for m in msgs) + "assistant:" for msgs in batch]
            prompt_ids = render_prompts(tokenizer, texts)
        eos_ids = eos_token_ids(tokenizer, getattr(model, "generation_config", None))
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos_ids[0]
        top_k = self.top_logprobs
        if top_k and not self.constrained:
            try:
                llg_tokenizer(tokenizer, eos_ids)
            except ValueError as exc:  # a slow tokenizer: free replies without probabilities
                logger.warning("judge %s: no choice probabilities (%s)", self.name, exc)
                top_k = 0
        processor = None
        if self.constrained or top_k:  # a slow tokenizer raises ValueError here when constrained: a typed error
            processor = JSONSchemaLogitsProcessor(
                tokenizer, schemas if self.constrained else None, eos_ids, top_k=top_k, batch_size=len(batch)
            )
        lltok = llg_tokenizer(tokenizer, eos_ids) if top_k else None
        config = GenerationConfig(
            do_sample=False,
            max_new_tokens=self.max_new_tokens,
            eos_token_id=eos_ids,
            pad_token_id=pad_id,
            return_dict_in_generate=True,
        )
        device = next(model.parameters()).device
        input_ids, attention_mask = left_pad(prompt_ids, pad_id)
        extra = {"logits_processor": LogitsProcessorList([processor])} if processor is not None else {}
        with torch.no_grad():
            out = model.generate(
                input_ids=input_ids.to(device),
                attention_mask=attention_mask.to(device),
                generation_config=config,
                **extra,
            )
        sequences = out.sequences[:, input_ids.shape[1] :].cpu()  # (B, T_new)
        lengths = completion_lengths(sequences, eos_ids)
        replies = []
        for row, length in enumerate(lengths):
            ids = sequences[row, :length].tolist()
            text = tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)
            tokens = None
            if top_k and processor is not None:
                tokens = token_alternatives(ids, processor.top_logprobs, row, lltok)
                if tokens is not None and "".join(t for t, _ in tokens) != text:
                    logger.warning("judge %s: token texts do not concatenate to the reply; no probabilities", self.name)
                    tokens = None
            replies.append((text, tokens))
        return replies
