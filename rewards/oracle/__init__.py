"""The step oracle: programmatic step labels for tasks that carry gold steps (docs/architecture.md "Step oracle").

Every name here says "oracle": these labels come from arithmetic and the gold solution, never from a learned
judge, and they apply only to problems with a `gold_steps` column (`procrl.data_builders.arithmetic`).

- gold.py: `GoldStep`, the `gold_steps` column (JSON) — the contract with the task generator;
- parse.py: `parse_steps`, the steps a completion writes (`WrittenStep`, with character spans);
- labels.py: `oracle_labels` → `OracleLabels` (valid, grounded, on_track per step; first_error; ProcessAcc);
- scorer.py: `oracle_process_reward` (ProcessAcc), `OracleReward` (Φ_K) and `OracleStepRewards` (bounded per-step
  rewards Φ_k − Φ_{k−1}) for GRPO; registry names `oracle_process` and `oracle`.
"""

from procrl.rewards.oracle.gold import (
    GOLD_STEPS_COLUMN,
    OPERATORS,
    GoldStep,
    apply_operator,
    gold_steps_from_json,
    gold_steps_to_json,
)
from procrl.rewards.oracle.labels import OracleLabels, OracleStep, known_numbers, label_steps, oracle_labels
from procrl.rewards.oracle.parse import WrittenStep, format_number, parse_numbers, parse_steps
from procrl.rewards.oracle.scorer import (
    DEFAULT_ERROR_PENALTY,
    OracleReward,
    OracleStepRewards,
    get_oracle_reward,
    get_oracle_step_rewards,
    oracle_process_reward,
)

__all__ = [
    "DEFAULT_ERROR_PENALTY",
    "GOLD_STEPS_COLUMN",
    "OPERATORS",
    "GoldStep",
    "OracleLabels",
    "OracleReward",
    "OracleStep",
    "OracleStepRewards",
    "WrittenStep",
    "apply_operator",
    "format_number",
    "get_oracle_reward",
    "get_oracle_step_rewards",
    "gold_steps_from_json",
    "gold_steps_to_json",
    "known_numbers",
    "label_steps",
    "oracle_labels",
    "oracle_process_reward",
    "parse_numbers",
    "parse_steps",
]
