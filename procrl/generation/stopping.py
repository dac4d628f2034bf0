"""Ending a completion: EOS, stop strings, length (core layer; the one rule of procrl, for every engine, the search
episodes' turns and the judges' replies).

`cut_completion` decides after generation where a completion ends (`eos_length`: after its first EOS id; then
`first_stop`: after the first token that completes a stop string); `completion_lengths` applies the EOS part to a
batch of generated ids; `stop_criteria` ends a transformers `generate` row as soon as the stop-string part would,
so no tokens are wasted past a stop string; `strip_stop` drops a stop string and what follows it from a completion's
text (the text of a completion ended by a stop string may run past it).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import StoppingCriteria, StoppingCriteriaList

__all__ = [
    "StopInCompletion",
    "completion_lengths",
    "cut_completion",
    "eos_length",
    "first_stop",
    "stop_criteria",
    "strip_stop",
]


def eos_length(token_ids: Sequence[int], eos_ids: Sequence[int]) -> int | None:
    """Length of a completion that ends at its first EOS id, that EOS included; None when it holds no EOS id.

    >>> eos_length([5, 2, 7, 2], eos_ids=[2]), eos_length([5, 7], eos_ids=[2])
    (2, None)
    """
    eos = set(eos_ids)
    return next((k + 1 for k, token in enumerate(token_ids) if token in eos), None)


def completion_lengths(sequences: torch.Tensor, eos_ids: Sequence[int]) -> list[int]:
    """Length of each row of `(B, T)` generated ids up to and including the first EOS (T when none): `eos_length`
    per row."""
    return [eos_length(row, eos_ids) or len(row) for row in sequences.tolist()]


def cut_completion(
    token_ids: Sequence[int], *, eos_ids: Sequence[int], stop: Sequence[str], tokenizer
) -> tuple[int, str]:
    """Where a completion ends and why: `(length in tokens, finish_reason)`.

    The completion ends after the first EOS id ("eos"), or earlier after the first token k such that a stop string
    occurs in `decode(token_ids[:k], skip_special_tokens=True)` ("stop"); otherwise it keeps every token
    ("length"). Only the completion's own text is searched, never the prompt's.
    """
    cut = eos_length(token_ids, eos_ids)
    cut, reason = (len(token_ids), "length") if cut is None else (cut, "eos")
    if stop:
        k_stop = first_stop(token_ids[:cut], stop, tokenizer)
        if k_stop is not None:
            cut, reason = k_stop, "stop"
    return cut, reason


def first_stop(token_ids: Sequence[int], stop: Sequence[str], tokenizer) -> int | None:
    """Smallest k such that a stop string is in decode(token_ids[:k]); None if none is (binary search: containing a
    stop string is monotone in k because a longer prefix decodes to a longer text)."""

    def has_stop(k: int) -> bool:
        text = tokenizer.decode(list(token_ids[:k]), skip_special_tokens=True)
        return any(s in text for s in stop)

    if not token_ids or not has_stop(len(token_ids)):
        return None
    lo, hi = 1, len(token_ids)  # has_stop(hi) holds
    while lo < hi:
        mid = (lo + hi) // 2
        if has_stop(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


class StopInCompletion(StoppingCriteria):
    """True for each row whose generated text (after `prompt_width` left-padded prompt columns) contains a stop
    string: the same predicate as `cut_completion`. Returns a `(B,)` bool tensor on the ids' device."""

    def __init__(self, tokenizer, stop: Sequence[str], prompt_width: int):
        self.tokenizer, self.stop, self.prompt_width = tokenizer, tuple(stop), prompt_width

    def __call__(self, input_ids: torch.LongTensor, scores, **kwargs) -> torch.BoolTensor:
        texts = self.tokenizer.batch_decode(input_ids[:, self.prompt_width :].tolist(), skip_special_tokens=True)
        return torch.tensor([any(s in t for s in self.stop) for t in texts], dtype=torch.bool, device=input_ids.device)


def stop_criteria(tokenizer, stop: Sequence[str], prompt_width: int) -> StoppingCriteriaList:
    """A `StoppingCriteriaList` that ends a row as soon as its generated text (after `prompt_width` left-padded
    prompt columns) contains a stop string: the same predicate as `cut_completion`. transformers' own
    `stop_strings` would also match text that starts in the prompt, which we must not do."""
    return StoppingCriteriaList([StopInCompletion(tokenizer, stop, prompt_width)])


def strip_stop(text: str, stop: Sequence[str]) -> str:
    """`text` cut before each stop string in turn (each one's first occurrence, and what follows it, dropped): the
    answer text of a completion, whose `Rollout.text` may run past the stop string that ended it.

    >>> strip_stop("x = 2.\\nQuestion: next", ("\\nQuestion:",))
    'x = 2.'
    """
    for s in stop:
        pos = text.find(s)
        if pos >= 0:
            text = text[:pos]
    return text
