"""Parsing a judge's reply (core layer): the first JSON object in the text, validated against a pydantic schema.

Small models wrap JSON in prose or ```json fences, so the reply's first complete JSON object is taken and validated
with `schema.model_validate`. NaN/Infinity are rejected (a judge score is never NaN), and so is an object that repeats
a key at any depth (`{"score": 1, "score": 5}`: Python's json keeps the last, so the score would depend on key
order). Invalid JSON is not retried: decoding is greedy (temperature 0), so a retry would return the same text.
"""

from __future__ import annotations

import collections
import json
from typing import Any, TypeVar

import pydantic
from pydantic import BaseModel

T = TypeVar("T", bound=BaseModel)

__all__ = ["T", "DuplicateKeyError", "extract_json_object", "parse_judgement"]


class DuplicateKeyError(ValueError):
    """The first JSON object of a reply names a key twice in one object (at any depth)."""


class _RepeatedKeys(dict):
    """A decoded JSON object that named `repeated` keys more than once (the last value of each kept)."""

    repeated: list[str]


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-finite JSON number {name}")


def _object_from_pairs(pairs: list[tuple[str, Any]]) -> dict:
    obj = dict(pairs)
    if len(obj) == len(pairs):
        return obj
    marked = _RepeatedKeys(obj)  # marked, not raised: whether the enclosing object is complete is not known yet
    marked.repeated = [key for key, n in collections.Counter(k for k, _ in pairs).items() if n > 1]
    return marked


_DECODER = json.JSONDecoder(parse_constant=_reject_constant, object_pairs_hook=_object_from_pairs)


def _repeated_key(value: Any) -> str | None:
    """A key that some object within the decoded `value` repeats (depth first), or None."""
    if isinstance(value, _RepeatedKeys):
        return value.repeated[0]
    children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    return next((key for key in map(_repeated_key, children) if key is not None), None)


def extract_json_object(text: str) -> dict | None:
    """The first JSON object in `text` (prose, ```json fences and trailing text around it are ignored).

    Scans each "{" from the left and takes the first one that starts a complete JSON object (NaN and Infinity make
    it invalid; a repeated key does not). None when there is none. That object is the reply: when it repeats a key
    in any of its objects, `DuplicateKeyError` is raised, never a later "{" (such as the inner object of the
    repeated key) returned in its place, since which of the values the judge meant is unknown.

    Raises:
        DuplicateKeyError: the first complete object names a key twice in one object, at any depth.

    >>> extract_json_object('Sure! ```json\\n{"score": 4}\\n``` Hope this helps.')
    {'score': 4}
    >>> extract_json_object('{"score": 4')  # cut off by the token limit
    >>> extract_json_object('{"a": {"score": 1, "score": 5}}')
    Traceback (most recent call last):
    ...
    procrl.judges.parse.DuplicateKeyError: the JSON object at character 0 repeats the key 'score'
    """
    start = text.find("{")
    while start != -1:
        try:
            obj, _ = _DECODER.raw_decode(text, start)
        except ValueError:  # JSONDecodeError or a rejected constant
            pass
        else:
            if isinstance(obj, dict):
                key = _repeated_key(obj)
                if key is not None:
                    raise DuplicateKeyError(f"the JSON object at character {start} repeats the key {key!r}")
                return obj
        start = text.find("{", start + 1)
    return None


def parse_judgement(text: str | None, schema: type[T]) -> tuple[T | None, str | None]:
    """Validate a reply against `schema`: `(value, None)` or `(None, reason)`.

    Reasons: "empty" (no text or only whitespace), "invalid_json" (no JSON object in it), "duplicate_key" (its first
    JSON object repeats a key, at any depth: `extract_json_object`), "schema_mismatch" (an object that
    `schema.model_validate` rejects).

    >>> class Score(BaseModel):
    ...     score: int
    >>> parse_judgement('The score: {"score": 3}', Score)
    (Score(score=3), None)
    >>> parse_judgement('{"grade": 3}', Score)
    (None, 'schema_mismatch')
    >>> parse_judgement('{"score": 1, "score": 5}', Score)
    (None, 'duplicate_key')
    """
    if text is None or not text.strip():
        return None, "empty"
    try:
        obj = extract_json_object(text)
    except DuplicateKeyError:
        return None, "duplicate_key"
    if obj is None:
        return None, "invalid_json"
    try:
        return schema.model_validate(obj), None
    except pydantic.ValidationError:
        return None, "schema_mismatch"
