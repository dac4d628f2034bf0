"""The judge interface (core layer): `JudgeResult`, the `JudgeStats` counters and the `Judge` base class.

Every judge takes chat requests (one message list each) and a pydantic schema, and returns one `JudgeResult` per
request, in order. A failed judgement never raises: it is a typed "unscored" result, counted in `judge.stats`. Only
bad arguments raise (`ValueError`). The backends (`procrl.judges.client`, `procrl.judges.local`) implement
`Judge._request_payload` and `Judge._judge_uncached`; the cache lookups, counters and progress bar live here.
"""

from __future__ import annotations

import abc
import asyncio
import collections
import concurrent.futures
import functools
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Generic

from pydantic import BaseModel
from tqdm.auto import tqdm

from procrl.judges.cache import JudgeCache, request_cache_key
from procrl.judges.choices import TokenAlternatives, choice_probabilities
from procrl.judges.parse import T, parse_judgement
from procrl.utils import get_logger

logger = get_logger(__name__)

__all__ = ["Judge", "JudgeResult", "JudgeStats", "reply_result"]


@dataclass
class JudgeResult(Generic[T]):
    """The outcome of one judge request.

    Attributes:
        value: the validated pydantic object; None when unscored.
        unscored: the reason when `value` is None: "timeout", "http_<status>", "connection", "invalid_json",
            "duplicate_key", "schema_mismatch", "empty" or "error:<ExceptionName>"; None when scored.
        raw: the raw text of the final response (None when no response text arrived).
        cached: served from the on-disk cache (no request was sent).
        attempts: requests sent for this judgement (0 for a cache hit; 1 + retries otherwise).
        probs: for each closed-choice field of the schema (a bounded integer, a `Literal`, a bool; see
            `procrl.judges.choices`), the judge's distribution over its allowed values at the position where the
            reply chose it: `{field: {value_key: probability}}`, probabilities summing to 1 over the values the
            backend's top log-probs covered. None when the backend gave no log-probs (or for an unscored result).
        followed_schema: for a scored reply, True when its text was exactly one JSON document valid against the
            schema (what a backend that honours the schema returns) and False when it validated only after
            extraction from surrounding text (the backend ignored the schema); None for an unscored result (a
            reply cut by the token limit is not evidence that the schema was ignored).
    """

    value: T | None
    unscored: str | None
    raw: str | None = None
    cached: bool = False
    attempts: int = 0
    probs: dict[str, dict[str, float]] | None = None
    followed_schema: bool | None = None

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
        schema_ignored: scored fresh replies that were not one schema-valid JSON document (`followed_schema`
            False): the backend ignored the schema it was sent and the reply went through parse-and-extract.
        with_probs: judgements that carry choice probabilities (`JudgeResult.probs`).
        degraded: fresh replies obtained without a feature the judge asks for because the server refused it, by
            feature ("json_schema", "json_object", "logprobs"; `OpenAICompatibleJudge`).
    """

    requests: int = 0
    cache_hits: int = 0
    scored: int = 0
    unscored: collections.Counter = field(default_factory=collections.Counter)
    attempts: int = 0
    schema_ignored: int = 0
    with_probs: int = 0
    degraded: collections.Counter = field(default_factory=collections.Counter)
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
            self.schema_ignored += int(result.followed_schema is False)
            self.with_probs += int(result.probs is not None)
            if result.ok:
                self.scored += 1
            else:
                self.unscored[result.unscored or "unknown"] += 1

    def as_dict(self) -> dict[str, int]:
        """Flat counters for a logger: requests, cache_hits, scored, unscored (total), attempts, schema_ignored,
        with_probs, unscored/<reason>, degraded/<feature> (the last two only where non-zero).

        >>> stats = JudgeStats()
        >>> stats.record(JudgeResult(value=None, unscored="timeout", attempts=4))
        >>> stats.as_dict()  # doctest: +NORMALIZE_WHITESPACE
        {'requests': 1, 'cache_hits': 0, 'scored': 0, 'unscored': 1, 'attempts': 4, 'schema_ignored': 0,
         'with_probs': 0, 'unscored/timeout': 1}
        """
        with self._lock:
            out = {
                "requests": self.requests,
                "cache_hits": self.cache_hits,
                "scored": self.scored,
                "unscored": sum(self.unscored.values()),
                "attempts": self.attempts,
                "schema_ignored": self.schema_ignored,
                "with_probs": self.with_probs,
            }
            out.update({f"unscored/{reason}": n for reason, n in sorted(self.unscored.items())})
            out.update({f"degraded/{feature}": n for feature, n in sorted(self.degraded.items())})
        return out


def _check_schemas(schema: Any, n: int) -> list[type[BaseModel]]:
    schemas = [schema] * n if isinstance(schema, type) else schema
    if isinstance(schemas, (str, bytes, dict)) or not isinstance(schemas, Sequence) or len(schemas) != n:
        raise ValueError(
            f"schema must be a pydantic BaseModel subclass or a sequence of {n} of them (one per request), got "
            f"{schema!r}"
        )
    for one in schemas:
        if not (isinstance(one, type) and issubclass(one, BaseModel)):
            raise ValueError(f"schema must be a pydantic BaseModel subclass, got {one!r}")
    return list(schemas)


def _check_requests(requests: Any, schema: Any) -> list[list[dict]]:
    if isinstance(schema, type) and not issubclass(schema, BaseModel):
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
    _check_schemas(schema, len(checked))
    return checked


def reply_result(
    text: str | None, schema: type[T], *, attempts: int, tokens: TokenAlternatives | None = None
) -> JudgeResult[T]:
    """The `JudgeResult` of one reply text: validated against `schema` (`parse_judgement`), with
    `followed_schema` set and, when the backend gave per-token log-probs, the choice probabilities.

    Args:
        text: the reply text (None or blank: unscored "empty").
        schema: the reply's pydantic model.
        attempts: requests sent for it.
        tokens: the generated tokens, each `(token_text, [(alternative_text, logprob), ...])` with the top
            alternatives at that position (`procrl.judges.choices.choice_probabilities`); None when not available.
    """
    value, reason = parse_judgement(text, schema)
    # Known only for a scored reply: an unscored one may be a constrained reply cut by the token limit.
    followed = None if value is None else _is_one_document(text, schema)
    probs = None
    if value is not None and tokens is not None:
        try:
            probs = choice_probabilities(text, tokens, schema)
        except (ArithmeticError, ValueError, TypeError) as exc:  # bad log-probs lose the probabilities, not the score
            logger.debug("no choice probabilities for a reply (%s: %s)", type(exc).__name__, exc)
    return JudgeResult(value=value, unscored=reason, raw=text, attempts=attempts, probs=probs, followed_schema=followed)


def _is_one_document(text: str, schema: type[BaseModel]) -> bool:
    try:
        schema.model_validate_json(text.strip())
    except ValueError:  # pydantic.ValidationError is a ValueError
        return False
    return True


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
        self,
        requests: Sequence[list[dict]],
        schema: type[T] | Sequence[type[T]],
        *,
        desc: str = "judging",
        progress: bool = True,
    ) -> list[JudgeResult[T]]:
        """Judge every request; blocking.

        Args:
            requests: chat requests, each a list of `{"role": ..., "content": ...}` messages.
            schema: the pydantic model the reply must validate against, or one per request (e.g. a StepGap check
                whose quote is a choice among that step's evidence sentences).
            desc: progress-bar label.
            progress: show a tqdm progress bar.

        Returns:
            One `JudgeResult` per request, in the same order. Per-request failures are typed `unscored` results.

        Raises:
            ValueError: `requests` is not a sequence of non-empty message lists, or `schema` is not a pydantic model
                (or a sequence of one per request).

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
        self,
        requests: Sequence[list[dict]],
        schema: type[T] | Sequence[type[T]],
        *,
        desc: str = "judging",
        progress: bool = True,
    ) -> list[JudgeResult[T]]:
        """Async `judge` (same arguments, results and errors)."""
        _check_requests(requests, schema)
        return await self._ajudge_checked(requests, schema, desc=desc, progress=progress)

    async def _ajudge_checked(
        self, requests: Sequence[list[dict]], schema: type[T] | Sequence[type[T]], *, desc: str, progress: bool
    ) -> list[JudgeResult[T]]:
        checked = _check_requests(requests, schema)
        schemas = _check_schemas(schema, len(checked))
        payloads = [self._request_payload(messages, one) for messages, one in zip(checked, schemas, strict=True)]
        keys = [request_cache_key(p) for p in payloads]
        results: list[JudgeResult[T] | None] = [None] * len(checked)
        with tqdm(total=len(checked), desc=desc, disable=not progress, unit="req") as bar:
            todo = []
            for i, key in enumerate(keys):
                hit = self.cache.get(key, schemas[i]) if self.cache is not None else None
                if hit is not None:
                    value, raw, probs = hit
                    results[i] = JudgeResult(value=value, unscored=None, raw=raw, cached=True, attempts=0, probs=probs)
                    self.stats.record(results[i])
                    bar.update(1)
                else:
                    todo.append(i)

            def finish(j: int, result: JudgeResult[T]) -> None:
                i = todo[j]
                if result.ok and self.cache is not None:
                    try:
                        self.cache.put(keys[i], payloads[i], result.value, result.raw, probs=result.probs)
                    except OSError as exc:  # a full disk loses the cache entry, not the judgement
                        logger.warning("could not write judge cache file (%s)", exc)
                results[i] = result
                self.stats.record(result)
                bar.update(1)

            if todo:
                await self._judge_uncached([checked[i] for i in todo], [schemas[i] for i in todo], finish)
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
    async def _judge_uncached(self, requests: list[list[dict]], schemas: list[type[T]], finish) -> None:
        """Judge `requests` (request j against `schemas[j]`), calling `finish(j, JudgeResult)` exactly once per
        request index j (any order)."""


def _schema_fingerprint(schema: type[BaseModel]) -> dict:
    return {"name": schema.__name__, "json_schema": schema.model_json_schema()}
