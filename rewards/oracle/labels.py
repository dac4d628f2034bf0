"""Oracle labels of a completion's written steps and its ProcessAcc (docs/architecture.md "Step oracle").

For a problem with gold steps g_1..g_M (`GoldStep`, `procrl.rewards.oracle.gold`) and the steps s_1..s_K a
completion writes (`parse_steps`), each written step gets three labels:

* **valid**: its expression's exact value equals the written result (`7 / 2 = 3.5` holds, `10 / 3 = 3.33` does not,
  a division by zero never does);
* **grounded**: every operand is a *known number*: a number written in the problem text, a given operand of a gold
  step (an operand no earlier gold step produces, so a constant the problem states in words still counts), or the
  result of an EARLIER written step that is valid and grounded itself (grounding propagates: the result of an
  invented computation is not known);
* **on_track**: its written result is the result of some gold step (independent of valid and grounded; a step can
  be on track with wrong arithmetic).

An **error** is a step that is not valid or not grounded; `first_error` is the index of the first one (None when
there is none). A valid, grounded step that is off track is NOT an error; it is counted apart (`n_off_track`).

**ProcessAcc** = (gold steps credited) / M ∈ [0, 1]. A written step that is valid and grounded credits one gold step
with the same result value. Gold results may repeat (two gold steps giving 12): the credit for a value v is
min(#gold steps with result v, #distinct computations among the valid, grounded written steps with result v), where
a computation is the normalised expression, with the operands of a single `+` or `*` sorted (`3 * 4` and `4 * 3`
are one computation). So repeating a step, or padding with steps that are off track ("2 + 2 = 4"), never raises
ProcessAcc, and two gold steps with one value need two different computations of it. The credited written steps are,
per value, the first such computations in written order; each is assigned the gold step with the same computation
if one is free, else the first free gold step of that value (`OracleStep.gold_index`, `OracleLabels.gold_matched`).
A written step's labels depend only on the steps before it, so ProcessAcc over the first k written steps is the
share credited among them (`OracleLabels.process_acc_at`), non-decreasing in k.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction

from procrl.rewards.oracle.gold import GoldStep
from procrl.rewards.oracle.parse import WrittenStep, format_number, parse_numbers, parse_steps

__all__ = ["OracleLabels", "OracleStep", "known_numbers", "label_steps", "oracle_labels"]


@dataclass(frozen=True)
class OracleStep:
    """One written step with its oracle labels.

    Attributes:
        span: `(start, end)` character offsets of the step in the completion text (0-based, end-exclusive).
        text: the step as written, `completion[start:end]`.
        operands: the expression's numbers (exact), left to right; two for a step `a op b = c`.
        ops: its operators, normalised to `+ - * /`; one for `a op b = c`, more for a combined step (`14 + 7 - 9`).
        expression: the normalised expression ("14 + 7").
        result: the written result (exact).
        valid: the expression's value equals `result`.
        grounded: every operand is a known number (problem, given gold operand, earlier valid grounded result).
        on_track: `result` is the result of some gold step.
        gold_index: the gold step this step is credited with in ProcessAcc (0-based), None when it earns no credit.
    """

    span: tuple[int, int]
    text: str
    operands: tuple[Fraction, ...]
    ops: tuple[str, ...]
    expression: str
    result: Fraction
    valid: bool
    grounded: bool
    on_track: bool
    gold_index: int | None

    @property
    def is_error(self) -> bool:
        """Not valid or not grounded (what `first_error` looks for)."""
        return not (self.valid and self.grounded)

    @property
    def equation(self) -> str:
        """The normalised step, "14 + 7 = 21"."""
        return f"{self.expression} = {format_number(self.result)}"


@dataclass(frozen=True)
class OracleLabels:
    """The oracle's verdict on one completion.

    Attributes:
        steps: the written steps in order (span ends strictly increase), each labelled.
        first_error: index into `steps` of the first error (not valid or not grounded); None when there is none.
        process_acc: the share of gold steps credited, in [0, 1] (0.0 for a completion without steps).
        gold_matched: per gold step, the index of the written step credited with it, or None.
        n_gold: the number of gold steps M (>= 1).
    """

    steps: tuple[OracleStep, ...]
    first_error: int | None
    process_acc: float
    gold_matched: tuple[int | None, ...]
    n_gold: int

    @property
    def n_errors(self) -> int:
        """Steps that are not valid or not grounded."""
        return sum(s.is_error for s in self.steps)

    @property
    def n_off_track(self) -> int:
        """Valid, grounded steps whose result is no gold result (not errors; padding shows here)."""
        return sum(not s.is_error and not s.on_track for s in self.steps)

    def process_acc_at(self, k: int) -> float:
        """ProcessAcc over the first k written steps (k = 0..len(steps)); `process_acc_at(len(steps)) ==
        process_acc`."""
        if not 0 <= k <= len(self.steps):
            raise ValueError(f"k must be in [0, {len(self.steps)}], got {k}")
        return sum(s.gold_index is not None for s in self.steps[:k]) / self.n_gold

    def potentials(self, penalty: float) -> list[float]:
        """Φ_0..Φ_K of the bounded step reward: Φ_k = ProcessAcc over steps 1..k − penalty·[an error among steps
        1..k], Φ_0 = 0 (docs/architecture.md "Step oracle"). Each Φ_k ∈ [−penalty, 1].

        Raises:
            ValueError: a negative penalty.
        """
        if not penalty >= 0:
            raise ValueError(f"the oracle's error penalty must be >= 0, got {penalty}")
        out = [0.0]
        for k in range(1, len(self.steps) + 1):
            erred = self.first_error is not None and self.first_error < k
            out.append(self.process_acc_at(k) - (penalty if erred else 0.0))
        return out

    def score(self, penalty: float) -> float:
        """Φ_K = ProcessAcc − penalty·[an error anywhere], the sum of the scorer's per-step rewards."""
        return self.potentials(penalty)[-1]


def known_numbers(question: str, gold: Sequence[GoldStep]) -> set[Fraction]:
    """The numbers a first step may use: those written in `question` and the gold steps' given operands (operands
    that no earlier gold step produces).

    >>> sorted(int(v) for v in known_numbers("Tom has 14 apples, gets 7 and eats 9.", [GoldStep(14, "+", 7, 21),
    ...                                                                               GoldStep(21, "-", 9, 12)]))
    [7, 9, 14]
    """
    known = set(parse_numbers(question))
    produced: set[int] = set()
    for step in gold:
        known.update(Fraction(x) for x in (step.a, step.b) if x not in produced)
        produced.add(step.result)
    return known


def _computation(ops: Sequence[str], operands: Sequence[Fraction], expression: str) -> tuple:
    """What counts as one computation: a single + or * with sorted operands, else the normalised expression."""
    if len(ops) == 1 and ops[0] in "+*":
        return (ops[0], *sorted(operands))
    if len(ops) == 1:
        return (ops[0], *operands)
    return (expression,)


def label_steps(written: Iterable[WrittenStep], text: str, question: str, gold: Sequence[GoldStep]) -> OracleLabels:
    """Label parsed steps (`parse_steps(text)`) against the problem and its gold steps (see the module docstring).

    Raises:
        ValueError: no gold step.
    """
    gold = list(gold)
    if not gold:
        raise ValueError("the step oracle needs at least one gold step; this problem has none.")
    known = known_numbers(question, gold)
    by_value: dict[Fraction, list[int]] = {}
    for j, g in enumerate(gold):
        by_value.setdefault(Fraction(g.result), []).append(j)
    seen: dict[Fraction, set[tuple]] = {}  # per result value, the computations of valid grounded steps so far
    rows = []  # (written step, valid, grounded, on_track, its computation when credited else None)
    for s in written:
        valid = s.value is not None and s.value == s.result
        grounded = all(x in known for x in s.operands)
        credit = None
        if valid and grounded:
            known.add(s.result)
            computations = seen.setdefault(s.result, set())
            key = _computation(s.ops, s.operands, s.expression)
            if key not in computations and len(computations) < len(by_value.get(s.result, ())):
                credit = key
            computations.add(key)
        rows.append((s, valid, grounded, s.result in by_value, credit))
    gold_matched: list[int | None] = [None] * len(gold)
    credited = [i for i, row in enumerate(rows) if row[4] is not None]
    for exact in (True, False):  # the gold step with the same computation first, then the first free one
        for i in credited:
            if i in gold_matched:
                continue
            value, key = rows[i][0].result, rows[i][4]
            free = [j for j in by_value[value] if gold_matched[j] is None]
            same = [j for j in free if _computation((gold[j].op,), (gold[j].a, gold[j].b), "") == key]
            if same or (free and not exact):
                gold_matched[(same or free)[0]] = i
    gold_index = {i: j for j, i in enumerate(gold_matched) if i is not None}
    steps = tuple(
        OracleStep(s.span, text[s.span[0] : s.span[1]], s.operands, s.ops, s.expression, s.result, valid, grounded,
                   on_track, gold_index.get(i))
        for i, (s, valid, grounded, on_track, _) in enumerate(rows)
    )  # fmt: skip
    first_error = next((i for i, step in enumerate(steps) if step.is_error), None)
    return OracleLabels(steps, first_error, len(gold_index) / len(gold), tuple(gold_matched), len(gold))


def oracle_labels(
    completion_text: str, question: str, gold_steps: Sequence[GoldStep], *, truncated: bool = False
) -> OracleLabels:
    """The oracle labels of one completion: its written steps (`parse_steps`), labelled against the problem.

    Args:
        completion_text: the completion as text (any string; a cut or empty one gives fewer or no steps).
        question: the problem text (the `question` column; its numbers are the known numbers with the gold steps'
            given operands).
        gold_steps: the problem's gold steps (`gold_steps_from_json` of the `gold_steps` column); at least one.
        truncated: the completion was cut by the token budget (a result at the very end of the text is dropped).

    Returns:
        `OracleLabels` (steps, first_error, process_acc, gold_matched, n_gold).

    Raises:
        ValueError: no gold step.

    >>> from procrl.rewards.oracle.gold import gold_steps_from_json
    >>> gold = gold_steps_from_json('[[14,"+",7,21],[21,"-",9,12]]')
    >>> labels = oracle_labels("14 + 7 = 22. 22 - 9 = 13. The answer is 13.", "14 + 7, then - 9?", gold)
    >>> [(s.valid, s.grounded, s.on_track) for s in labels.steps], labels.first_error, labels.process_acc
    ([(False, True, False), (True, False, False)], 0, 0.0)
    >>> oracle_labels("14 + 7 = 21. 21 - 9 = 12. The answer is 12.", "14 + 7, then - 9?", gold).process_acc
    1.0
    """
    return label_steps(parse_steps(completion_text, truncated=truncated), completion_text, question, gold_steps)
