"""Steps and token boundaries (part of `procrl.rewards.steps`): sampled completions and text we build.

* **Sampled completions**: `token_steps` / `token_step_boundaries` keep the sampled ids and find each token's
  character offsets by (incremental) cumulative decoding (`token_char_offsets`); sampled text is never re-encoded.
* **Text we build**: `tokenize_steps` tokenizes each piece separately and concatenates the ids, so every step
  prefix's ids are a strict prefix of the full ids.

Token boundaries are 0-based, end-exclusive token indices (see `procrl.rewards.steps`).
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Sequence
from typing import Any

from procrl.rewards.steps.split import DEFAULT_SEPARATOR, Step, split_steps

__all__ = ["token_char_offsets", "token_step_boundaries", "token_steps", "tokenize_steps"]

_REPLACEMENT_CHAR = "\ufffd"


# ----------------------------------------------------------------------------------------------------------
# Token boundaries of sampled completions (never re-encode)
# ----------------------------------------------------------------------------------------------------------


def _decode(tokenizer: Any, ids: Sequence[int], skip_special_tokens: bool) -> str:
    return tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)


def _char_ends_incremental(tokenizer: Any, ids: list[int], text: str, skip_special_tokens: bool) -> list[int] | None:
    """Per-token end offsets by windowed incremental decoding (linear time), or None when a window's decode does
    not agree with `text` (e.g. a tokenizer whose clean-up rewrites earlier characters).

    The window starts one committed chunk back (as in vLLM's incremental detokenizer) so that decoders which
    treat a leading space specially see the same context. A window whose decode ends in U+FFFD stops
    mid-character (byte-level BPE): the complete characters before it count, the partial one waits for the
    token that completes it.
    """
    ends: list[int] = []
    committed = 0  # characters of `text` produced by ids[:anchor]
    context = anchor = 0  # ids[context:anchor] is the previous committed chunk; ids[:anchor] ends on a character
    context_text = ""
    best = 0
    for i in range(len(ids)):
        window = _decode(tokenizer, ids[context : i + 1], skip_special_tokens)
        if not window.startswith(context_text):
            return None
        complete = not window.endswith(_REPLACEMENT_CHAR)
        stable = window if complete else window.rstrip(_REPLACEMENT_CHAR)
        extra = stable[len(context_text) :]
        if not text.startswith(extra, committed):
            return None
        best = max(best, committed + len(extra))
        ends.append(best)
        if complete:
            committed += len(extra)
            context, anchor = anchor, i + 1
            context_text = _decode(tokenizer, ids[context:anchor], skip_special_tokens)
    if ends:
        ends[-1] = len(text)  # a trailing incomplete or genuinely invalid byte sequence ends with the last token
    return ends


def _char_ends_cumulative(tokenizer: Any, ids: list[int], text: str, skip_special_tokens: bool) -> list[int]:
    """Per-token end offsets from full cumulative decodes (quadratic; exact for any tokenizer): the end of token
    i is the length of the common prefix of decode(ids[:i+1]) with `text`, made monotone."""
    ends: list[int] = []
    best = 0
    for i in range(len(ids)):
        prefix = _decode(tokenizer, ids[: i + 1], skip_special_tokens)
        best = max(best, len(os.path.commonprefix([prefix, text])))
        ends.append(best)
    if ends:
        ends[-1] = len(text)
    return ends


def token_char_offsets(
    token_ids: Sequence[int], tokenizer: Any, *, skip_special_tokens: bool = True
) -> tuple[str, list[tuple[int, int]]]:
    """Decoded text and each token's character span in it, by cumulative decoding (never re-encoding).

    Token i spans characters `[start_i, end_i)` (0-based, end-exclusive) where `end_i` is the number of
    characters of the text fully produced by `token_ids[:i+1]` and `start_i = end_{i-1}`. A token that stops
    in the middle of a multi-byte character (byte-level BPE) gets the characters completed so far only, so the
    character is attributed to the token that completes it; spans are contiguous, monotone and cover the text.
    Special tokens are zero-width when `skip_special_tokens=True` (the default, matching the completion text
    TRL decodes with `batch_decode(..., skip_special_tokens=True)`); with False their text counts like any
    other token. The default fast path decodes small windows (linear time) and is checked against the full
    decode; a quadratic exact fallback is used when they disagree.

    Returns:
        (text, spans): `text = tokenizer.decode(token_ids, skip_special_tokens=...)`, one span per token.

    >>> from transformers import AutoTokenizer
    >>> from procrl.models import resolve_model
    >>> tok = AutoTokenizer.from_pretrained(resolve_model("default"))
    >>> ids = tok.encode("x😀", add_special_tokens=False)  # the emoji's 4 bytes span three tokens
    >>> token_char_offsets(ids, tok)
    ('x😀', [(0, 1), (1, 1), (1, 1), (1, 2)])
    """
    ids = [int(t) for t in token_ids]
    text = _decode(tokenizer, ids, skip_special_tokens)
    ends = _char_ends_incremental(tokenizer, ids, text, skip_special_tokens)
    if ends is None:
        ends = _char_ends_cumulative(tokenizer, ids, text, skip_special_tokens)
    spans = [(ends[i - 1] if i else 0, end) for i, end in enumerate(ends)]
    return text, spans


def token_steps(
    token_ids: Sequence[int],
    tokenizer: Any,
    steps: Sequence[Step] | None = None,
    separator: str = DEFAULT_SEPARATOR,
    *,
    skip_special_tokens: bool = True,
) -> tuple[list[Step], list[int]]:
    """Steps of a SAMPLED completion and their token boundaries, aligned one to one.

    The text is `tokenizer.decode(token_ids, skip_special_tokens=skip_special_tokens)` (the default True is
    what TRL passes to reward functions as the completion); token character spans come from
    `token_char_offsets` — the sampled ids are never re-encoded. Each token is assigned to the step
    containing its first character (so a sampled "\\n\\n" or ".\\n\\n" token belongs to the step it ends, and
    zero-width tokens — EOS, bytes of an unfinished character — go to the step of the next character, or the
    last step at the end of the text). Tokens before the first step's start belong to step 0.

    When a step gets no token (one token straddles the whole step), it is merged into the previous step, so the
    returned steps can be fewer than the input steps; the returned steps and boundaries always have equal
    length. Score the returned steps when per-step values must line up with the boundaries.

    Args:
        token_ids: the sampled completion ids (EOS included or not).
        tokenizer: a transformers tokenizer (uses `decode` only).
        steps: steps of the decoded text (spans must match it: `text[s.start:s.end] == s.text`, starts
            strictly increasing); None splits the decoded text with `split_steps(text, separator)`.
        separator: used only when `steps` is None.
        skip_special_tokens: how the text the steps refer to was decoded.

    Returns:
        (steps, boundaries): boundary k is the exclusive token index where step k ends (`token_ids[:b_k]` is
        the prefix through step k); strictly increasing, the last equals `len(token_ids)`. A whitespace-only
        text (no steps) or empty ids give ([], []).

    Raises:
        ValueError: `steps` do not match the decoded text.

    >>> from transformers import AutoTokenizer
    >>> from procrl.models import resolve_model
    >>> tok = AutoTokenizer.from_pretrained(resolve_model("default"))
    >>> nn = tok.convert_tokens_to_ids("ĊĊ")  # SmolLM2 samples "\\n\\n" as one token
    >>> ids = tok.encode("Step one.", add_special_tokens=False) + [nn] + tok.encode("Step two.", add_special_tokens=False) + [tok.eos_token_id]
    >>> steps, bounds = token_steps(ids, tok)
    >>> [s.text for s in steps], bounds, len(ids)
    (['Step one.\\n\\n', 'Step two.'], [4, 8], 8)
    """
    text, spans = token_char_offsets(token_ids, tokenizer, skip_special_tokens=skip_special_tokens)
    if steps is None:
        steps = split_steps(text, separator)
    else:
        steps = list(steps)
        for k, step in enumerate(steps):
            if step.end > len(text) or text[step.start : step.end] != step.text:
                raise ValueError(
                    f"token_steps: step {k} {step.text[:40]!r} at [{step.start}, {step.end}) does not match the text "
                    f"decoded from the ids (skip_special_tokens={skip_special_tokens}); split the decoded text"
                )
            if k and step.start <= steps[k - 1].start:
                raise ValueError("token_steps: step starts must be strictly increasing")
    if not steps or not spans:
        return [], []
    starts = [s.start for s in steps]
    counts = [0] * len(steps)
    for start, _ in spans:
        counts[max(bisect.bisect_right(starts, start) - 1, 0)] += 1
    out_steps: list[Step] = []
    boundaries: list[int] = []
    total = 0
    for step, count in zip(steps, counts, strict=True):
        total += count
        if count == 0 and out_steps:  # straddled: merge into the previous step
            prev = out_steps[-1]
            out_steps[-1] = Step(text=text[prev.start : step.end], start=prev.start, end=step.end)
            continue
        out_steps.append(step)
        boundaries.append(total)
    # Characters after the last step's end (only when steps were given without tiling) stay outside any step.
    return out_steps, boundaries


def token_step_boundaries(
    token_ids: Sequence[int],
    tokenizer: Any,
    steps: Sequence[Step] | None = None,
    separator: str = DEFAULT_SEPARATOR,
    *,
    skip_special_tokens: bool = True,
) -> list[int]:
    """Token boundaries of a SAMPLED completion's steps: `token_steps(...)[1]` (see there for the conventions).

    One boundary per step (exclusive token index, strictly increasing, last == len(token_ids)) except when a
    step gets no token and is merged into the previous one: then the list is shorter than the step list. Use
    `token_steps` to get the merged steps aligned with the boundaries.

    >>> from transformers import AutoTokenizer
    >>> from procrl.models import resolve_model
    >>> tok = AutoTokenizer.from_pretrained(resolve_model("default"))
    >>> ids = tok.encode("First step ends in a letter\\n\\nSecond step", add_special_tokens=False)
    >>> token_step_boundaries(ids, tok), len(ids)
    ([8, 10], 10)
    """
    return token_steps(token_ids, tokenizer, steps, separator, skip_special_tokens=skip_special_tokens)[1]


# ----------------------------------------------------------------------------------------------------------
# Text we build: tokenize piece by piece
# ----------------------------------------------------------------------------------------------------------


def tokenize_steps(
    tokenizer: Any, steps: Sequence[str | Step], prefix_ids: Sequence[int] = ()
) -> tuple[list[int], list[int]]:
    """Tokenize text WE build step by step: each piece separately (`add_special_tokens=False`), ids concatenated.

    Args:
        tokenizer: a transformers tokenizer (uses `encode`).
        steps: the pieces (strings or `Step`s, whose `.text` is used), each including its own separator, e.g.
            `[s.text for s in split_steps(trajectory)]`; every piece must produce at least one token.
        prefix_ids: ids placed before the first piece (e.g. a rendered chat prompt), copied unchanged.

    Returns:
        (ids, boundaries): `ids = prefix_ids + ids(piece_0) + ids(piece_1) + ...`; boundary k is the exclusive
        token index after piece k, counted in `ids` (so it includes `len(prefix_ids)`); `ids[:boundaries[k]]`
        are the ids of the prefix through piece k, a strict prefix of `ids` for every k but the last, whose
        boundary is `len(ids)`.

    Raises:
        ValueError: a piece tokenizes to no ids, or the prefix property fails (guards refactors).

    >>> from transformers import AutoTokenizer
    >>> from procrl.models import resolve_model
    >>> tok = AutoTokenizer.from_pretrained(resolve_model("default"))
    >>> ids, bounds = tokenize_steps(tok, ["Step one.\\n\\n", "Step two."])
    >>> bounds, tok.decode(ids[: bounds[0]])
    ([4, 7], 'Step one.\\n\\n')
    """
    ids = [int(t) for t in prefix_ids]
    boundaries: list[int] = []
    prefixes: list[list[int]] = []
    for k, piece in enumerate(steps):
        piece_text = piece.text if isinstance(piece, Step) else piece
        piece_ids = tokenizer.encode(piece_text, add_special_tokens=False)
        if not piece_ids:
            raise ValueError(f"tokenize_steps: step {k} ({piece_text!r}) tokenizes to no ids")
        prefixes.append(ids + [int(t) for t in piece_ids])
        ids = prefixes[-1]
        boundaries.append(len(ids))
    for k, (prefix, boundary) in enumerate(zip(prefixes, boundaries, strict=True)):
        if ids[:boundary] != prefix or (k < len(boundaries) - 1 and boundary >= len(ids)):
            raise ValueError(f"tokenize_steps: the ids of prefix {k} are not a strict prefix of the full ids")
    return ids, boundaries
