"""Problems, trajectories and their prefixes: reference solutions as steps, and cuts at step boundaries and token
fractions that keep every prefix's ids a strict prefix of the trajectory's ids."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from procrl.rewards.steps import split_steps, tokenize_steps


@dataclass
class Problem:
    problem_id: str
    question: str
    prompt: list | str  # the dataset's chat prompt (one-shot exchange)
    answer: str  # gold as the source gives it
    solution: str = ""  # reference solution ("" when the source has none)


@dataclass
class Trajectory:
    problem_id: str
    index: int
    source: str  # "policy" | "reference"
    steps: list[str]  # text pieces that tile the trajectory
    prefix_keys: list[str] = field(default_factory=list)  # the prefixes cut from it, shortest first

    @property
    def text(self) -> str:
        return "".join(self.steps)


@dataclass
class Prefix:
    key: str
    problem_id: str
    pieces: list[str]
    n_tokens: int  # length in the first student's tokenizer (trajectory part only)
    at_step: bool = False  # ends at a step boundary of a trajectory it was cut from (whole steps only)

    @property
    def text(self) -> str:
        return "".join(self.pieces)


_CALC = re.compile(r"<<[^<>]*>>")
_GSM_FINAL = re.compile(r"^\s*####\s*(.+?)\s*$")


def reference_steps(solution: str, separator: str = "\n\n") -> list[str]:
    """Steps of a data set's reference solution, as text pieces joined by `separator`.

    GSM8K style (a line "#### N" at the end): one step per non-empty line, calculator annotations `<<...>>`
    removed, the "#### N" line becomes "The answer is N." (the phrase our outcome check reads). Other
    solutions (MATH) are split with `split_steps`. An empty solution gives [].
    """
    lines = [line.strip() for line in solution.strip().splitlines() if line.strip()]
    if lines and _GSM_FINAL.match(lines[-1]):
        final = _GSM_FINAL.match(lines[-1]).group(1)
        body = [_CALC.sub("", line) for line in lines[:-1]]
        steps = [*body, f"The answer is {final}."]
        return [step + separator for step in steps[:-1]] + [steps[-1]]
    return [s.text for s in split_steps(solution.strip(), separator)]


def _clean_cut(tokenizer, ids: Sequence[int], cut: int, text: str) -> tuple[int, str]:
    """Largest c <= cut whose decoded ids[:c] is a prefix of `text` (byte-level BPE can split a character)."""
    while cut > 0:
        decoded = tokenizer.decode(list(ids[:cut]), skip_special_tokens=True)
        if text.startswith(decoded) and decoded:
            return cut, decoded
        cut -= 1
    return 0, ""


def cut_trajectory(
    tokenizer, steps: Sequence[str], fractions: Sequence[float], at_steps: bool = True, max_step_cuts: int = 8
) -> list[tuple[list[str], int]]:
    """Prefixes of one trajectory as (pieces, n_tokens), shortest first, without duplicates.

    Step cuts end after step k (k = 1..K, the full trajectory included; at most `max_step_cuts`, evenly spaced,
    the last kept). Fraction cuts end at token floor(f·L) of the piecewise tokenization (L = all trajectory
    tokens), moved back to the nearest token whose decoded text is a prefix of the trajectory text; their
    pieces are the whole steps before the cut plus the partial step. Token counts are in `tokenizer`.
    """
    steps = [s for s in steps if s]
    if not steps:
        return []
    ids, boundaries = tokenize_steps(tokenizer, steps)
    text = "".join(steps)
    cuts: dict[str, tuple[list[str], int]] = {}
    if at_steps:
        chosen = list(range(len(steps)))
        if len(chosen) > max_step_cuts:
            picks = (
                {round(i * (len(steps) - 1) / (max_step_cuts - 1)) for i in range(max_step_cuts)}
                if max_step_cuts > 1
                else set()
            )
            chosen = sorted(picks | {len(steps) - 1})
        for k in chosen:
            cuts.setdefault("".join(steps[: k + 1]), (list(steps[: k + 1]), boundaries[k]))
    starts = [0, *boundaries[:-1]]
    for fraction in fractions:
        cut, decoded = _clean_cut(tokenizer, ids, math.floor(fraction * len(ids)), text)
        if cut == 0:
            continue
        k = max(i for i, start in enumerate(starts) if start < cut)  # the step the cut falls in
        whole = steps[:k]
        partial = decoded[len("".join(whole)) :]
        pieces = [*whole, partial] if partial else list(whole)
        if pieces:
            cuts.setdefault(decoded, (pieces, cut))
    return sorted(cuts.values(), key=lambda item: item[1])
