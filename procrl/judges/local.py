"""The in-process judge (core layer): a transformers causal LM, greedy, chat template, batched left-padded
`generate` (`procrl.generation`)."""

from __future__ import annotations

import asyncio
import os
import threading
from typing import Any

import torch
from pydantic import BaseModel
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

from procrl.generation import eos_token_ids, generate_completions, render_prompts
from procrl.judges.base import Judge, JudgeResult, _schema_fingerprint, reply_result
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

    Generation runs in a worker thread, one batch at a time; a batch that raises gives "error:<ExceptionName>" for
    its requests. A tokenizer without a chat template gets "role: content" lines and "assistant:".
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
    ):
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
        return f"{type(self).__name__}({self.model_name_or_path!r}, max_new_tokens={self.max_new_tokens}, batch_size={self.batch_size})"

    def _request_payload(self, messages: list[dict], schema: type[BaseModel]) -> dict:
        return {
            "backend": "transformers.generate",
            "model": self.model_name_or_path,
            "messages": messages,
            "temperature": 0.0,
            "max_tokens": self.max_new_tokens,
            "schema": _schema_fingerprint(schema),
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
                texts = await asyncio.to_thread(self._generate, batch)
            except Exception as exc:
                logger.warning("judge %s: generation failed (%s: %s)", self.name, type(exc).__name__, exc)
                for j in range(len(batch)):
                    finish(start + j, JudgeResult(value=None, unscored=f"error:{type(exc).__name__}", attempts=1))
                continue
            for j, text in enumerate(texts):
                finish(start + j, reply_result(text, schemas[start + j], attempts=1))

    def _generate(self, batch: list[list[dict]]) -> list[str]:
        model, tokenizer = self._load()
        if getattr(tokenizer, "chat_template", None):
            prompt_ids = render_prompts(tokenizer, batch)
        else:
            texts = ["".join(f"{m['role']}: {m['content']}\n" for m in msgs) + "assistant:" for msgs in batch]
            prompt_ids = render_prompts(tokenizer, texts)
        eos_ids = eos_token_ids(tokenizer, getattr(model, "generation_config", None))
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos_ids[0]
        config = GenerationConfig(
            do_sample=False, max_new_tokens=self.max_new_tokens, eos_token_id=eos_ids, pad_token_id=pad_id
        )
        with torch.no_grad():
            out = generate_completions(
                model, prompt_ids, config, pad_token_id=pad_id, eos_ids=eos_ids, return_logprobs=False
            )
        return [tokenizer.decode(ids, skip_special_tokens=True) for ids in out.completion_ids]
