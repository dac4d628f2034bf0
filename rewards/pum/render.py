"""PUM input rendering (part of `procrl.rewards.pum`): one function for training and scoring.

`render_prefix(tokenizer, problem, prefix, max_length)` gives the chat template with one user message (the
problem) and the generation prompt, then the prefix's ids (tokenized piece by piece, `procrl.rewards.steps`) with no
end-of-turn token and a trailing EOS stripped, cut from the right to `max_length - 1` tokens (the problem is never
cut). The rules and why: see `procrl.rewards.pum`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from procrl.rewards.steps import DEFAULT_SEPARATOR, Step, split_steps, tokenize_steps

__all__ = ["RenderedPrefix", "prefix_pieces", "render_prefix", "render_prompt_ids", "strip_trailing_eos"]


@dataclass(frozen=True)
class RenderedPrefix:
    """A rendered (problem, prefix) input.

    Attributes:
        input_ids: token ids, `prompt ids + prefix ids`, at most `max_length - 1` long.
        boundaries: one per prefix piece: the exclusive token index in `input_ids` where the piece ends
            (`input_ids[:boundaries[k]]` is the input for "pieces 0..k"), non-decreasing, clipped to
            `len(input_ids)` when the prefix was cut; an empty piece repeats the previous boundary (or
            `prompt_length` for a first empty piece).
        prompt_length: tokens of the rendered prompt (chat template through the assistant header); the input for
            the empty prefix is `input_ids[:prompt_length]`.
        truncated_tokens: prefix tokens cut from the right to fit `max_length - 1` (0 when nothing was cut).
        complete: one per prefix piece: True when the piece's end lies within `input_ids` (every token of pieces
            0..k was kept), False when truncation cut the piece whole or in part. An empty piece is complete exactly
            when the piece before it is (a first empty piece always is: the prompt is never cut).
    """

    input_ids: list[int]
    boundaries: list[int]
    prompt_length: int
    truncated_tokens: int
    complete: list[bool]


def strip_trailing_eos(text: str, tokenizer: Any) -> str:
    """`text` without trailing EOS / pad token strings (and the whitespace around them), else unchanged.

    A full completion decoded with its end-of-turn token would otherwise be scored at a different position than
    in training: transformers pools at the rightmost non-pad token, and pad == eos for SmolLM2.

    >>> class Tok: eos_token = "<|im_end|>"; pad_token = "<|im_end|>"
    >>> strip_trailing_eos("x = 4.<|im_end|>\\n", Tok())
    'x = 4.'
    >>> strip_trailing_eos("x = 4.\\n\\n", Tok())
    'x = 4.\\n\\n'
    """
    markers = [m for m in (getattr(tokenizer, "eos_token", None), getattr(tokenizer, "pad_token", None)) if m]
    while True:
        stripped = text.rstrip()
        marker = next((m for m in markers if stripped.endswith(m)), None)
        if marker is None:
            return text
        text = stripped[: -len(marker)]


def prefix_pieces(prefix: str | Sequence[str | Step], separator: str = DEFAULT_SEPARATOR) -> list[str]:
    """The pieces a prefix is tokenized in: a string is split into steps (`split_steps`), a sequence is kept.

    Each piece keeps its own separator, so `"".join(pieces)` is the prefix text. A whitespace-only string gives
    [] (the empty prefix).

    >>> prefix_pieces("a = 1.\\n\\nb = 2.")
    ['a = 1.\\n\\n', 'b = 2.']
    >>> prefix_pieces(["a = 1.\\n\\n", "b = 2."])
    ['a = 1.\\n\\n', 'b = 2.']
    """
    if isinstance(prefix, str):
        return [step.text for step in split_steps(prefix, separator)]
    return [piece.text if isinstance(piece, Step) else str(piece) for piece in prefix]


def render_prompt_ids(tokenizer: Any, problem: str) -> list[int]:
    """Ids of the chat template with one user message (`problem`) and the assistant generation prompt.

    Raises:
        ValueError: the tokenizer has no chat template, or `problem` is not a non-empty string.
    """
    if not isinstance(problem, str) or not problem.strip():
        raise ValueError(f"render_prompt_ids: the problem must be a non-empty string, got {problem!r}")
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(
            "render_prompt_ids: the tokenizer has no chat template; PUM renders (problem, prefix) as a chat. Use an "
            "instruct model's tokenizer or set `tokenizer.chat_template`."
        )
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": problem}], add_generation_prompt=True, tokenize=False
    )
    return [int(t) for t in tokenizer.encode(text, add_special_tokens=False)]


def render_prefix(
    tokenizer: Any,
    problem: str,
    prefix: str | Sequence[str | Step],
    max_length: int | None,
    *,
    separator: str = DEFAULT_SEPARATOR,
    prompt_ids: Sequence[int] | None = None,
) -> RenderedPrefix:
    """Render (problem, prefix) for the PUM: chat prompt + prefix ids, no end-of-turn, cut to `max_length - 1`.

    See the module docstring for the rules (piecewise tokenization, trailing EOS stripped, the problem kept and the
    prefix cut from the right).

    Args:
        tokenizer: a transformers tokenizer with a chat template.
        problem: the problem text (the user message).
        prefix: the assistant's partial solution: a string (split into steps at `separator`) or its pieces (kept as
            given; an empty piece gets the previous boundary). "" or [] is the empty prefix.
        max_length: total token budget as in TRL's `RewardConfig.max_length`; the input keeps at most
            `max_length - 1` tokens. None: no truncation.
        separator: step separator used to split a string prefix (default "\\n\\n").
        prompt_ids: the ids of `render_prompt_ids(tokenizer, problem)` when already computed (a cache).

    Returns:
        A `RenderedPrefix` (token ids, per-piece boundaries, prompt length, tokens cut).

    Raises:
        ValueError: no chat template, an empty problem, `max_length < 2`, or a prompt longer than `max_length - 1`.

    >>> from transformers import AutoTokenizer
    >>> from procrl.models import resolve_model
    >>> tok = AutoTokenizer.from_pretrained(resolve_model("default"))
    >>> r = render_prefix(tok, "What is 2+2?", "2+2 = 4.\\n\\nThe answer is 4.", max_length=1024)
    >>> r.prompt_length, r.boundaries, r.truncated_tokens, tok.decode(r.input_ids[r.prompt_length - 4:])
    (37, [45, 51], 0, '<|im_start|>assistant\\n2+2 = 4.\\n\\nThe answer is 4.')
    """
    if max_length is not None and max_length < 2:
        raise ValueError(
            f"render_prefix: max_length must be >= 2 (the input keeps max_length - 1 tokens), got {max_length}"
        )
    prompt = [int(t) for t in prompt_ids] if prompt_ids is not None else render_prompt_ids(tokenizer, problem)
    pieces = prefix_pieces(prefix, separator)
    if pieces:
        pieces[-1] = strip_trailing_eos(pieces[-1], tokenizer)
    # tokenize_steps needs non-empty pieces; an empty piece (e.g. a trailing EOS only) repeats the previous boundary.
    nonempty = [piece for piece in pieces if piece]
    ids, nonempty_bounds = tokenize_steps(tokenizer, nonempty, prefix_ids=prompt) if nonempty else (list(prompt), [])
    bounds_iter = iter(nonempty_bounds)
    boundaries: list[int] = []
    for piece in pieces:
        boundaries.append(next(bounds_iter) if piece else (boundaries[-1] if boundaries else len(prompt)))

    budget = None if max_length is None else max_length - 1
    truncated = 0
    complete = [True] * len(boundaries)
    if budget is not None:
        if len(prompt) > budget:
            raise ValueError(
                f"render_prefix: the rendered problem alone has {len(prompt)} tokens, more than max_length - 1 = "
                f"{budget}; the problem is never cut. Raise max_length."
            )
        if len(ids) > budget:
            truncated = len(ids) - budget
            ids = ids[:budget]
            complete = [b <= budget for b in boundaries]  # unclipped ends: a piece ending at the budget is whole
            boundaries = [min(b, budget) for b in boundaries]
    return RenderedPrefix(
        input_ids=ids, boundaries=boundaries, prompt_length=len(prompt), truncated_tokens=truncated, complete=complete
    )
