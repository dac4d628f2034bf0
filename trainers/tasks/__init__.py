"""The GRPO job of `train_grpo.py` (`procrl.scripts.train_grpo`), its settings, its reward registry and its two
tasks, each a config dataclass and an opener.

- the job (`procrl.trainers.tasks.job`: `GRPOJob`, `run_grpo_job`): load the policy, open the task, build the
  rewards, evaluate before, train with `ProcessGRPOTrainer`, evaluate after, plot `curves.png`; it returns the
  summary and the files it wrote, which the command records in `run.json` (import it from its module: this
  package stays light, since `procrl.trainers.frs_callback`, which the job uses, imports
  `procrl.trainers.tasks.arguments`);
- the settings (`procrl.trainers.tasks.arguments`): `GRPOScriptArguments` (task, data, rewards),
  `MathTaskArguments`, `SearchTaskArguments`, and `TASKS` (task name -> opener);
- the rewards (`procrl.trainers.tasks.rewards`): the one registry `REWARDS` (name -> how the reward and, for
  pum / stepgap, the step scorer are built), import paths of your own rewards and step scorers, `build_rewards`;
- math (`procrl.trainers.tasks.math`): single-turn math problems (`load_math_dataset`), the outcome check of the
  run's `answer_extraction`, greedy before/after evaluation sets;
- search (`procrl.trainers.tasks.search`): multi-hop QA with search episodes (`SearchEnvironment`), the StepGap
  judge, NLI and verifier, EM as the outcome check.

The two task modules never import each other. Each opener is a context manager yielding an object with the
attributes of `GRPOTask` and closing what it started (the local judge server) on exit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

__all__ = ["GRPOTask"]


class GRPOTask(Protocol):
    """What the GRPO job reads from an opened task.

    Attributes:
        train_dataset: training rows (`prompt` plus the columns the rewards read).
        eval_sets: `(label, dataset, max_new_tokens)` for the greedy before/after evaluation (empty: none).
        outcome_func: the correctness check behind `task/accuracy` and the evaluation accuracy (TRL reward
            signature, 1.0 / 0.0 / None per completion).
        rollout_func: the trainer's `rollout_func`, or None for procrl's default single-turn `ProcessRollout()`.
        frs_template: the prompt template FRS problems get, or None when FRS does not apply to the task.
    """

    train_dataset: Any
    eval_sets: list[tuple[str, Any, int]]
    outcome_func: Callable
    rollout_func: Callable | None
    frs_template: str | None

    def summary(self) -> dict | None:
        """Task-specific facts for the run's summary (None: nothing to add)."""
