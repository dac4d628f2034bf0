"""The math task of `train_grpo.py` (`task: math`, the default): single-turn math word problems.

`open_math_task(script_args, math_args, output_dir=...)` loads the training problems (`load_math_dataset`, columns
`prompt`, `answer`, `question`, ...) with the run's prompt template and, when `run_eval`, the greedy evaluation sets
(`eval_sets`, name:start:end:max_new_tokens); the outcome check is `get_outcome_reward(answer_extraction)`, the
same object as the `outcome` reward (so the trainer reuses that reward's column for `task/accuracy`). Rollouts are
procrl's default single-turn `ProcessRollout`; FRS (`frs_every_n_steps` > 0) judges problems in the same template.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from procrl.data_builders.datasets import load_math_dataset, parse_eval_set, resolve_template
from procrl.rewards.outcome import get_outcome_reward
from procrl.trainers.tasks.arguments import MathTaskArguments

__all__ = ["MathTask", "open_math_task"]


@dataclass
class MathTask:
    """An opened math task (the attributes of `procrl.trainers.tasks.GRPOTask`).

    Attributes:
        train_dataset: the training problems.
        eval_sets: `(label, dataset, max_new_tokens)` per evaluation set, label `name[start:end]` with the rows
            actually loaded; empty when `run_eval` is false.
        outcome_func: `get_outcome_reward(answer_extraction)`.
        frs_template: the resolved prompt template (FRS problems are prompted alike).
    """

    train_dataset: Any
    outcome_func: Callable
    frs_template: str
    eval_sets: list[tuple[str, Any, int]] = field(default_factory=list)
    rollout_func: Callable | None = None

    def summary(self) -> dict | None:
        return None


@contextlib.contextmanager
def open_math_task(script_args, math_args: MathTaskArguments, *, output_dir: str | None = None) -> Iterator[MathTask]:
    """Load the math task (module docstring); nothing to close.

    Args:
        script_args: `GRPOScriptArguments` (reads `dataset_name`, `dataset_start`, `dataset_end`,
            `prompt_template`, `answer_extraction`).
        math_args: `MathTaskArguments`.
        output_dir: unused (the search task's judge cache goes there); accepted so both openers share a signature.

    Raises:
        ValueError, FileNotFoundError: from `load_math_dataset` (unknown set, bad row range, missing column).
    """
    del output_dir
    template = resolve_template(script_args.prompt_template)
    train_dataset = load_math_dataset(
        script_args.dataset_name,
        split=math_args.dataset_split,
        start=script_args.dataset_start,
        end=script_args.dataset_end,
        prompt_template=template,
        question_column=math_args.question_column,
        answer_column=math_args.answer_column,
    )
    eval_sets = []
    for spec in math_args.eval_sets if math_args.run_eval else []:
        name, start, end, tokens = parse_eval_set(spec)
        data = load_math_dataset(name, start=start, end=end, prompt_template=template)
        eval_sets.append((f"{name}[{start}:{start + len(data)}]", data, tokens))
    yield MathTask(
        train_dataset=train_dataset,
        outcome_func=get_outcome_reward(script_args.answer_extraction),
        frs_template=template,
        eval_sets=eval_sets,
    )
