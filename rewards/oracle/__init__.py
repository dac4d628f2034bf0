"""The step oracle: programmatic step labels for tasks that carry gold steps (docs/architecture.md "Step oracle").

Every name here says "oracle": these labels come from arithmetic and the gold solution, never from a learned
judge, and they apply only to problems with a `gold_steps` column (`procrl.data_builders.arithmetic`).
"""

from procrl.rewards.oracle.gold import (
    GOLD_STEPS_COLUMN,
    OPERATORS,
    GoldStep,
    apply_operator,
    gold_steps_from_json,
    gold_steps_to_json,
)

__all__ = [
    "GOLD_STEPS_COLUMN",
    "OPERATORS",
    "GoldStep",
    "apply_operator",
    "gold_steps_from_json",
    "gold_steps_to_json",
]
