"""Ending a completion: EOS, stop strings, length (core layer; one rule shared by every rollout engine).

`cut_completion` decides after generation where a completion ends; `stop_criteria` ends a transformers `generate`
row as soon as the same rule would, so no tokens are wasted past a stop string.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import StoppingCriteria, StoppingCriteriaList

__all__ = ["StopInCompletion", "cut_completion", "first_stop", "stop_criteria"]


def cut_completion(
    token_ids: Sequence[int], *, eos_ids: Sequence[int], stop: Sequence[str], tokenizer
) -> tuple[int, str]:
    """Where a completion ends and why: `(length in tokens, finish_reason)`.

    The completion ends after the first EOS id ("eos"), or earlier after the first token k such that a stop string
    occurs in `decode(token_ids[:k], skip_special_tokens=True)` ("stop"); otherwise it keeps every token
    ("length"). Only the completion's own text is searched, never the prompt's.
    """
    eos = set(eos_ids)
    cut, reason = len(token_ids), "length"
    for k, token in enumerate(token_ids):
        if token in eos:
            cut, reason = k + 1, "eos"
            break
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
