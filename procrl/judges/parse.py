"""Parsing a judge's reply (core layer): the first JSON object in the text, validated against a pydantic schema.

Small models wrap JSON in prose or ```json fences, so the reply's first complete JSON object is taken and validated
with `schema.model_validate`. NaN/Infinity are rejected (a judge score is never NaN). Invalid JSON is not retried:
decoding is greedy (temperature 0), so a retry would return the same text.
"""

from __future__ import annotations

import json
from typing import Any, TypeVar

import pydantic
from pydantic import BaseModel

T = TypeVar("T", bound=BaseModel)

__all__ = ["T", "extract_json_object", "parse_judgement"]


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
