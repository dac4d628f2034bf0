"""Outcome reward for math: 1.0 when the final answer matches the gold answer, 0.0 otherwise, None when
the gold answer cannot be parsed (docs/architecture.md "Outcome checking", §4 "Outcome").

Pipeline
--------
1. ``extract_answer`` finds the final answer of a completion with plain regular expressions (linear time):
   the last ``\\boxed{...}``/``\\fbox{...}`` (or brace-less ``\\boxed 2``), else the last "The answer is ...",
   else the text after the last ``####`` (anywhere in a line), else None. There is deliberately no "last number
   anywhere" fallback: a policy could learn to spray numbers. That is ``answer_extraction="strict"``, the
   default; ``"flexible"`` (``get_outcome_reward("flexible")``) adds the last number of the final sentence, unless it
   is part of an expression, hedged or a cut-off list marker. Only the last ``TAIL_CHARS`` (4,000) characters of a
   completion are searched.
2. ``parse_gold`` reads a gold answer: GSM8K solutions (``#### N``, ``<<48/2=24>>`` annotations ignored),
   plain numbers, MATH-style LaTeX. Prose golds ("see figure", "N/A") are unparseable, never reward 1.0.
3. Both sides go through math-verify (``parse`` with ``LatexExtractionConfig`` on ``\\boxed{<answer>}``,
   then ``verify(gold, answer)``); we never compare symbolically ourselves. Numbers are normalised first
   (sign, ``$``, thousands separators only in 3-digit groups, trailing period), so "1,25" is not 125. Two
   numbers (also inside tuples, finite sets and intervals) are compared here instead, because math-verify's
   numeric comparison has absolute tolerances (it pays 1/2^98 for 1/2^99): exactly when both are rational, a
   decimal against an irrational value by correct rounding, two exact values relatively at 50 digits (the rules are
   in ``is_correct``).
4. Every math-verify call runs under a wall-clock budget of ``DEFAULT_TIMEOUT_S`` seconds, from any thread (a
   ``SIGALRM`` timer in the main thread, a helper process elsewhere; why not math-verify's own limits: see
   `procrl.rewards.outcome.deadline`). A check that times out (or fails inside math-verify) counts as wrong
   (0.0); a gold whose parse times out is unparseable (None). Extracted answers and golds longer than
   ``MAX_ANSWER_CHARS`` are ignored.

Modules, one job each: ``extract`` (answer extraction, answer values for math-verify), ``compare`` (math-verify and
the numeric rules), ``deadline`` (time limits, worker processes), ``verify`` (``parse_gold``, ``is_correct`` and the
TRL reward functions built on them). Their public names are all importable from here.

``DEFAULT_TIMEOUT_S`` is read at call time: ``procrl.rewards.outcome.DEFAULT_TIMEOUT_S = 10.0`` sets the budget of
every later check (it is stored in `procrl.rewards.outcome.deadline`).
"""

from __future__ import annotations

import sys
import types

from procrl.rewards.outcome import deadline as _deadline
from procrl.rewards.outcome.extract import ANSWER_EXTRACTION_MODES, MAX_ANSWER_CHARS, TAIL_CHARS, extract_answer
from procrl.rewards.outcome.verify import OutcomeReward, get_outcome_reward, is_correct, outcome_reward, parse_gold

__all__ = [
    "ANSWER_EXTRACTION_MODES",
    "DEFAULT_TIMEOUT_S",
    "MAX_ANSWER_CHARS",
    "OutcomeReward",
    "TAIL_CHARS",
    "extract_answer",
    "get_outcome_reward",
    "is_correct",
    "outcome_reward",
    "parse_gold",
]


class _OutcomePackage(types.ModuleType):
    """This package as a module object whose ``DEFAULT_TIMEOUT_S`` reads and writes the one setting in
    `procrl.rewards.outcome.deadline`, so setting it here still changes the budget of every later check."""

    @property
    def DEFAULT_TIMEOUT_S(self) -> float:  # noqa: N802 - the public constant's name
        return _deadline.DEFAULT_TIMEOUT_S

    @DEFAULT_TIMEOUT_S.setter
    def DEFAULT_TIMEOUT_S(self, value: float) -> None:  # noqa: N802
        _deadline.DEFAULT_TIMEOUT_S = value


sys.modules[__name__].__class__ = _OutcomePackage
