"""Choice probabilities (core layer): a judge's distribution over the allowed values of a closed-choice field,
read from the per-token log-probs of its reply (G-Eval style). STUB: the real implementation follows."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

__all__ = ["TokenAlternatives", "choice_probabilities"]

# Per generated token: (token_text, [(alternative_text, logprob), ...]) with the top alternatives at that position.
TokenAlternatives = list[tuple[str, list[tuple[str, float]]]]


def choice_probabilities(text: str, tokens: TokenAlternatives, schema: type[BaseModel]) -> dict[str, Any] | None:
    return None
