"""The pure selection rules of best-of-N (no torch, no models): `procrl select`'s picks
(`procrl.evals.selection_scorers`) and its best-of-k curves (`procrl.evals.bestofn`) use the same functions.
"""

from __future__ import annotations

import functools
import math
import random
import re
from collections.abc import Sequence
from fractions import Fraction

from procrl.rewards.outcome import is_correct

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
    """Index of the first member of the largest class of equivalent answers (majority vote, self-consistency).

    ``answers``: one `extract_answer` value per candidate (None: no answer). Answers are grouped as the outcome check
    grades them (`procrl.rewards.outcome.is_correct`), so spellings of one answer vote together:

    * plain numbers (integers, decimals, ``p/q``, ``\\frac{p}{q}``, with a sign) by their exact value, a
      `fractions.Fraction` key: "5", "5.0" and "+5" are one answer, so are ``\\frac{1}{2}``, "0.5" and "1/2";
    * any other answer joins the first class (in order of first appearance) whose representative (its first member)
      it equals, checked by ``is_correct(r"\\boxed{<answer>}", <representative>)``: the representative is the gold
      side and the answer the prediction side, as in grading (math-verify under the outcome time limit; a timeout
      counts as different). A plain number is checked this way only against representatives that are not plain
      numbers (two different exact values never match); an answer identical to an earlier one joins its class.
      Answers the outcome check cannot read as a gold (prose such as "Monday") group only by identical strings.

    Ties between classes go to the class whose first member comes first; the index returned is that first member's.
    Candidates without an answer (None) do not vote; None when no candidate has an answer. Pairwise checks are
    cached (``_equivalent``), so repeated votes over subsets of the same answers cost dictionary look-ups.

    >>> select_majority([r"\\frac{1}{2}", "0.5", "1/2", "3", "3"])  # 1/2 has three votes, 3 has two
    0
    >>> select_majority(["4", None, "5", "5.0", "4"])  # 4 and 5 tie with two votes; 4 appears first
    0
    >>> select_majority([None, "7", "x+1", "1+x"])
    2
    >>> select_majority([None, None]) is None
    True
    """
    reps: list[int] = []  # the first member of each class, in order of first appearance
    votes: list[int] = []
    class_of: dict[str | Fraction, int] = {}  # an answer string, or a plain number's value -> its class
    for i, answer in enumerate(answers):
        if answer is None:
            continue
        value = _number_key(answer)
        c = class_of.get(answer, class_of.get(value))
        if c is None:
            # two plain numbers of different values never match: compare a number only with other representatives
            rivals = (k for k, r in enumerate(reps) if value is None or _number_key(answers[r]) is None)
            c = next((k for k in rivals if _equivalent(answers[reps[k]], answer)), None)
        if c is None:
            c = len(reps)
            reps.append(i)
            votes.append(0)
        votes[c] += 1
        class_of.setdefault(answer, c)
        if value is not None:
            class_of.setdefault(value, c)
    return reps[votes.index(max(votes))] if reps else None


_PLAIN_NUMBER = re.compile(
    r"(?P<sign>[-+]?)(?:(?P<decimal>\d+(?:\.\d+)?|\.\d+)|(?P<p>\d+)/(?P<q>\d+)|\\[dt]?frac\{(?P<fp>\d+)\}\{(?P<fq>\d+)\})"
)


@functools.lru_cache(maxsize=65536)
def _number_key(answer: str) -> Fraction | None:
    """The exact value of a plain number ("-5.00", "1/2", ``\\frac{1}{2}``), None for anything else (or a zero
    denominator)."""
    match = _PLAIN_NUMBER.fullmatch(answer.strip())
    if match is None:
        return None
    numerator, denominator = match["p"] or match["fp"], match["q"] or match["fq"]
    if match["decimal"] is not None:
        value = Fraction(match["decimal"])
    elif int(denominator) == 0:
        return None
    else:
        value = Fraction(int(numerator), int(denominator))
    return -value if match["sign"] == "-" else value


@functools.lru_cache(maxsize=65536)
def _equivalent(representative: str, answer: str) -> bool:
    """Whether the outcome check grades ``answer`` correct against the gold ``representative``."""
    return is_correct("\\boxed{" + answer + "}", representative) is True


def select_random(n: int, seed: int, key: str) -> int:
    """A uniformly drawn index in [0, n), reproducible per (seed, key) and independent of the problem order.

    Raises:
        ValueError: n < 1.
    """
    if n < 1:
        raise ValueError(f"select_random needs at least one candidate, got n={n}")
    return random.Random(f"{seed}:{key}").randrange(n)
