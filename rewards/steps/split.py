"""Splitting text into reasoning steps (part of `procrl.rewards.steps`): character spans that tile the text.

`split_steps(text, separator)` splits at the separator (default "\\n\\n") where content lies on both sides, never
inside `$$...$$` or a fenced code block; the separator and the blank lines after it end the step they follow. The
units and conventions: see `procrl.rewards.steps`.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEFAULT_SEPARATOR", "Step", "split_steps", "step_prefixes"]

DEFAULT_SEPARATOR = "\n\n"

# Regions inside which a separator never splits: (opening delimiter, closing delimiter). An unclosed region
# runs to the end of the text (a completion cut mid-block keeps the block in one step).
_PROTECTED = (("```", "```"), ("$$", "$$"))


@dataclass(frozen=True)
class Step:
    """One reasoning step: a character span of the original text.

    Attributes:
        text: the step's characters, `original[start:end]`, including its trailing separator and blank lines
            (and, for step 0, any leading whitespace of the text).
        start: index of the step's first character in the original text (0-based, characters).
        end: exclusive end index in characters; equals the next step's `start` when steps tile the text.

    >>> step = Step(text="x = 2.\\n\\n", start=0, end=8)
    >>> step.stripped
    'x = 2.'
    """

    text: str
    start: int
    end: int

    def __post_init__(self) -> None:
        if self.start < 0 or self.end < self.start or self.end - self.start != len(self.text):
            raise ValueError(f"Step span [{self.start}, {self.end}) does not match a text of length {len(self.text)}")

    @property
    def stripped(self) -> str:
        """The step text without leading/trailing whitespace (the separator removed)."""
        return self.text.strip()


def _skip_protected(text: str, i: int) -> int | None:
    """If a protected region opens at character `i`, the index just after its closing delimiter (or len(text)
    when unclosed); otherwise None."""
    for opening, closing in _PROTECTED:
        if text.startswith(opening, i):
            close = text.find(closing, i + len(opening))
            return len(text) if close < 0 else close + len(closing)
    return None


def split_steps(text: str, separator: str = DEFAULT_SEPARATOR) -> list[Step]:
    """Split a reasoning text into steps at `separator`; the returned spans tile the text.

    Rules:
      * a separator splits only when the text before it (since the previous split) has non-whitespace content
        and non-whitespace content follows it; so runs of blank lines ("\\n\\n\\n\\n", "\\n \\n\\n"), a
        leading separator and a trailing separator never make empty or whitespace-only steps;
      * a run of whitespace and repeated separators after a splitting separator ends the previous step: the
        next step starts after the run's last separator or newline, i.e. at the beginning of the line holding
        its first non-whitespace character, or right after the separator when that character is on the
        separator's own line ("a\\n\\n  b" -> "a\\n\\n" | "  b", "x; y" with ";" -> "x;" | " y");
      * separators inside `$$...$$` display math or a fenced code block (```...```) do not split; an unclosed
        block runs to the end of the text;
      * an empty or whitespace-only text gives [].

    Args:
        text: the reasoning (e.g. a completion's text).
        separator: the step separator, non-empty (default "\\n\\n").

    Returns:
        Steps in order; `"".join(s.text for s in steps) == text` and offsets are characters (0-based,
        end-exclusive).

    >>> [s.text for s in split_steps("Let x = 2.\\n\\n\\n\\nThen 2x = 4.\\n\\n$$a\\n\\nb$$\\n\\nDone.")]
    ['Let x = 2.\\n\\n\\n\\n', 'Then 2x = 4.\\n\\n', '$$a\\n\\nb$$\\n\\n', 'Done.']
    >>> [(s.start, s.end) for s in split_steps("  a\\n\\nb\\n")]
    [(0, 5), (5, 7)]
    >>> split_steps(" \\n\\n ")
    []
    """
    if not separator:
        raise ValueError("split_steps: separator must be a non-empty string")
    n = len(text)
    if not text or text.isspace():
        return []
    starts = [0]
    has_content = False  # the current step holds a non-whitespace character
    i = 0
    while i < n:
        after = _skip_protected(text, i)
        if after is not None:
            has_content = True
            i = after
            continue
        if has_content and text.startswith(separator, i):
            # Skip whitespace and repeated separators; the next step starts after the last separator or
            # newline of that run (so indentation on the next step's own line stays with it).
            k = next_start = i + len(separator)
            while k < n:
                if text.startswith(separator, k):
                    k = next_start = k + len(separator)
                elif text[k].isspace():
                    k += 1
                    if text[k - 1] == "\n":
                        next_start = k
                else:
                    break
            if k >= n:  # only whitespace follows: it stays in the last step
                break
            starts.append(next_start)
            has_content = False
            i = next_start
            continue
        if not text[i].isspace():
            has_content = True
        i += 1
    ends = starts[1:] + [n]
    return [Step(text=text[a:b], start=a, end=b) for a, b in zip(starts, ends, strict=True)]


def step_prefixes(text: str, separator: str = DEFAULT_SEPARATOR) -> list[str]:
    """Cumulative texts of steps 1..k: element k is `text[:steps[k].end]` (each prefix ends with its separator).

    >>> step_prefixes("a\\n\\nb\\n\\nc")
    ['a\\n\\n', 'a\\n\\nb\\n\\n', 'a\\n\\nb\\n\\nc']
    """
    return [text[: step.end] for step in split_steps(text, separator)]
