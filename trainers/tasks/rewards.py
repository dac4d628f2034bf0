"""How `reward_funcs` names become TRL reward functions and a step scorer: the mechanics behind the one reward
registry of the GRPO entry point (`procrl.scripts.train_grpo.REWARDS`, a dict name -> `RewardEntry`).

A registry entry names, by dotted path, the library callable that builds the reward and the settings it is called
with, so a module is imported only when a run names its reward (the outcome + PiCSAR demo never imports the PUM or
StepGap code). A name that is not in the registry but contains "." or ":" is a user reward function,
`package.module:function` or `package.module.function`, used as it is.

In `advantage_mode: process | mixed`, an entry with a `step` build (pum, stepgap) becomes the trainer's step
scorer instead of a scalar reward, and its `reward_weights` entry is dropped: `scalar_reward_weights` derives the
weights TRL gets (one per scalar reward) before `ProcessGRPOConfig` is built (DESIGN §4 "Process advantages").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from procrl.utils import get_logger, import_object

logger = get_logger(__name__)

__all__ = ["Build", "RewardEntry", "RewardSet", "build_rewards", "reward_roles", "scalar_reward_weights"]

PROCESS_MODES = ("process", "mixed")


@dataclass(frozen=True)
class Build:
    """One way to build a reward function (or step scorer) from a run's settings.

    Attributes:
        target: "package.module:name" of a library callable; with `settings` None, the object there is the reward
            function itself (e.g. `procrl.rewards.qa:em_reward`).
        settings: `(script_args, task) -> keyword arguments` of the call (the run's `GRPOScriptArguments` and the
            opened task, e.g. the search task's verifier).
        load: an attribute read once right after building, to load a model now rather than at the first reward
            call ("pum": a bad `pum_model` then fails before evaluation and training, not after).
    """

    target: str
    settings: Callable[[Any, Any], dict[str, Any]] | None = None
    load: str | None = None

    def __call__(self, script_args, task) -> Callable:
        obj = import_object(self.target)
        func = obj if self.settings is None else obj(**self.settings(script_args, task))
        if self.load is not None:
            getattr(func, self.load)
        return func


@dataclass(frozen=True)
class RewardEntry:
    """A registry entry: the task whose data and settings the reward needs, its scalar build and, for rewards that
    score steps, the step-scorer build used in process/mixed mode."""

    task: str
    scalar: Build
    step: Build | None = None


class RewardSet(NamedTuple):
    """What a run trains with: TRL reward functions in `reward_funcs` order (without the step scorer), their weights
    (one each), and the step scorer or None."""

    funcs: list[Callable]
    weights: list[float]
    step_reward_func: Callable | None


def reward_roles(
    registry: Mapping[str, RewardEntry], task: str, names: Sequence[str], advantage_mode: str
) -> list[bool]:
    """For each `reward_funcs` entry: True when it becomes the step scorer (a registry entry of `task` with a step
    build, in process/mixed mode), False when it is a scalar TRL reward.

    Raises:
        ValueError: process/mixed mode without a step scorer among the names, or with nothing else left as a scalar
            reward (TRL needs at least one).
    """
    roles = [
        advantage_mode in PROCESS_MODES
        and name in registry
        and registry[name].task == task
        and bool(registry[name].step)
        for name in names
    ]
    if advantage_mode in PROCESS_MODES:
        steps = [n for n, e in registry.items() if e.task == task and e.step is not None]
        scalars = [n for n, e in registry.items() if e.task == task and e.step is None]
        if not any(roles):
            raise ValueError(
                f"advantage_mode={advantage_mode!r} needs a step scorer: add it to reward_funcs "
                f"({' or '.join(map(repr, steps)) or 'none for this task'}; it gives the per-step rewards and is not "
                "also a scalar reward), or use advantage_mode: outcome."
            )
        if all(roles):
            raise ValueError(
                f"advantage_mode={advantage_mode!r}: add a scalar reward besides the step scorer, e.g. reward_funcs: "
                f"[{', '.join([*scalars[:1], *steps[:1]])}]."
            )
    return roles


def scalar_reward_weights(
    registry: Mapping[str, RewardEntry],
    task: str,
    names: Sequence[str],
    weights: Sequence[float] | None,
    advantage_mode: str,
) -> list[float] | None:
    """The `reward_weights` TRL gets: the given ones (one per `reward_funcs` entry) without the step scorer's.

    None stays None (TRL weighs every reward 1.0). Raises `ValueError` when the counts differ, and as
    `reward_roles` does.

    >>> entries = {"outcome": RewardEntry("math", Build("m:o")), "pum": RewardEntry("math", Build("m:p"), Build("m:s"))}
    >>> scalar_reward_weights(entries, "math", ["outcome", "pum"], [1.0, 0.5], "mixed")
    [1.0]
    """
    roles = reward_roles(registry, task, names, advantage_mode)
    if weights is None:
        return None
    if len(weights) != len(names):
        raise ValueError(f"reward_weights {list(weights)} must have one weight per reward_funcs entry {list(names)}.")
    scalar = [w for w, is_step in zip(weights, roles, strict=True) if not is_step]
    if len(scalar) != len(weights):
        logger.info("advantage_mode=%s: %s is the step scorer; reward_weights -> %s", advantage_mode,
                    [n for n, is_step in zip(names, roles, strict=True) if is_step], scalar)  # fmt: skip
    return scalar


def build_rewards(
    registry: Mapping[str, RewardEntry],
    script_args,
    task,
    advantage_mode: str,
    weights: Sequence[float] | None,
) -> RewardSet:
    """Build the rewards of `script_args.reward_funcs` for an opened task.

    Args:
        registry: name -> `RewardEntry`.
        script_args: the run's `GRPOScriptArguments` (`task`, `reward_funcs` and the reward settings).
        task: the opened task (`procrl.trainers.tasks.GRPOTask`); the search rewards read its verifier.
        advantage_mode: `ProcessGRPOConfig.advantage_mode`.
        weights: `ProcessGRPOConfig.reward_weights`, already one per scalar reward (`scalar_reward_weights`);
            None = 1.0 each.

    Raises:
        ValueError: a name that is neither in the registry nor a dotted path, as `reward_roles`, or a weight count
            that does not match the scalar rewards.
    """
    names = list(script_args.reward_funcs)
    funcs, step_reward_func = [], None
    for name, is_step in zip(names, reward_roles(registry, script_args.task, names, advantage_mode), strict=True):
        entry = registry.get(name)
        if is_step:
            step_reward_func = entry.step(script_args, task)
        elif entry is not None:
            funcs.append(entry.scalar(script_args, task))
        elif "." in name or ":" in name:
            funcs.append(import_object(name))
        else:
            raise ValueError(f"unknown reward function {name!r}: use one of {sorted(registry)} or 'module.func'")
    weights = [1.0] * len(funcs) if weights is None else list(weights)
    if len(weights) != len(funcs):
        raise ValueError(f"reward_weights {weights} must have one weight per scalar reward of reward_funcs {names}.")
    return RewardSet(funcs, weights, step_reward_func)
