"""The judges' on-disk cache (core layer): one JSON file per validated judgement.

With `cache_dir`, one JSON file per request at `<cache_dir>/<key[:2]>/<key>.json`, written atomically (temporary
file + `os.replace`), so reruns cost nothing and concurrent processes never read a half-written file. The key
(`request_cache_key`) is the SHA-256 of the canonical JSON of the full request: backend, model id, messages,
temperature, token limit, response format, extra body, and the schema's name and JSON schema (the server URL and
the API key are not part of it). Only validated judgements are cached, so failures are retried on the next run.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pydantic
from pydantic import BaseModel

from procrl.judges.parse import T, extract_json_object
from procrl.utils import get_logger

logger = get_logger(__name__)

__all__ = ["JudgeCache", "request_cache_key"]


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

    def get(self, key: str, schema: type[T]) -> tuple[T, str | None, dict | None] | None:
        """`(value, raw, probs)` of a cached judgement, or None on a miss (an unreadable or invalid file is a miss, and
        so is one whose raw reply repeats a JSON key: `parse_judgement` would now call it unscored, `duplicate_key`).
        `probs` is the judgement's choice probabilities (`JudgeResult.probs`), None when it had none."""
        path = self.path(key)
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
            if record.get("key") != key:
                raise ValueError("key mismatch")
            probs = record.get("probs")
            if probs is not None and not isinstance(probs, dict):
                raise ValueError("probs is not an object")
            # Validated from JSON, as the reply was: strict schemas accept a JSON string for an enum field.
            value = schema.model_validate_json(_canonical_json(record["value"]))
            if isinstance(record.get("raw"), str):
                extract_json_object(record["raw"])  # a reply cached before repeated keys were refused: a miss
            return value, record.get("raw"), probs
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError, AttributeError, pydantic.ValidationError) as exc:
            logger.warning("ignoring unreadable judge cache file %s (%s)", path, type(exc).__name__)
            return None

    def put(self, key: str, payload: dict, value: BaseModel, raw: str | None, *, probs: dict | None = None) -> None:
        """Store one validated judgement and its choice probabilities (the request payload is kept for inspection;
        it holds no API key)."""
        record = {"key": key, "request": payload, "value": value.model_dump(mode="json"), "raw": raw, "probs": probs}
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
