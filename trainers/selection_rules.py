"""The pure selection rules of best-of-N (no torch, no models): `procrl select` (`procrl.trainers.selection_scorers`)
and `procrl bestofn` (`procrl.trainers.bestofn`) pick with the same functions.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Sequence

__all__ = ["select_argmax", "select_majority", "select_random"]


def select_argmax(scores: Sequence[float | None]) -> int | None:
    """Index of the highest score; ties go to the earliest; None and NaN are never picked (None if nothing is left).

    >>> select_argmax([0.1, None, 0.7, 0.7])
    2
    >>> select_argmax([None, float("nan")]) is None
    True
    """
    best, best_value = None, -math.inf
    for i, value in enumerate(scores):
        if value is None or not math.isfinite(value):
            continue
        if best is None or value > best_value:
            best, best_value = i, value
    return best


def select_majority(answers: Sequence[str | None]) -> int | None:
    """Index of the first candidate whose extracted answer is the most frequent one (majority vote).

    Answers are compared as strings (`extract_answer` already makes numbers canonical: "1,250" -> "1250"). Ties go
    to the answer whose first occurrence comes first; candidates without an answer (None) do not vote; None when no
    candidate has an answer.

    >>> select_majority(["4", None, "5", "5", "4"])  # 4 and 5 tie with two votes; "4" appears first
    0
    >>> select_majority([None, "7", "3", "3"])
    2
    """
    counts = Counter(a for a in answers if a is not None)
    if not counts:
        return None
    top = max(counts.values())
    return next(i for i, a in enumerate(answers) if a is not None and counts[a] == top)


def select_random(n: int, seed: int, key: str) -> int:
    """A uniformly drawn index in [0, n), reproducible per (seed, key) and independent of the problem order.

    Raises:
        ValueError: n < 1.
    """
    if n < 1:
        raise ValueError(f"select_random needs at least one candidate, got n={n}")
    return random.Random(f"{seed}:{key}").randrange(n)
