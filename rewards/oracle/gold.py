"""Gold steps of a step-checkable problem: the contract between the task generator and the step oracle.

A step-checkable problem (`procrl.data_builders.arithmetic`) carries its gold solution as a list of `GoldStep`s,
`a op b = result` with integer operands. In a dataset the list travels as the `gold_steps` column, a JSON string
(`gold_steps_to_json`), so every row has the same feature type and TRL passes it to rewards and step scorers as a
keyword argument like any other column. Only the step oracle (`procrl.rewards.oracle`) reads it; a task without
gold steps has no `gold_steps` column, and the oracle refuses it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

__all__ = ["GOLD_STEPS_COLUMN", "OPERATORS", "GoldStep", "apply_operator", "gold_steps_from_json", "gold_steps_to_json"]

GOLD_STEPS_COLUMN = "gold_steps"
OPERATORS = ("+", "-", "*", "/")


def apply_operator(a: int, op: str, b: int) -> int | None:
    """`a op b` over the integers: None for a division that is not exact (or by zero) and an unknown operator.

    >>> apply_operator(14, "-", 9), apply_operator(12, "/", 4), apply_operator(7, "/", 2)
    (5, 3, None)
    """
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if op == "/":
        return a // b if b != 0 and a % b == 0 else None
    return None


@dataclass(frozen=True)
class GoldStep:
    """One gold step `a op b = result` (integers; `op` one of `OPERATORS`).

    Raises:
        ValueError: an unknown operator or a result that is not `a op b`.

    >>> GoldStep(14, "-", 9, 5)
    GoldStep(a=14, op='-', b=9, result=5)
    """

    a: int
    op: str
    b: int
    result: int

    def __post_init__(self) -> None:
        if self.op not in OPERATORS:
            raise ValueError(f"GoldStep operator must be one of {OPERATORS}, got {self.op!r}.")
        if apply_operator(self.a, self.op, self.b) != self.result:
            raise ValueError(f"GoldStep {self.a} {self.op} {self.b} = {self.result} does not hold.")

    def equation(self) -> str:
        """The step as a trace writes it: `"14 - 9 = 5"`."""
        return f"{self.a} {self.op} {self.b} = {self.result}"


def gold_steps_to_json(steps: list[GoldStep]) -> str:
    """The `gold_steps` column value: `[[a, op, b, result], ...]` as compact JSON.

    >>> gold_steps_to_json([GoldStep(3, "+", 7, 10)])
    '[[3,"+",7,10]]'
    """
    return json.dumps([[s.a, s.op, s.b, s.result] for s in steps], separators=(",", ":"))


def gold_steps_from_json(value: str) -> list[GoldStep]:
    """Parse a `gold_steps` column value back into `GoldStep`s.

    Raises:
        ValueError: not a JSON list of `[a, op, b, result]` entries, or a step that does not hold.

    >>> gold_steps_from_json('[[3,"+",7,10],[10,"*",2,20]]')[1]
    GoldStep(a=10, op='*', b=2, result=20)
    """
    try:
        rows = json.loads(value)
    except (TypeError, json.JSONDecodeError) as err:
        raise ValueError(f"gold_steps must be a JSON string like '[[3,\"+\",7,10]]', got {value!r}.") from err
    if not isinstance(rows, list) or not all(isinstance(r, list) and len(r) == 4 for r in rows):
        raise ValueError(f"gold_steps must be a JSON list of [a, op, b, result] entries, got {value!r}.")
    return [GoldStep(int(a), str(op), int(b), int(c)) for a, op, b, c in rows]
