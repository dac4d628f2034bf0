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
from procrl.judges.parse import T
from procrl.utils import get_logger

logger = get_logger(__name__)

__all__ = ["Judge", "JudgeResult", "JudgeStats"]


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
