"""The OpenAI-compatible client judge (core layer): vLLM, llama.cpp, `transformers serve` or a hosted API.

`OpenAICompatibleJudge` calls `/v1/chat/completions` with the `openai` package's async client: temperature 0, each
request's schema in `response_format` (json_schema) and the top log-probs asked for, so that closed-choice fields
come back as probabilities (`procrl.judges.choices`). vLLM 0.30 reads the schema from `json_schema.schema`
(vllm/entrypoints/generate/base/protocol.py:92-98, an alias) into structured outputs (protocol.py:147-150) and masks
the logits before the sampler computes log-probs (vllm/v1/worker/gpu_model_runner.py:4595-4599, subclassed by
cpu_model_runner.py:25; vllm/v1/sample/sampler.py:88-89): its top log-probs are over the tokens the grammar allows,
masked ones clamped to -9999 (vllm/entrypoints/openai/chat_completion/serving.py:1232). `transformers serve` 5.24
ignores `response_format` and `logprobs` with a warning (transformers/cli/serving/chat_completion.py:72-92,
cli/serving/utils.py:1188-1190): its replies go through parse-and-extract, counted as `schema_ignored`.

Bounded concurrency (an `asyncio.Semaphore` per call), retries with exponential backoff and jitter on timeouts,
connection errors, malformed response bodies, 429 and 5xx (never on other 4xx); the client's own retries are off so
that `attempts` counts every HTTP request. A 400/422 that names `logprobs` or the response format is a refused
feature (see `OpenAICompatibleJudge`). The API key comes only from an environment variable (default
`PROCRL_JUDGE_API_KEY`; "EMPTY" when unset, which local servers accept) and is never logged, cached or shown.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import os
import random
from typing import Any, Literal

import openai
from pydantic import BaseModel

from procrl.judges.base import Judge, JudgeResult, _schema_fingerprint, reply_result
from procrl.judges.cache import request_cache_key
from procrl.judges.parse import T
from procrl.judges.wire import (
    NOT_A_COMPLETION,
    error_text,
    response_format_field,
    response_text,
    response_tokens,
    retry_after_s,
)
from procrl.utils import get_logger

logger = get_logger(__name__)

DEFAULT_API_KEY_ENV = "PROCRL_JUDGE_API_KEY"
# Sent when the variable is unset: local servers (vLLM, llama.cpp, transformers serve) accept any key.
_DUMMY_API_KEY = "EMPTY"
# HTTP statuses worth retrying: rate limit and server errors. Other 4xx mean the request itself is wrong.
_RETRY_STATUS = 429
# Statuses with which a server refuses a request field (vLLM and OpenAI: 400; FastAPI validation: 422).
_REFUSED_STATUS = (400, 422)
# The most top log-probs OpenAI's API (and vLLM's default `max_logprobs`) allow.
_MAX_TOP_LOGPROBS = 20
# Words in a refusal that name the response format (vLLM: param "response_format"; llama.cpp: "JSON schema ...").
_FORMAT_WORDS = ("response_format", "json_schema", "json_object", "schema", "structured", "grammar", "guided")

ResponseFormat = Literal["json_schema", "json_object", "none"]
# What a refused feature degrades to: a refused json_schema falls back to json_object, a refused json_object to none.
_FORMAT_FALLBACK = {"json_schema": "json_object", "json_object": "none"}

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
        response_format: "json_schema" sends each request's schema (`{"type": "json_schema", "json_schema":
            {"name": <schema class name>, "schema": schema.model_json_schema(), "strict": True}}`: a server that
            honours it returns schema-valid JSON by construction); "json_object" asks only for some JSON object;
            "none" sends no `response_format`. Replies are validated against the schema either way.
        logprobs: top log-probs asked for per generated token (`logprobs=True, top_logprobs=k`, 1..20), read into
            `JudgeResult.probs` for closed-choice fields (`procrl.judges.choices`); None: not asked. A server that
            returns none gives results without probs (not an error).
        extra_body: extra JSON fields merged into the request body (server-specific options); part of the cache key.

    Refused features: a 400/422 whose error names `logprobs` (its `param` or message), or the response format
    (`response_format`, `json_schema`, `schema`, `grammar`, ...), is answered by resending the request at once
    without that feature (logprobs first; json_schema -> json_object -> none), each feature at most once per
    request and outside `max_retries` (`attempts` counts every request). The judge remembers the refusal for the
    rest of its life (`refused`, one warning per feature) and sends later requests without it; a 400/422 that names
    neither is an ordinary `http_<status>` failure, not retried. `degraded` counts the fresh replies obtained
    without a feature the judge was configured with: "logprobs", or the configured response format. The
    cache key holds the response format and log-prob settings a reply was obtained with, so a constrained reply
    and an unconstrained one never share a key (a reply obtained after a refusal within a call is filed under the
    settings it was sent with).

    Raises:
        ValueError: a non-positive limit, an empty base URL / model, an unknown response_format, or logprobs
            outside 1..20.
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
        response_format: ResponseFormat = "json_schema",
        logprobs: int | None = 5,
        extra_body: dict | None = None,
    ):
        if not base_url or not model:
            raise ValueError(f"OpenAICompatibleJudge needs a base_url and a model id, got {base_url!r} and {model!r}")
        if max_concurrency < 1 or timeout_s <= 0 or max_retries < 0 or backoff_s < 0 or max_tokens < 1:
            raise ValueError(
                "OpenAICompatibleJudge: need max_concurrency >= 1, timeout_s > 0, max_retries >= 0, backoff_s >= 0 "
                f"and max_tokens >= 1; got {max_concurrency}, {timeout_s}, {max_retries}, {backoff_s}, {max_tokens}"
            )
        if response_format not in ("json_schema", "json_object", "none"):
            raise ValueError(
                f"OpenAICompatibleJudge: response_format must be 'json_schema', 'json_object' or 'none', got "
                f"{response_format!r}"
            )
        if logprobs is not None and (isinstance(logprobs, bool) or not 1 <= logprobs <= _MAX_TOP_LOGPROBS):
            raise ValueError(
                f"OpenAICompatibleJudge: logprobs must be None or 1..{_MAX_TOP_LOGPROBS}, got {logprobs!r}"
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
        self.response_format = response_format
        self.logprobs = logprobs
        self.extra_body = dict(extra_body) if extra_body else None
        self.refused: set[str] = set()
        # json_schema refusals by schema (request_cache_key of its fingerprint): one schema the server's grammar
        # backend cannot compile must not switch every other schema back to free JSON; two refused schemas do.
        self.refused_schemas: set[str] = set()
        self._rng = random.Random()

    @property
    def degraded(self) -> collections.Counter:
        """Fresh replies obtained without a refused feature, by feature (`JudgeStats.degraded`)."""
        return self.stats.degraded

    def _api_key(self) -> str:
        # Read at each call and never stored: a pickled or printed judge cannot leak it.
        return os.environ.get(self.api_key_env) or _DUMMY_API_KEY

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(base_url={self.base_url!r}, model={self.model!r}, "
            f"api_key_env={self.api_key_env!r}, max_concurrency={self.max_concurrency}, timeout_s={self.timeout_s}, "
            f"max_retries={self.max_retries}, response_format={self.response_format!r}, logprobs={self.logprobs})"
        )

    def _settings(self, refused: set[str] | frozenset[str] = frozenset()) -> tuple[str, int | None]:
        """`(response_format, top_logprobs)` a request is sent with once `refused` features are left out."""
        fmt = self.response_format
        while fmt in refused:
            fmt = _FORMAT_FALLBACK[fmt]
        return fmt, None if "logprobs" in refused else self.logprobs

    def _payload(self, messages: list[dict], schema: type[BaseModel], settings: tuple[str, int | None]) -> dict:
        fmt, top = settings
        return {
            "backend": "openai.chat.completions",
            "model": self.model,
            "messages": messages,
            "temperature": 0.0,
            "max_tokens": self.max_tokens,
            "response_format": response_format_field(fmt, schema),
            "logprobs": top,
            "extra_body": self.extra_body,
            "schema": _schema_fingerprint(schema),
        }

    def _refused_for(self, schema: type[BaseModel]) -> set[str]:
        """The features refused for requests with `schema`: the judge-wide ones, plus json_schema when the server
        refused this schema."""
        if _schema_key(schema) in self.refused_schemas:
            return self.refused | {"json_schema"}
        return set(self.refused)

    def _request_payload(self, messages: list[dict], schema: type[BaseModel]) -> dict:
        return self._payload(messages, schema, self._settings(self._refused_for(schema)))

    async def _judge_uncached(self, requests: list[list[dict]], schemas: list[type[T]], finish) -> None:
        semaphore = asyncio.Semaphore(self.max_concurrency)
        # The settings the cache keys of this call were computed with (`Judge` builds them just before the call).
        keyed_all = [self._settings(self._refused_for(schema)) for schema in schemas]
        # One client per call: its connection pool belongs to this event loop (`judge` may run a fresh loop).
        client = openai.AsyncOpenAI(
            base_url=self.base_url, api_key=self._api_key(), max_retries=0, timeout=self.timeout_s
        )

        async def one(j: int) -> None:
            used = keyed = keyed_all[j]
            try:
                result, used = await self._judge_one(client, semaphore, requests[j], schemas[j])
            except Exception as exc:  # a bug in our own code path still becomes a typed failure
                result = JudgeResult(value=None, unscored=f"error:{type(exc).__name__}", attempts=1)
            finish(j, result)
            if used != keyed and result.ok:
                self._refile(requests[j], schemas[j], keyed, used, result)

        try:
            await asyncio.gather(*(one(j) for j in range(len(requests))))
        finally:
            await client.close()

    def _refile(self, messages, schema, keyed, used, result: JudgeResult) -> None:
        """Move a reply that `finish` cached under the settings the call started with to the key of the settings
        it was obtained with (a refusal arrived during the call)."""
        if self.cache is None:
            return
        wrong = request_cache_key(self._payload(messages, schema, keyed))
        payload = self._payload(messages, schema, used)
        try:
            with contextlib.suppress(FileNotFoundError):
                self.cache.path(wrong).unlink()
            self.cache.put(request_cache_key(payload), payload, result.value, result.raw, probs=result.probs)
        except OSError as exc:  # a full disk loses the cache entry, not the judgement
            logger.warning("could not write judge cache file (%s)", exc)

    def _refuse(self, feature: str, exc: openai.APIStatusError, schema: type[BaseModel]) -> None:
        if feature == "json_schema":
            key = _schema_key(schema)
            if key not in self.refused_schemas:
                self.refused_schemas.add(key)
                logger.warning(
                    "judge %s: the server refused the json_schema of %s (HTTP %d: %s); that schema is sent as %s",
                    self.name,
                    schema.__name__,
                    exc.status_code,
                    error_text(exc)[:200],
                    _FORMAT_FALLBACK["json_schema"],
                )
            if len(self.refused_schemas) < 2:
                return
        if feature not in self.refused:
            self.refused.add(feature)
            logger.warning(
                "judge %s: the server refused %s (HTTP %d: %s); sending requests without it from now on",
                self.name,
                feature,
                exc.status_code,
                error_text(exc)[:200],
            )

    def _refused_feature(self, exc: openai.APIStatusError, refused: set[str]) -> str | None:
        """The feature a 400/422 names, among those this request still sends (logprobs first); None otherwise."""
        if exc.status_code not in _REFUSED_STATUS:
            return None
        fmt, top = self._settings(refused)
        text = error_text(exc).lower()
        if top is not None and "logprob" in text:
            return "logprobs"
        if fmt != "none" and any(word in text for word in _FORMAT_WORDS):
            return fmt
        return None

    async def _judge_one(
        self, client, semaphore: asyncio.Semaphore, messages: list[dict], schema: type[T]
    ) -> tuple[JudgeResult, tuple[str, int | None]]:
        """One judgement with retries: `(result, (response_format, top_logprobs) of the last request sent)`."""
        refused = self._refused_for(schema)
        attempts = retries = 0
        while True:
            refused |= self._refused_for(schema)  # features another request found refused meanwhile
            settings = self._settings(refused)
            kwargs = self._create_kwargs(messages, schema, settings)
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
                    feature = self._refused_feature(exc, refused)
                    if feature is not None:  # resend at once without it (not a retry of a failure)
                        refused.add(feature)
                        self._refuse(feature, exc, schema)
                        continue
                    reason = f"http_{exc.status_code}"
                    retry = exc.status_code == _RETRY_STATUS or exc.status_code >= 500
                    retry_after = retry_after_s(exc.response)
                except json.JSONDecodeError:  # a body that claims JSON but is not: a server glitch
                    reason, retry = "invalid_json", True
                except Exception as exc:  # anything else: typed, not retried
                    reason, retry = f"error:{type(exc).__name__}", False
                else:
                    raw = response_text(response)
                    if raw is NOT_A_COMPLETION:
                        reason, retry = "invalid_json", True
                    else:
                        self._count_degraded(settings)
                        tokens = response_tokens(response) if settings[1] is not None else None
                        return reply_result(raw, schema, attempts=attempts, tokens=tokens), settings
            if not retry or retries >= self.max_retries:
                return JudgeResult(value=None, unscored=reason, raw=None, attempts=attempts), settings
            retries += 1
            delay = self.backoff_s * 2 ** (retries - 1)
            delay += self._rng.uniform(0, 0.1 * delay)
            if retry_after is not None:
                delay = max(delay, retry_after)
            logger.debug("judge %s: %s, retry %d/%d in %.2f s", self.name, reason, retries, self.max_retries, delay)
            await asyncio.sleep(delay)

    def _create_kwargs(self, messages: list[dict], schema: type[BaseModel], settings: tuple[str, int | None]) -> dict:
        fmt, top = settings
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "temperature": 0.0,
            "max_tokens": self.max_tokens,
        }
        response_format = response_format_field(fmt, schema)
        if response_format is not None:
            kwargs["response_format"] = response_format
        if top is not None:
            kwargs["logprobs"] = True
            kwargs["top_logprobs"] = top
        if self.extra_body:
            kwargs["extra_body"] = self.extra_body
        return kwargs

    def _count_degraded(self, settings: tuple[str, int | None]) -> None:
        if self.logprobs is not None and settings[1] is None:
            self.degraded["logprobs"] += 1
        if settings[0] != self.response_format:
            self.degraded[self.response_format] += 1


def _schema_key(schema: type[BaseModel]) -> str:
    return request_cache_key(_schema_fingerprint(schema))


def list_server_models(base_url: str, *, api_key_env: str = DEFAULT_API_KEY_ENV, timeout_s: float = 10.0) -> list[str]:
    """Model ids that an OpenAI-compatible server lists at `GET <base_url>/models`."""
    client = openai.OpenAI(
        base_url=base_url, api_key=os.environ.get(api_key_env) or _DUMMY_API_KEY, max_retries=0, timeout=timeout_s
    )
    try:
        return [m.id for m in client.models.list()]
    finally:
        client.close()
