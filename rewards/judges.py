"""LLM judges: JSON judgements validated with pydantic, from any OpenAI-compatible server or a local model.

DESIGN §3 "Judges" and "Local servers". Every judge takes chat requests (one message list each) and a pydantic
schema, and returns one `JudgeResult` per request, in order:

    results = judge.judge([messages_1, messages_2], MySchema)   # list[JudgeResult[MySchema]]
    results[0].value        # a validated MySchema, or None when unscored
    results[0].unscored     # why not: "timeout" | "http_<status>" | "connection" | "invalid_json" |
                            #          "schema_mismatch" | "empty" | "error:<ExceptionName>"

A failed judgement never raises: it is a typed "unscored" result, counted in `judge.stats`. Only bad arguments
raise (`ValueError`).

Backends:
- `OpenAICompatibleJudge`: the `openai` client against vLLM, llama.cpp, `transformers serve` or a hosted API.
  Temperature 0, `response_format={"type": "json_object"}` (`transformers serve` 5.24 accepts and ignores it:
  transformers/cli/serving/chat_completion.py `UNUSED_CHAT_COMPLETION_FIELDS`), bounded concurrency (an
  `asyncio.Semaphore` per call), retries with exponential backoff and jitter on timeouts, connection errors,
  malformed response bodies, 429 and 5xx (never on other 4xx); the client's own retries are off so that
  `attempts` counts every HTTP request. The API key comes only from an environment variable (default
  `PROCRL_JUDGE_API_KEY`; "EMPTY" when unset, which local servers accept) and is never logged, cached or shown in
  a repr.
- `TransformersJudge`: an in-process causal LM (greedy, chat template, batched left-padded `generate`).
- `JudgeServer`: starts `transformers serve <model dir> --host 127.0.0.1 --port P --device cpu` and stops its whole
  process group; `open_judge("local")` pairs it with an `OpenAICompatibleJudge`.

Parsing: the first JSON object in the reply text (small models wrap JSON in prose or ```json fences), validated
with `schema.model_validate`. NaN/Infinity are rejected (a judge score is never NaN). Invalid JSON is not retried:
decoding is greedy (temperature 0), so a retry would return the same text.

Cache: with `cache_dir`, one JSON file per request at `<cache_dir>/<key[:2]>/<key>.json`, written atomically
(temporary file + `os.replace`), so reruns cost nothing and concurrent processes never read a half-written
file. The key (`request_cache_key`) is the SHA-256 of the canonical JSON of the full request: backend, model id,
messages, temperature, token limit, response format, extra body, and the schema's name and JSON schema (the
server URL and the API key are not part of it). Only validated judgements are cached, so failures are retried
on the next run.

Measured here (SmolLM2-135M-Instruct on 2 CPU cores shared with other jobs, `benchmarks/bench_judges.py`): the
server answers 8-19 s after start; a 16-token judgement took ~1 s on a quiet CPU, 3.5 s under load with
`num_threads=1` and 22 s under load with torch's default threads (thrashing). Without `--continuous-batching`
the server runs one generation at a time, so client concurrency 8 gave 0.97-1.09x the throughput of 1; with it,
2.7x (after a one-off ~95 s first request).
"""

from __future__ import annotations

import abc
import asyncio
import collections
import concurrent.futures
import contextlib
import functools
import hashlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

import openai
import pydantic
from pydantic import BaseModel
from tqdm.auto import tqdm

from procrl.utils import get_logger

logger = get_logger(__name__)

T = TypeVar("T", bound=BaseModel)

DEFAULT_API_KEY_ENV = "PROCRL_JUDGE_API_KEY"
# Sent when the variable is unset: local servers (vLLM, llama.cpp, transformers serve) accept any key.
_DUMMY_API_KEY = "EMPTY"
# HTTP statuses worth retrying: rate limit and server errors. Other 4xx mean the request itself is wrong.
_RETRY_STATUS = 429
# Cap on a server's Retry-After (seconds), so a bad header cannot stall a training step.
_MAX_RETRY_AFTER_S = 30.0

__all__ = [
    "JudgeResult",
    "JudgeStats",
    "Judge",
    "OpenAICompatibleJudge",
    "TransformersJudge",
    "JudgeServer",
    "open_judge",
    "request_cache_key",
    "extract_json_object",
    "parse_judgement",
    "JudgeCache",
]


# --------------------------------------------------------------------------------------------------------------------
# 1. Results and counters
# --------------------------------------------------------------------------------------------------------------------


@dataclass
class JudgeResult(Generic[T]):
    """The outcome of one judge request.

    Attributes:
        value: the validated pydantic object; None when unscored.
        unscored: the reason when `value` is None: "timeout", "http_<status>", "connection", "invalid_json",
            "schema_mismatch", "empty" or "error:<ExceptionName>"; None when scored.
        raw: the raw text of the final response (None when no response text arrived).
        cached: served from the on-disk cache (no request was sent).
        attempts: requests sent for this judgement (0 for a cache hit; 1 + retries otherwise).
    """

    value: T | None
    unscored: str | None
    raw: str | None = None
    cached: bool = False
    attempts: int = 0

    @property
    def ok(self) -> bool:
        """True when the judgement was scored (`value` holds a validated object)."""
        return self.value is not None


@dataclass
class JudgeStats:
    """Counters over a judge's life (all calls). `requests == scored + sum(unscored.values())`.

    Attributes:
        requests: judgements asked for (cache hits included).
        cache_hits: judgements served from the cache.
        scored: judgements with a validated value (cache hits included).
        unscored: failed judgements by reason.
        attempts: backend requests sent (HTTP requests, or rows generated in-process), retries included.
    """

    requests: int = 0
    cache_hits: int = 0
    scored: int = 0
    unscored: collections.Counter = field(default_factory=collections.Counter)
    attempts: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def __getstate__(self) -> dict:  # picklable (rewards holding a judge may move to another process)
        state = self.__dict__.copy()
        del state["_lock"]
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def record(self, result: JudgeResult) -> None:
        """Count one finished judgement."""
        with self._lock:
            self.requests += 1
            self.cache_hits += int(result.cached)
            self.attempts += result.attempts
            if result.ok:
                self.scored += 1
            else:
                self.unscored[result.unscored or "unknown"] += 1

    def as_dict(self) -> dict[str, int]:
        """Flat counters for a logger: requests, cache_hits, scored, unscored (total), attempts, unscored/<reason>.

        >>> stats = JudgeStats()
        >>> stats.record(JudgeResult(value=None, unscored="timeout", attempts=4))
        >>> stats.as_dict()
        {'requests': 1, 'cache_hits': 0, 'scored': 0, 'unscored': 1, 'attempts': 4, 'unscored/timeout': 1}
        """
        with self._lock:
            out = {
                "requests": self.requests,
                "cache_hits": self.cache_hits,
                "scored": self.scored,
                "unscored": sum(self.unscored.values()),
                "attempts": self.attempts,
            }
            out.update({f"unscored/{reason}": n for reason, n in sorted(self.unscored.items())})
        return out


# --------------------------------------------------------------------------------------------------------------------
# 2. Parsing the reply
# --------------------------------------------------------------------------------------------------------------------


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-finite JSON number {name}")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def extract_json_object(text: str) -> dict | None:
    """The first JSON object in `text` (prose, ```json fences and trailing text around it are ignored).

    Scans each "{" from the left and returns the first one that starts a complete, valid JSON object; NaN and
    Infinity count as invalid. None when there is none.

    >>> extract_json_object('Sure! ```json\\n{"score": 4}\\n``` Hope this helps.')
    {'score': 4}
    >>> extract_json_object('{"score": 4')  # cut off by the token limit
    """
    start = text.find("{")
    while start != -1:
        try:
            obj, _ = _DECODER.raw_decode(text, start)
        except ValueError:  # JSONDecodeError or a rejected constant
            pass
        else:
            if isinstance(obj, dict):
                return obj
        start = text.find("{", start + 1)
    return None


def parse_judgement(text: str | None, schema: type[T]) -> tuple[T | None, str | None]:
    """Validate a reply against `schema`: `(value, None)` or `(None, reason)`.

    Reasons: "empty" (no text or only whitespace), "invalid_json" (no JSON object in it), "schema_mismatch" (an
    object that `schema.model_validate` rejects).

    >>> class Score(BaseModel):
    ...     score: int
    >>> parse_judgement('The score: {"score": 3}', Score)
    (Score(score=3), None)
    >>> parse_judgement('{"grade": 3}', Score)
    (None, 'schema_mismatch')
    """
    if text is None or not text.strip():
        return None, "empty"
    obj = extract_json_object(text)
    if obj is None:
        return None, "invalid_json"
    try:
        return schema.model_validate(obj), None
    except pydantic.ValidationError:
        return None, "schema_mismatch"


# --------------------------------------------------------------------------------------------------------------------
# 3. The cache
# --------------------------------------------------------------------------------------------------------------------


def _canonical_json(payload: Any) -> str:
    try:
        return json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"judge request is not JSON-serialisable ({exc}); messages must hold plain strings") from exc


def request_cache_key(payload: dict) -> str:
    """SHA-256 (hex, 64 characters) of the canonical JSON (sorted keys, no spaces) of a full judge request.

    The payload is what decides the reply: backend, model id, messages, temperature, token limit, response format,
    extra body, schema name and JSON schema. The judges build it without the server URL (the same model on
    another host gives the same reply) and without the API key.

    Raises:
        ValueError: the payload is not JSON-serialisable (or holds NaN).

    >>> request_cache_key({"b": 1, "a": [1, 2]}) == request_cache_key({"a": [1, 2], "b": 1})
    True
    """
    return hashlib.sha256(_canonical_json(payload).encode("utf-8")).hexdigest()


class JudgeCache:
    """One JSON file per validated judgement: `<root>/<key[:2]>/<key>.json`.

    Files are written to a temporary file in the same directory and renamed with `os.replace` (atomic on POSIX),
    so a reader sees either nothing or a whole file, even with several processes writing the same key.
    """

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root).expanduser()

    def path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str, schema: type[T]) -> tuple[T, str | None] | None:
        """`(value, raw)` of a cached judgement, or None on a miss (an unreadable or invalid file is a miss)."""
        path = self.path(key)
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
            if record.get("key") != key:
                raise ValueError("key mismatch")
            return schema.model_validate(record["value"]), record.get("raw")
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError, AttributeError, pydantic.ValidationError) as exc:
            logger.warning("ignoring unreadable judge cache file %s (%s)", path, type(exc).__name__)
            return None

    def put(self, key: str, payload: dict, value: BaseModel, raw: str | None) -> None:
        """Store one validated judgement (the request payload is kept for inspection; it holds no API key)."""
        record = {"key": key, "request": payload, "value": value.model_dump(mode="json"), "raw": raw}
        path = self.path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{key[:16]}-", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(_canonical_json(record))
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise


# --------------------------------------------------------------------------------------------------------------------
# 4. The judge interface
# --------------------------------------------------------------------------------------------------------------------


def _check_requests(requests: Any, schema: Any) -> list[list[dict]]:
    if not (isinstance(schema, type) and issubclass(schema, BaseModel)):
        raise ValueError(f"schema must be a pydantic BaseModel subclass, got {schema!r}")
    if isinstance(requests, (str, bytes, dict)) or not isinstance(requests, Sequence):
        raise ValueError(
            f"requests must be a sequence of chat message lists, got {type(requests).__name__}; "
            'wrap one request as [[{"role": "user", "content": "..."}]]'
        )
    checked = []
    for i, messages in enumerate(requests):
        if isinstance(messages, (str, bytes, dict)) or not isinstance(messages, Sequence) or not messages:
            raise ValueError(
                f"request {i} must be a non-empty list of chat messages ({{'role': ..., 'content': ...}}), "
                f"got {type(messages).__name__}"
            )
        for message in messages:
            if not isinstance(message, dict) or not isinstance(message.get("role"), str) or "content" not in message:
                raise ValueError(f"request {i} holds a message without a 'role' string and 'content': {message!r}")
        checked.append([dict(m) for m in messages])
    return checked


class Judge(abc.ABC):
    """A judge returns one validated pydantic object (or a typed failure) per chat request.

    Subclasses implement `_request_payload` (what decides the reply: the cache key) and `_judge_uncached`.
    """

    name: str
    stats: JudgeStats

    def __init__(self, name: str, cache_dir: str | os.PathLike | None = None):
        self.name = name
        self.stats = JudgeStats()
        self.cache = JudgeCache(cache_dir) if cache_dir is not None else None

    def judge(
        self, requests: Sequence[list[dict]], schema: type[T], *, desc: str = "judging", progress: bool = True
    ) -> list[JudgeResult[T]]:
        """Judge every request; blocking.

        Args:
            requests: chat requests, each a list of `{"role": ..., "content": ...}` messages.
            schema: the pydantic model the reply must validate against.
            desc: progress-bar label.
            progress: show a tqdm progress bar.

        Returns:
            One `JudgeResult` per request, in the same order. Per-request failures are typed `unscored` results.

        Raises:
            ValueError: `requests` is not a sequence of non-empty message lists, or `schema` is not a pydantic model.

        Called from inside a running event loop (a notebook, an async server), the work runs in a worker thread
        with its own loop; the calling loop is blocked until it ends (use `ajudge` there to avoid that).
        """
        _check_requests(requests, schema)
        run = functools.partial(asyncio.run, self._ajudge_checked(requests, schema, desc=desc, progress=progress))
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return run()
        with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="procrl-judge") as pool:
            return pool.submit(run).result()

    async def ajudge(
        self, requests: Sequence[list[dict]], schema: type[T], *, desc: str = "judging", progress: bool = True
    ) -> list[JudgeResult[T]]:
        """Async `judge` (same arguments, results and errors)."""
        _check_requests(requests, schema)
        return await self._ajudge_checked(requests, schema, desc=desc, progress=progress)

    async def _ajudge_checked(
        self, requests: Sequence[list[dict]], schema: type[T], *, desc: str, progress: bool
    ) -> list[JudgeResult[T]]:
        checked = _check_requests(requests, schema)
        payloads = [self._request_payload(messages, schema) for messages in checked]
        keys = [request_cache_key(p) for p in payloads]
        results: list[JudgeResult[T] | None] = [None] * len(checked)
        with tqdm(total=len(checked), desc=desc, disable=not progress, unit="req") as bar:
            todo = []
            for i, key in enumerate(keys):
                hit = self.cache.get(key, schema) if self.cache is not None else None
                if hit is not None:
                    results[i] = JudgeResult(value=hit[0], unscored=None, raw=hit[1], cached=True, attempts=0)
                    self.stats.record(results[i])
                    bar.update(1)
                else:
                    todo.append(i)

            def finish(j: int, result: JudgeResult[T]) -> None:
                i = todo[j]
                if result.ok and self.cache is not None:
                    try:
                        self.cache.put(keys[i], payloads[i], result.value, result.raw)
                    except OSError as exc:  # a full disk loses the cache entry, not the judgement
                        logger.warning("could not write judge cache file (%s)", exc)
                results[i] = result
                self.stats.record(result)
                bar.update(1)

            if todo:
                await self._judge_uncached([checked[i] for i in todo], schema, finish)
        missing = [i for i, r in enumerate(results) if r is None]
        if missing:  # a backend bug; never hand back fewer results than requests
            raise RuntimeError(f"{type(self).__name__} returned no result for requests {missing[:10]}")
        failed = collections.Counter(r.unscored for r in results if not r.ok)
        if failed:
            logger.warning(
                "judge %s: %d of %d requests unscored %s", self.name, sum(failed.values()), len(results), dict(failed)
            )
        return results  # type: ignore[return-value]

    @abc.abstractmethod
    def _request_payload(self, messages: list[dict], schema: type[BaseModel]) -> dict:
        """Everything that decides the reply (hashed into the cache key); never the API key or the server URL."""

    @abc.abstractmethod
    async def _judge_uncached(self, requests: list[list[dict]], schema: type[T], finish) -> None:
        """Judge `requests`, calling `finish(j, JudgeResult)` exactly once per request index j (any order)."""


def _schema_fingerprint(schema: type[BaseModel]) -> dict:
    return {"name": schema.__name__, "json_schema": schema.model_json_schema()}


# --------------------------------------------------------------------------------------------------------------------
# 5. OpenAI-compatible servers
# --------------------------------------------------------------------------------------------------------------------


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

    async def _judge_uncached(self, requests: list[list[dict]], schema: type[T], finish) -> None:
        semaphore = asyncio.Semaphore(self.max_concurrency)
        # One client per call: its connection pool belongs to this event loop (`judge` may run a fresh loop).
        client = openai.AsyncOpenAI(
            base_url=self.base_url, api_key=self._api_key(), max_retries=0, timeout=self.timeout_s
        )

        async def one(j: int) -> None:
            try:
                result = await self._judge_one(client, semaphore, requests[j], schema)
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
                        value, reason = parse_judgement(raw, schema)
                        return JudgeResult(value=value, unscored=reason, raw=raw, attempts=attempts)
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


# --------------------------------------------------------------------------------------------------------------------
# 6. In-process transformers model
# --------------------------------------------------------------------------------------------------------------------


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
                import torch
                from transformers import AutoModelForCausalLM, AutoTokenizer

                from procrl.models import resolve_model

                path = resolve_model(self.model_name_or_path)
                device = self.device or ("cuda" if torch.cuda.is_available() else "cpu")
                logger.info("loading judge model %s on %s", path, device)
                self._tokenizer = AutoTokenizer.from_pretrained(path)
                self._model = AutoModelForCausalLM.from_pretrained(path).to(device).eval()
            return self._model, self._tokenizer

    async def _judge_uncached(self, requests: list[list[dict]], schema: type[T], finish) -> None:
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
                value, reason = parse_judgement(text, schema)
                finish(start + j, JudgeResult(value=value, unscored=reason, raw=text, attempts=1))

    def _generate(self, batch: list[list[dict]]) -> list[str]:
        import torch
        from transformers import GenerationConfig

        from procrl.trainers.rollout import eos_token_ids, generate_completions, render_prompts

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


# --------------------------------------------------------------------------------------------------------------------
# 7. The embedded judge server (`transformers serve`)
# --------------------------------------------------------------------------------------------------------------------


class JudgeServer:
    """`transformers serve` on loopback, as a context manager (DESIGN §3 "Local servers").

        with JudgeServer("default") as server:
            judge = OpenAICompatibleJudge(server.base_url, server.model_id)

    The command is `<python> -m transformers.cli.transformers serve <model dir> --host H --port P --device D`
    (the model is preloaded and pinned: the server answers 400 to any other model id). It runs in its own process
    group, which is killed (SIGTERM, then SIGKILL after 10 s) on exit, also at interpreter exit if `stop` was never
    called.

    Args:
        model: "default" (the embedded SmolLM2-135M-Instruct) or a model directory / hub id.
        host: bind address; loopback by default.
        port: TCP port; None picks a free one.
        device: "cpu", "cuda:0", "auto".
        startup_timeout_s: how long to wait for `GET /v1/models` to answer.
        log_path: where the server's output goes; default: a temporary file deleted on stop.
        continuous_batching: pass `--continuous-batching` (the server batches concurrent requests; without it, it
            generates one request at a time). Its paged KV cache is sized from free memory unless bounded: on CPU it
            took 13-14 GB of this 24 GB machine and pushed it into thrashing, so `cb_num_blocks` bounds it.
        cb_num_blocks / cb_block_size: KV-cache blocks x tokens per block with continuous batching (default 256 x 32
            = 8192 cached tokens, ~0.4 GB for SmolLM2-135M in fp32); None leaves transformers' own sizing.
        num_threads: CPU threads of the server's torch (`OMP_NUM_THREADS`); None inherits the environment. On a
            crowded CPU, 1 avoids thread thrashing (measured here with 8 runnable processes on 2 cores: 9 s instead
            of 74 s for one 24-token reply).
        extra_args: more `transformers serve` options.

    Attributes:
        base_url: "http://<host>:<port>/v1".
        model_id: the model id requests must name (the served directory, as given to the server).

    Raises:
        RuntimeError (from `start`): the server exited or did not answer within `startup_timeout_s`; the message
            holds the tail of its log.
    """

    def __init__(
        self,
        model: str = "default",
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        device: str = "cpu",
        startup_timeout_s: float = 300.0,
        log_path: str | None = None,
        continuous_batching: bool = False,
        num_threads: int | None = None,
        extra_args: Sequence[str] = (),
        cb_num_blocks: int | None = 256,
        cb_block_size: int | None = 32,
    ):
        from procrl.models import resolve_model

        if num_threads is not None and num_threads < 1:
            raise ValueError(f"JudgeServer: num_threads must be >= 1 or None, got {num_threads}")

        self.model_id = resolve_model(model)
        self.host = host
        self.port = port
        self.device = device
        self.startup_timeout_s = float(startup_timeout_s)
        self.log_path = log_path
        self.continuous_batching = continuous_batching
        self.num_threads = num_threads
        self.extra_args = list(extra_args)
        self.cb_num_blocks = cb_num_blocks
        self.cb_block_size = cb_block_size
        self.startup_s: float | None = None
        self._process: subprocess.Popen | None = None
        self._own_log: str | None = None
        self._finalizer: weakref.finalize | None = None

    @property
    def base_url(self) -> str:
        if self.port is None:
            raise RuntimeError("JudgeServer has no port before start()")
        return f"http://{self.host}:{self.port}/v1"

    def command(self) -> list[str]:
        """The server command line."""
        cmd = [sys.executable, "-m", "transformers.cli.transformers", "serve", self.model_id]
        cmd += ["--host", self.host, "--port", str(self.port), "--device", self.device]
        if self.continuous_batching:
            cmd.append("--continuous-batching")
            if self.cb_num_blocks is not None:
                cmd += ["--cb-num-blocks", str(self.cb_num_blocks)]
            if self.cb_block_size is not None:
                cmd += ["--cb-block-size", str(self.cb_block_size)]
        return cmd + self.extra_args

    def start(self) -> JudgeServer:
        """Start the server and wait until `GET /v1/models` answers 200."""
        if self._process is not None:
            raise RuntimeError("JudgeServer already started")
        if self.host not in ("127.0.0.1", "localhost", "::1"):
            logger.warning("judge server binds %s, not loopback: it is reachable from other machines", self.host)
        if self.port is None:
            self.port = _free_port(self.host)
        if self.log_path is None:
            fd, self._own_log = tempfile.mkstemp(prefix="procrl-judge-server-", suffix=".log")
            os.close(fd)
        log_file = self.log_path or self._own_log
        began = time.monotonic()
        env = dict(os.environ)
        if self.num_threads is not None:
            env["OMP_NUM_THREADS"] = str(self.num_threads)
        with open(log_file, "ab") as log:
            self._process = subprocess.Popen(
                self.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=env,
            )
        self._finalizer = weakref.finalize(self, _kill_process_group, self._process)
        logger.info("starting judge server on %s (log: %s)", self.base_url, log_file)
        try:
            self._wait_ready(began)
        except BaseException as exc:
            why = str(exc) if isinstance(exc, _NotReady) else f"startup interrupted ({type(exc).__name__})"
            tail = self.log_tail()
            self.stop()
            raise RuntimeError(
                f"transformers serve did not start: {why} (command: {' '.join(self.command())}). "
                f"Last server log lines:\n{tail}"
            ) from None
        self.startup_s = time.monotonic() - began
        logger.info("judge server ready after %.1f s", self.startup_s)
        return self

    def _wait_ready(self, began: float) -> None:
        url = f"{self.base_url}/models"
        while True:
            if self._process is None or self._process.poll() is not None:
                code = None if self._process is None else self._process.returncode
                raise _NotReady(f"the server exited with code {code}")
            try:
                with urllib.request.urlopen(url, timeout=2.0) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError, TimeoutError):
                pass
            if time.monotonic() - began > self.startup_timeout_s:
                raise _NotReady(f"no answer from {url} within {self.startup_timeout_s:.0f} s")
            time.sleep(0.25)

    def log_tail(self, lines: int = 30) -> str:
        """The last `lines` lines of the server log ("" when there is none)."""
        path = self.log_path or self._own_log
        if not path or not os.path.exists(path):
            return ""
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 64_000))
            text = handle.read().decode("utf-8", errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        """Kill the server's process group (idempotent) and remove the temporary log."""
        if self._finalizer is not None:
            self._finalizer()  # runs _kill_process_group once
            self._finalizer = None
        self._process = None
        if self._own_log is not None:
            with contextlib.suppress(OSError):
                os.unlink(self._own_log)
            self._own_log = None

    def __enter__(self) -> JudgeServer:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"JudgeServer(model_id={self.model_id!r}, host={self.host!r}, port={self.port}, device={self.device!r})"


class _NotReady(Exception):
    pass


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _kill_process_group(process: subprocess.Popen) -> None:
    if process.poll() is not None:
        return
    for sig, wait_s in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, sig)  # start_new_session=True: the group id is the server's pid
        try:
            process.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


# --------------------------------------------------------------------------------------------------------------------
# 8. One entry point for commands: open_judge(spec)
# --------------------------------------------------------------------------------------------------------------------

_SERVER_KWARGS = (
    "host",
    "port",
    "device",
    "startup_timeout_s",
    "log_path",
    "continuous_batching",
    "num_threads",
    "extra_args",
    "cb_num_blocks",
    "cb_block_size",
)


@contextlib.contextmanager
def open_judge(
    spec: str, *, cache_dir: str | os.PathLike | None = None, max_concurrency: int = 8, **kwargs: Any
) -> Iterator[Judge]:
    """A judge from a command-line spec; a server it starts is stopped on exit.

    Specs:
        "http(s)://host:port/v1[#model]": `OpenAICompatibleJudge`. The model id is `kwargs["model"]` (a
            `--judge-model` flag), else the URL fragment, else the first model the server lists at `/v1/models`.
        "local" / "local:<name_or_path>": `JudgeServer` on the default model (or that one) + `OpenAICompatibleJudge`.
        "transformers:<name_or_path>": `TransformersJudge` in this process.

    Args:
        cache_dir: the judge's on-disk cache (None: no cache).
        max_concurrency: concurrent requests (OpenAI-compatible judges).
        **kwargs: more judge arguments (`OpenAICompatibleJudge` / `TransformersJudge`); for "local", the
            `JudgeServer` arguments host, port, device, startup_timeout_s, log_path, continuous_batching, num_threads,
            extra_args.

    Raises:
        ValueError: an unknown spec, or a server that lists no model.
        RuntimeError: the local server did not start.
    """
    spec = spec.strip()
    if spec.startswith(("http://", "https://")):
        url, _, fragment = spec.partition("#")
        model = kwargs.pop("model", None) or fragment or None
        if model is None:
            models = list_server_models(url, api_key_env=kwargs.get("api_key_env", DEFAULT_API_KEY_ENV))
            if not models:
                raise ValueError(f"the judge server {url} lists no model; name one with {url}#<model> or --judge-model")
            model = models[0]
        yield OpenAICompatibleJudge(url, model, cache_dir=cache_dir, max_concurrency=max_concurrency, **kwargs)
    elif spec == "local" or spec.startswith("local:"):
        model = spec.partition(":")[2] or "default"
        server_kwargs = {k: kwargs.pop(k) for k in _SERVER_KWARGS if k in kwargs}
        kwargs.pop("model", None)
        with JudgeServer(model, **server_kwargs) as server:
            yield OpenAICompatibleJudge(
                server.base_url, server.model_id, cache_dir=cache_dir, max_concurrency=max_concurrency, **kwargs
            )
    elif spec.startswith("transformers:"):
        name = spec.partition(":")[2] or "default"
        yield TransformersJudge(name, cache_dir=cache_dir, **kwargs)
    else:
        raise ValueError(
            f"unknown judge spec {spec!r}; use 'http(s)://host:port/v1[#model]', 'local', 'local:<model>' or "
            "'transformers:<model>'"
        )
