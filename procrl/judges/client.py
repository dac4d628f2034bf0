"""The OpenAI-compatible client judge (core layer): vLLM, llama.cpp, `transformers serve` or a hosted API.

`OpenAICompatibleJudge` calls `/v1/chat/completions` with the `openai` package's async client: temperature 0,
`response_format={"type": "json_object"}` (`transformers serve` 5.24 accepts and ignores it:
transformers/cli/serving/chat_completion.py `UNUSED_CHAT_COMPLETION_FIELDS`), bounded concurrency (an
`asyncio.Semaphore` per call), retries with exponential backoff and jitter on timeouts, connection errors, malformed
response bodies, 429 and 5xx (never on other 4xx); the client's own retries are off so that `attempts` counts every
HTTP request. The API key comes only from an environment variable (default `PROCRL_JUDGE_API_KEY`; "EMPTY" when
unset, which local servers accept) and is never logged, cached or shown in a repr.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
from typing import Any

import openai
from pydantic import BaseModel

from procrl.judges.base import Judge, JudgeResult, _schema_fingerprint, reply_result
from procrl.judges.parse import T
from procrl.utils import get_logger

logger = get_logger(__name__)

DEFAULT_API_KEY_ENV = "PROCRL_JUDGE_API_KEY"
# Sent when the variable is unset: local servers (vLLM, llama.cpp, transformers serve) accept any key.
_DUMMY_API_KEY = "EMPTY"
# HTTP statuses worth retrying: rate limit and server errors. Other 4xx mean the request itself is wrong.
_RETRY_STATUS = 429
# Cap on a server's Retry-After (seconds), so a bad header cannot stall a training step.
_MAX_RETRY_AFTER_S = 30.0

__all__ = ["DEFAULT_API_KEY_ENV", "OpenAICompatibleJudge", "list_server_models"]


class OpenAICompatibleJudge(Judge):
    """A judge behind any OpenAI-compatible `/v1/chat/completions` endpoint (vLLM, llama.cpp, transformers serve,
    hosted APIs), called with the `openai` package's async client.

    Args:
        base_url: the API root, e.g. "http://127.0.0.1:8000/v1".
        model: the model id the server expects (`transformers serve` wants the model directory it serves).
        api_key_env: name of the environment variable holding the API key (read at each call, never stored);
            "EMPTY" when unset.
        max_concurrency: requests in flight at once (per `judge` call).
        timeout_s: seconds one HTTP request may take, response included.
        max_retries: retries after the first attempt on timeouts, connection errors, malformed bodies, 429 and 5xx.
        backoff_s: the wait before retry k (1-based) is `backoff_s * 2**(k-1)` plus up to 10% jitter, or the
            server's Retry-After (capped at 30 s) when that is longer.
        max_tokens: reply token limit (`max_tokens` in the request).
        cache_dir: on-disk cache directory; None disables caching.
        json_mode: send `response_format={"type": "json_object"}`.
        extra_body: extra JSON fields merged into the request body (server-specific options); part of the cache key.

    Raises:
        ValueError: a non-positive limit or an empty base URL / model.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key_env: str = DEFAULT_API_KEY_ENV,
        max_concurrency: int = 8,
        timeout_s: float = 60.0,
        max_retries: int = 3,
        backoff_s: float = 0.5,
        max_tokens: int = 512,
        cache_dir: str | os.PathLike | None = None,
        json_mode: bool = True,
        extra_body: dict | None = None,
    ):
        if not base_url or not model:
            raise ValueError(f"OpenAICompatibleJudge needs a base_url and a model id, got {base_url!r} and {model!r}")
        if max_concurrency < 1 or timeout_s <= 0 or max_retries < 0 or backoff_s < 0 or max_tokens < 1:
            raise ValueError(
                "OpenAICompatibleJudge: need max_concurrency >= 1, timeout_s > 0, max_retries >= 0, backoff_s >= 0 "
                f"and max_tokens >= 1; got {max_concurrency}, {timeout_s}, {max_retries}, {backoff_s}, {max_tokens}"
            )
        super().__init__(name=model, cache_dir=cache_dir)
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key_env = api_key_env
        self.max_concurrency = max_concurrency
        self.timeout_s = float(timeout_s)
        self.max_retries = max_retries
        self.backoff_s = float(backoff_s)
        self.max_tokens = max_tokens
        self.json_mode = json_mode
        self.extra_body = dict(extra_body) if extra_body else None
        self._rng = random.Random()

    def _api_key(self) -> str:
        # Read at each call and never stored: a pickled or printed judge cannot leak it.
        return os.environ.get(self.api_key_env) or _DUMMY_API_KEY

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(base_url={self.base_url!r}, model={self.model!r}, api_key_env={self.api_key_env!r}, "
            f"max_concurrency={self.max_concurrency}, timeout_s={self.timeout_s}, max_retries={self.max_retries})"
        )

    def _request_payload(self, messages: list[dict], schema: type[BaseModel]) -> dict:
        return {
            "backend": "openai.chat.completions",
            "model": self.model,
            "messages": messages,
            "temperature": 0.0,
            "max_tokens": self.max_tokens,
            "response_format": {"type": "json_object"} if self.json_mode else None,
            "extra_body": self.extra_body,
            "schema": _schema_fingerprint(schema),
        }

    async def _judge_uncached(self, requests: list[list[dict]], schemas: list[type[T]], finish) -> None:
        semaphore = asyncio.Semaphore(self.max_concurrency)
        # One client per call: its connection pool belongs to this event loop (`judge` may run a fresh loop).
        client = openai.AsyncOpenAI(
            base_url=self.base_url, api_key=self._api_key(), max_retries=0, timeout=self.timeout_s
        )

        async def one(j: int) -> None:
            try:
                result = await self._judge_one(client, semaphore, requests[j], schemas[j])
            except Exception as exc:  # a bug in our own code path still becomes a typed failure
                result = JudgeResult(value=None, unscored=f"error:{type(exc).__name__}", attempts=1)
            finish(j, result)

        try:
            await asyncio.gather(*(one(j) for j in range(len(requests))))
        finally:
            await client.close()

    async def _judge_one(self, client, semaphore: asyncio.Semaphore, messages: list[dict], schema: type[T]):
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "temperature": 0.0,
            "max_tokens": self.max_tokens,
        }
        if self.json_mode:
            kwargs["response_format"] = {"type": "json_object"}
        if self.extra_body:
            kwargs["extra_body"] = self.extra_body
        attempts = 0
        while True:
            attempts += 1
            retry_after = None
            async with semaphore:
                try:
                    # wait_for bounds the whole request (a server that trickles bytes never stalls the batch).
                    response = await asyncio.wait_for(client.chat.completions.create(**kwargs), self.timeout_s)
                except (TimeoutError, openai.APITimeoutError):
                    reason, retry = "timeout", True
                except openai.APIConnectionError:
                    reason, retry = "connection", True
                except openai.APIStatusError as exc:
                    reason = f"http_{exc.status_code}"
                    retry = exc.status_code == _RETRY_STATUS or exc.status_code >= 500
                    retry_after = _retry_after_s(exc.response)
                except json.JSONDecodeError:  # a body that claims JSON but is not: a server glitch
                    reason, retry = "invalid_json", True
                except Exception as exc:  # anything else: typed, not retried
                    reason, retry = f"error:{type(exc).__name__}", False
                else:
                    raw = _response_text(response)
                    if raw is _NOT_A_COMPLETION:
                        reason, retry = "invalid_json", True
                    else:
                        return reply_result(raw, schema, attempts=attempts)
            if not retry or attempts > self.max_retries:
                return JudgeResult(value=None, unscored=reason, raw=None, attempts=attempts)
            delay = self.backoff_s * 2 ** (attempts - 1)
            delay += self._rng.uniform(0, 0.1 * delay)
            if retry_after is not None:
                delay = max(delay, retry_after)
            logger.debug("judge %s: %s, retry %d/%d in %.2f s", self.name, reason, attempts, self.max_retries, delay)
            await asyncio.sleep(delay)


_NOT_A_COMPLETION = object()


def _response_text(response: Any) -> Any:
    """The reply text of a chat completion; None when it has no text; `_NOT_A_COMPLETION` for a non-JSON body
    (the openai client returns such bodies as a plain string)."""
    if isinstance(response, str):
        return _NOT_A_COMPLETION
    choices = getattr(response, "choices", None)
    if not choices:
        return None
    message = getattr(choices[0], "message", None)
    content = getattr(message, "content", None)
    return content if isinstance(content, str) else None


def _retry_after_s(response: Any) -> float | None:
    try:
        value = float(response.headers.get("retry-after"))
    except (AttributeError, TypeError, ValueError):
        return None
    return min(max(value, 0.0), _MAX_RETRY_AFTER_S)


def list_server_models(base_url: str, *, api_key_env: str = DEFAULT_API_KEY_ENV, timeout_s: float = 10.0) -> list[str]:
    """Model ids that an OpenAI-compatible server lists at `GET <base_url>/models`."""
    client = openai.OpenAI(
        base_url=base_url, api_key=os.environ.get(api_key_env) or _DUMMY_API_KEY, max_retries=0, timeout=timeout_s
    )
    try:
        return [m.id for m in client.models.list()]
    finally:
        client.close()
