"""The OpenAI chat-completions wire format (core layer): the request's `response_format` field for a pydantic
schema, and what `OpenAICompatibleJudge` reads from a response: the reply text, per-token log-probs as
`TokenAlternatives`, a Retry-After header, an error's text."""

from __future__ import annotations

import math
import re
from typing import Any

import openai
from pydantic import BaseModel

from procrl.judges.choices import TokenAlternatives

__all__ = [
    "NOT_A_COMPLETION",
    "MAX_RETRY_AFTER_S",
    "error_text",
    "response_format_field",
    "response_text",
    "response_tokens",
    "retry_after_s",
]

# Cap on a server's Retry-After (seconds), so a bad header cannot stall a training step.
MAX_RETRY_AFTER_S = 30.0
# A log-probability above this is not one (a server bug); a small positive rounding error is tolerated.
_MAX_LOGPROB = 1e-6


def response_format_field(fmt: str, schema: type[BaseModel]) -> dict | None:
    """The `response_format` request field: None for "none"."""
    if fmt == "none":
        return None
    if fmt == "json_object":
        return {"type": "json_object"}
    # OpenAI requires a name matching ^[a-zA-Z0-9_-]{1,64}$ (a generic model is named like "Model[int]").
    name = re.sub(r"[^a-zA-Z0-9_-]", "_", schema.__name__)[:64] or "reply"
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema.model_json_schema(), "strict": True}}


def error_text(exc: openai.APIStatusError) -> str:
    return f"{getattr(exc, 'param', None) or ''} {getattr(exc, 'message', '') or ''}"


NOT_A_COMPLETION = object()


def response_text(response: Any) -> Any:
    """The reply text of a chat completion; None when it has no text; `NOT_A_COMPLETION` for a non-JSON body
    (the openai client returns such bodies as a plain string)."""
    if isinstance(response, str):
        return NOT_A_COMPLETION
    choices = getattr(response, "choices", None)
    if not choices:
        return None
    message = getattr(choices[0], "message", None)
    content = getattr(message, "content", None)
    return content if isinstance(content, str) else None


def _finite(logprob: Any) -> bool:
    """A usable log-probability: a finite number <= ~0 (exp of a large one would overflow or exceed 1)."""
    return (
        isinstance(logprob, (int, float))
        and not isinstance(logprob, bool)
        and math.isfinite(logprob)
        and logprob <= _MAX_LOGPROB
    )


def response_tokens(response: Any) -> TokenAlternatives | None:
    """`choices[0].logprobs.content` (one `{token, logprob, top_logprobs: [{token, logprob}]}` per generated token)
    as `TokenAlternatives`, the chosen token added to its alternatives when the top-k leaves it out. None when the
    response has no log-probs or they are malformed (the judgement then has no probs; not an error)."""
    try:
        tokens: TokenAlternatives = []
        for entry in response.choices[0].logprobs.content or []:
            if not isinstance(entry.token, str):
                return None
            alternatives = [
                (alt.token, float(alt.logprob))
                for alt in entry.top_logprobs or []
                if isinstance(alt.token, str) and _finite(alt.logprob)
            ]
            if _finite(entry.logprob) and all(text != entry.token for text, _ in alternatives):
                alternatives.append((entry.token, float(entry.logprob)))
            tokens.append((entry.token, alternatives))
        return tokens or None
    except (AttributeError, IndexError, TypeError, ValueError):
        return None


def retry_after_s(response: Any) -> float | None:
    try:
        value = float(response.headers.get("retry-after"))
    except (AttributeError, TypeError, ValueError):
        return None
    return min(max(value, 0.0), MAX_RETRY_AFTER_S)
